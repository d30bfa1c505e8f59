// Command pause is the pod sandbox's process on internal/kubenode's test node (containerd's
// sandbox_image): it holds the pod's namespaces and waits for SIGTERM or SIGINT. No registry is
// reachable in the tests, so the node cannot pull registry.k8s.io/pause; make images does not
// build it unless named (go run ./internal/imagebuild nave-pause).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
