#!/usr/bin/env bash
# Prints the -ldflags that stamp a Kubernetes build with its release ($1, e.g. v1.33.4), so that
# kubectl version, the apiserver's /version and kubelet's node info report it: Kubernetes' release
# build sets these variables (hack/lib/version.sh). Used by build-binaries.sh and
# build-upgrade-binaries.sh.
set -euo pipefail
minor=$(echo "$1" | cut -d. -f2)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$1 -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
echo "$ldflags"
