#!/usr/bin/env bash
# Regenerates requirements.lock from requirements.in: bash scripts/lock.sh
#
# requirements.in holds the top-level pins (edit it to add or bump a package); requirements.lock pins
# every package they pull in, transitively (protobuf, grpcio, ...), each with the sha256 of every file
# PyPI publishes for that version, and scripts/setup.sh installs it with `pip install --require-hashes`.
# After editing requirements.in (or merging branches that did), run this and commit both files;
# tests/ci/test_lock.py fails while a top-level pin is missing from the lock or differs from it.
#
# pip-compile (pip-tools, pinned below) runs from its own virtualenv under ~/.cache/supercluster, so the
# lock tooling is not part of the program's environment. It resolves for this machine's python3 (the one
# scripts/setup.sh builds .venv with) and needs PyPI, nothing else.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PIP_TOOLS_VERSION=7.6.2
PYTHON=${PYTHON:-python3}
tools="${XDG_CACHE_HOME:-$HOME/.cache}/supercluster/pip-tools-$PIP_TOOLS_VERSION-$("$PYTHON" -c 'import sys; print("py%d%d" % sys.version_info[:2])')"
if [ ! -x "$tools/bin/pip-compile" ]; then
  "$PYTHON" -m venv "$tools"
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check "pip-tools==$PIP_TOOLS_VERSION"
fi
# --strip-extras: plain pins, as `pip install --require-hashes` wants them; --no-emit-index-url: no host
# named in the file; --allow-unsafe: pip and setuptools pinned too when a package needs them (a
# --require-hashes install refuses anything unpinned); --no-emit-find-links: no local wheel folder either; CUSTOM_COMPILE_COMMAND: the header names this script, not pip-compile's arguments.
CUSTOM_COMPILE_COMMAND="bash scripts/lock.sh" "$tools/bin/pip-compile" --quiet --generate-hashes --allow-unsafe \
  --strip-extras --no-emit-index-url --no-emit-find-links --resolver=backtracking --output-file requirements.lock requirements.in
