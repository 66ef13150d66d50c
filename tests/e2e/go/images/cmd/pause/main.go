// Command pause is the sandbox (pod infrastructure) container's process in the cluster in a box:
// it holds the pod's namespaces, reaps orphaned children (it is PID 1 of the pod when the pod
// shares its PID namespace) and exits on SIGINT or SIGTERM, which is all kubelet and containerd ask
// of registry.k8s.io/pause. Ours, because that image is built from C sources no Go module serves.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
