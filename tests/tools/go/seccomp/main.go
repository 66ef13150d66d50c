// Prints, as JSON, the RuntimeDefault seccomp profile containerd gives a container with its default
// capabilities, computed by containerd's own contrib/seccomp package at the release the nodes run
// (infra/catalog/versions.py CONTAINERD_VERSION), for this machine's architecture and kernel.
// tests/infra/test_seccomp_allowlist.py compares infra/node/seccomp.py's allowlist with it.
package main

import (
	"context"
	"encoding/json"
	"os"

	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/contrib/seccomp"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/oci"
)

func main() {
	ctx := namespaces.WithNamespace(context.Background(), "k8s.io")
	spec, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: "probe"})
	if err != nil {
		panic(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(seccomp.DefaultProfile(spec)); err != nil {
		panic(err)
	}
}
