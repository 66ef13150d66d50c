#!/usr/bin/env bash
# Builds what a real node of the cluster in a box runs besides kubelet and kube-proxy, from the Go
# modules under tests/e2e/go at the versions infra/catalog/versions.py pins for nodes, into folder $1:
# containerd and its shim (containerd/), runc (runc/, cgo with libseccomp as its release is), the
# CNI plugins (cni/ -> $1/cni/), CoreDNS (coredns/), and our own pause, probe and image-building
# programs (images/, the last with go-containerregistry). Called by build-binaries.sh, which caches $1 by content.
# Each binary reports the version its release stamps (`containerd --version`, `runc --version`,
# `portmap --version`), so the rendered install check accepts it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/e2e/go"
out=$1
version() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

containerd=$(version containerd github.com/containerd/containerd)
(cd containerd && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" -o "$out/" \
   -ldflags "-s -w -X github.com/containerd/containerd/version.Version=$containerd" \
   github.com/containerd/containerd/cmd/containerd github.com/containerd/containerd/cmd/containerd-shim-runc-v2 \
   github.com/containerd/containerd/cmd/ctr)

runc=$(version runc github.com/opencontainers/runc)
(cd runc && CGO_ENABLED=1 go build -trimpath -tags seccomp -o "$out/runc" \
   -ldflags "-s -w -X main.version=${runc#v}" github.com/opencontainers/runc)

plugins=$(version cni github.com/containernetworking/plugins)
mkdir -p "$out/cni"
(cd cni && CGO_ENABLED=0 go build -trimpath -o "$out/cni/" \
   -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$plugins" \
   github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/ipam/host-local \
   github.com/containernetworking/plugins/plugins/main/loopback github.com/containernetworking/plugins/plugins/meta/portmap)

(cd coredns && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/coredns" github.com/coredns/coredns)

(cd images && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/" ./cmd/...)
