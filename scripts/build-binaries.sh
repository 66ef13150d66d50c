#!/usr/bin/env bash
# Builds the upstream programs the cluster-in-a-box harness boots (tests/e2e) from their Go
# modules, at the versions tests/e2e/go/*/go.mod pin, and prints the folder that holds them.
#
# Cached by content: the folder's name is a hash of the Go modules (go.mod, go.sum, our own
# main packages) and the Go version, under ${SUPERCLUSTER_CACHE:-~/.cache/supercluster}, outside
# the clone so that every clone on a machine shares it. Only the first run on a machine pays the
# build (docs/cluster-in-a-box.md gives the times). GOTOOLCHAIN=local: the machine's Go builds
# these older releases; nothing else is downloaded but modules from the Go module proxy.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cache-folder.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/e2e/go"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
command -v go >/dev/null || { echo "build-binaries: the Go toolchain is missing (https://go.dev/doc/install)" >&2; exit 1; }

cache=${SUPERCLUSTER_CACHE:-$HOME/.cache/supercluster}/bin
key=$( { go env GOVERSION; find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 \
          | sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-16)
out="$cache/$key"
claim_cache_folder "$out"

# The version the binaries report (kubectl version, the apiserver's /version, kubelet's node info).
k8s_version=$(cd kubernetes && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' k8s.io/kubernetes)
ldflags=$(bash ../../../scripts/kubernetes-version-ldflags.sh "$k8s_version")

started=$(date +%s)
echo "build-binaries: building Kubernetes $k8s_version and etcd into $out (first run on this machine: about 12 minutes on 2 cores)" >&2
(cd kubernetes && go build -trimpath -ldflags "$ldflags" -o "$out/" \
   k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
   k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl ./cmd/...)
(cd etcd && go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3 \
   && go build -trimpath -ldflags "-s -w" -o "$out/etcdctl" go.etcd.io/etcd/etcdctl/v3)
bash ../../../scripts/build-node-runtime.sh "$out"
echo "build-binaries: built in $(( $(date +%s) - started )) s" >&2
touch "$out/.complete"
echo "$out"
