#!/usr/bin/env bash
# Builds the Kubernetes release the staged-upgrade scenario moves the box to (tests/e2e/test_upgrade.py,
# docs/reliability.md) from tests/e2e/go-upgrade/kubernetes, and prints the folder that holds it:
# kube-apiserver, kube-controller-manager, kubelet, kube-proxy and kubectl. Only that scenario's
# command calls it, never CI's default path: its first run on a machine is a cold build of most of
# Kubernetes (about 12 minutes on 2 idle cores).
#
# Cached like scripts/build-binaries.sh, under its own key (a hash of this module and the Go
# version) in ${SUPERCLUSTER_CACHE:-~/.cache/supercluster}/upgrade-bin.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cache-folder.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/e2e/go-upgrade/kubernetes"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
command -v go >/dev/null || { echo "build-upgrade-binaries: the Go toolchain is missing (https://go.dev/doc/install)" >&2; exit 1; }

cache=${SUPERCLUSTER_CACHE:-$HOME/.cache/supercluster}/upgrade-bin
key=$( { go env GOVERSION; sha256sum go.mod go.sum; } | sha256sum | cut -c1-16)
out="$cache/$key"
claim_cache_folder "$out"

k8s_version=$(go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' k8s.io/kubernetes)
ldflags=$(bash ../../../../scripts/kubernetes-version-ldflags.sh "$k8s_version")
started=$(date +%s)
echo "build-upgrade-binaries: building Kubernetes $k8s_version into $out (first run on this machine: about 12 minutes on 2 cores)" >&2
go build -trimpath -ldflags "$ldflags" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
echo "build-upgrade-binaries: built in $(( $(date +%s) - started )) s" >&2
touch "$out/.complete"
echo "$out"
