package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// printBanner tells the user what runs where and what to try.
func printBanner(w io.Writer, o options, p plan) {
	routing := filepath.Join(o.config, "echo-routing.yaml")
	if _, err := os.Stat(routing); err != nil {
		routing = o.config
	}
	fmt.Fprintf(w, `
nave demo is running
  hub      xDS %s  spokes %s  admin http://%s
  spoke    cluster %s, mesh %s, config %s  admin http://%s
  backends`, o.hubXDS, o.hubSpokes, o.hubAdmin, o.cluster, o.mesh, o.config, o.spokeAdmin)
	for _, b := range demoBackends() {
		fmt.Fprintf(w, "  %s %s", b.name, b.addr)
	}
	security := fmt.Sprintf(`  security the spoke enrolled with a join token, the client has spiffe://%s/ns/%s/sa/%s;
           both talk to the hub over mTLS (state: %s, %s)`,
		trustDomain, clientNamespace, clientServiceAccount, p.state.hubState, p.state.spokeState)
	if p.plaintext {
		security = "  security none: --plaintext"
	}
	fmt.Fprintf(w, `
%s
  logs     %s
  client   %s via %s, node %s; its output follows

Edit %s (try the 80/20 weights as 20/80) and watch the split follow.
Ctrl-C stops everything.

`, security, filepath.Join(o.work, "*.log"), clientTarget, o.hubXDS, o.nodeID, routing)
}
