"""Writes typings/azure_inputs.pyi: the input types of every azure-native resource the program
declares by type token, as TypedDicts, and ``azure``'s overloads, one per type token.

``components/declare.py`` declares resources by type token with the provider's own (camelCase)
property names, so nothing checked a property's spelling before the plan ran (tests/components/
test_declare.py checks the registered plans afterwards). With these types, mypy and an editor check
each ``declare.azure("network:VirtualNetwork", name, {...})`` call as they would the typed class.

The types come from the installed azure-native SDK's own input classes (``@pulumi.input_type``), read
through the SDK's own helpers, so they change with the pinned SDK: after bumping pulumi-azure-native,
or declaring a new type token, run ``.venv/bin/python scripts/generate_azure_inputs.py`` and commit
the result (tests/components/test_azure_inputs.py fails until then).

Usage: python scripts/generate_azure_inputs.py [--check]
"""

from __future__ import annotations

import argparse
import collections.abc
import enum
import importlib
import re
import sys
import typing
from pathlib import Path
from typing import Any

from pulumi import _types

PROJECT_DIR = Path(__file__).resolve().parents[1]
OUTPUT = PROJECT_DIR / "typings" / "azure_inputs.pyi"
# The literal type token of each ``declare.azure("<module>:<Kind>", ...)`` call.
CALL = re.compile(r"declare\.azure\(\s*\"([a-z]+:[A-Za-z]+)\"")
SCALARS = {str: "str", int: "int", float: "float", bool: "bool"}


def used_kinds(project_dir: Path = PROJECT_DIR) -> list[str]:
    sources = [*sorted((project_dir / "components").glob("*.py")), project_dir / "__main__.py"]
    return sorted({kind for path in sources for kind in CALL.findall(path.read_text())})


def args_class(kind: str) -> type:
    """The resource's own Args class (``RouteInitArgs`` where the module has a nested ``RouteArgs`` too)."""
    module_path, name = kind.split(":")
    resource = getattr(importlib.import_module(f"pulumi_azure_native.{module_path}"), name)
    module = importlib.import_module(resource.__module__)
    return getattr(module, next(n for n in module.__all__ if n in (f"{name}Args", f"{name}InitArgs")))


class Writer:
    def __init__(self) -> None:
        self.classes: dict[str, str] = {}  # TypedDict name -> its source
        self.names: dict[type, str] = {}

    def typed_dict(self, cls: type, name: str | None = None) -> str:
        if cls in self.names:
            return self.names[cls]
        module = cls.__module__.split(".")[1]  # pulumi_azure_native.<module>._inputs
        name = name or f"{module.capitalize()}{cls.__name__.removesuffix('Args')}"
        self.names[cls] = name
        types = _types.input_type_types(cls)
        lines = [f"class {name}(TypedDict, total=False):"]
        for prop in sorted(_types.input_type_py_to_pulumi_names(cls).values()):
            lines.append(f"    {prop}: Value[{self.annotation(types.get(prop, Any))}]")
        self.classes[name] = "\n".join(lines if len(lines) > 1 else [*lines, "    pass"])
        return name

    def nested(self, cls: type) -> str:
        """A nested input type: its TypedDict, or any mapping. The program builds some nested values in
        helpers (``infra/`` returns plain dicts and cannot import these types), so nested keys guide an
        editor but are not enforced; a resource's own properties are (its TypedDict alone)."""
        return f"{self.typed_dict(cls)} | Mapping[str, Any]"

    def annotation(self, typ: Any) -> str:
        typ = _types.unwrap_type(typ)
        origin, args = typing.get_origin(typ), typing.get_args(typ)
        if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
            inputs = [a for a in args if _types.is_input_type(a)]
            if inputs:  # an Args class and its TypedDict twin: the class has the provider's names
                return self.nested(inputs[0])
            members = dict.fromkeys(self.annotation(a) for a in args if a is not type(None))
            if "str" in members:  # Union[str, "SomeEnum"]: the enum's values are strings
                members.pop("Any", None)
            return "Any" if "Any" in members else " | ".join(members)
        if _types.is_input_type(typ):
            return self.nested(typ)
        if origin in (list, collections.abc.Sequence) and args:
            return f"Sequence[Value[{self.annotation(args[0])}]]"
        if origin in (dict, collections.abc.Mapping) and len(args) == 2:
            return f"Mapping[str, Value[{self.annotation(args[1])}]]"
        if isinstance(typ, type) and issubclass(typ, enum.Enum):
            return "str"  # the SDK's string enums: the provider takes their values
        return SCALARS.get(typ, "Any") if isinstance(typ, type) else "Any"


def render(kinds: list[str]) -> str:
    writer = Writer()
    resources = {kind: writer.typed_dict(args_class(kind), _resource_name(kind)) for kind in kinds}
    overloads = [
        f"@overload\n"
        f'def azure(kind: Literal["{kind}"], name: str, props: {name},\n'
        f"          opts: pulumi.ResourceOptions | None = None, *, outputs: Sequence[str] = ()) -> Declared: ..."
        for kind, name in resources.items()
    ]
    return "\n".join(
        [
            '"""Generated by scripts/generate_azure_inputs.py from the installed pulumi-azure-native; do not edit.',
            "",
            "The input types of the azure-native resources the program declares by type token, with the",
            "provider's property names, and ``declare.azure``'s overloads: mypy checks each call's properties.",
            "A type stub: nothing imports it at run time (``components/declare.py`` under ``TYPE_CHECKING``).",
            '"""',
            "",
            "from collections.abc import Awaitable, Mapping, Sequence",
            "from typing import Any, Literal, TypeAlias, TypedDict, TypeVar, overload",
            "",
            "import pulumi",
            "",
            "from components.declare import Declared",
            "",
            'T = TypeVar("T")',
            '# What a property takes: the value, an Output or awaitable of it, or None ("not set": declare drops it).',
            "Value: TypeAlias = T | pulumi.Output[Any] | Awaitable[Any] | None",
            "",
            "",
            *[source + "\n\n" for _, source in sorted(writer.classes.items())],
            *[overload + "\n" for overload in overloads],
        ]
    )


def _resource_name(kind: str) -> str:
    module_path, name = kind.split(":")
    return f"{module_path.capitalize()}{name}Props"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file is not up to date")
    args = parser.parse_args(argv)
    text = render(used_kinds())
    if args.check:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(
                f"{OUTPUT.relative_to(PROJECT_DIR)} is stale: run python scripts/generate_azure_inputs.py",
                file=sys.stderr,
            )
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
