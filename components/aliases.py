"""Drops azure-native's legacy API-version aliases before the Python SDK turns them into URNs.

Every azure-native resource declares an alias per historical API version (60 on a
VirtualNetwork, Subnet or NIC). ``pulumi.Resource.__init__`` eagerly collapses each
alias into a URN Output, about 45 ms of CPU per resource, paid by every preview, up
and test. Those aliases only matter to a stack that once held the versioned type
tokens (``azure-native:network/v20200601:VirtualNetwork``); supercluster has only
ever used the unversioned tokens, so they are dead weight. Aliases the program
declares itself (renames, re-parenting) are kept.

Decision recorded in README ("Performance"); tests/components/test_aliases.py proves
which aliases go and which stay.
"""

from __future__ import annotations

import re

import pulumi

# azure-native's versioned type tokens and its predecessor's: `azure-native:<module>/v2020...:<Type>`.
_LEGACY_TYPE = re.compile(r"^(azure-native:[a-z0-9]+/v\d{8}(preview)?:|azure-nextgen:)")


def is_legacy_version_alias(alias: object) -> bool:
    type_ = getattr(alias, "type_", None)
    # An alias that only changes the type token (name, parent, stack, project left as "same").
    same = all(getattr(alias, attr, ...) is ... for attr in ("name", "parent", "stack", "project"))
    return same and isinstance(type_, str) and bool(_LEGACY_TYPE.match(type_))


def drop_legacy_version_aliases(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
    if not args.type_.startswith("azure-native:") or not args.opts.aliases:
        return None
    kept = [alias for alias in args.opts.aliases if not is_legacy_version_alias(alias)]
    if len(kept) == len(args.opts.aliases):
        return None
    opts = args.opts._copy()
    opts.aliases = kept or None
    return pulumi.ResourceTransformationResult(args.props, opts)


def register() -> None:
    """Must run before the first resource is declared (the first line of ``__main__.py``)."""
    pulumi.runtime.register_stack_transformation(drop_legacy_version_aliases)
