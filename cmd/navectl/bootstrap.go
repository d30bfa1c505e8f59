package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/navemesh/nave/shared/atomicfile"
	"github.com/navemesh/nave/shared/spiffeid"
	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// bootstrapUsage is the usage of navectl bootstrap (part of usage).
const bootstrapUsage = `  navectl bootstrap      --kind envoy|gateway|grpc --name NAME --namespace NS --service-account SA
                         --hub HOST:PORT --hub-ca FILE --cert-dir DIR [--ip IP] [--mesh default]
                         [--cluster C] [--network N] [--labels k=v,...] [--fallback HOST:PORT] [--out FILE]
        write the xDS bootstrap of a VM (a WorkloadEntry) as nave-agent writes a pod's:
        Envoy's (ADS to the hub over mTLS with DIR/cert-chain.pem and DIR/key.pem; the
        hub must run with sds.mintKeys for the VM's workload secrets), a gateway's
        (Envoy's, node id router~: the hub gives it the listeners of the Gateways whose
        selector matches --labels) or gRPC's (file_watcher on DIR/cert-chain.pem,
        key.pem, root-cert.pem, as navectl cert issue writes them)
`

// bootstrapCmd writes a VM's bootstrap (navectl bootstrap).
func bootstrapCmd(args []string, stdout io.Writer) error {
	f := flag.NewFlagSet("bootstrap", flag.ContinueOnError)
	f.SetOutput(io.Discard)
	kind := f.String("kind", "", "envoy (a sidecar's Envoy), gateway (an Envoy gateway, node id router~) or grpc")
	name := f.String("name", "", "the VM's name (the node id's POD part)")
	ns := f.String("namespace", "", "the workload's namespace")
	sa := f.String("service-account", "", "the workload's service account")
	ip := f.String("ip", "", "the VM's address (node id and INSTANCE_IPS)")
	mesh := f.String("mesh", "default", "the mesh (node metadata MESH)")
	cluster := f.String("cluster", "", "the cluster or network the VM belongs to (node metadata CLUSTER_ID)")
	network := f.String("network", "", "the network the VM is on (node metadata NETWORK, as its WorkloadEntry's network field): the hub reaches other networks' endpoints through their east-west gateways (docs/multi-network.md); empty: none")
	labels := f.String("labels", "", "the WorkloadEntry's labels, k=v,... (policies select by them; a gateway's Gateways select by them, e.g. istio=ingressgateway)")
	domain := f.String("domain-suffix", "cluster.local", "the DNS suffix of the node id")
	hub := f.String("hub", "", "host:port of the hub's xDS listener")
	fallback := f.String("fallback", "", "host:port of a second xDS server (the spoke's fallback server), listed second; grpc: --hub-ca must then hold the mesh roots too (root-cert.pem), since grpc-go verifies every xDS server with one CA file")
	serverName := f.String("server-name", "", "name the hub's certificate must be valid for (envoy; default: the host of --hub)")
	hubCA := f.String("hub-ca", "", "PEM file of the hub's serving CA (the state dir's serving CA root, or a spoke's hub-ca.pem)")
	certDir := f.String("cert-dir", "", "directory of the workload's cert-chain.pem, key.pem and root-cert.pem (navectl cert issue --out)")
	adminPort := f.Int("admin-port", 15000, "envoy: admin port on 127.0.0.1")
	readyPort := f.Int("ready-port", 15020, "envoy: readiness listener port (0: none)")
	out := f.String("out", "", "file to write (default: standard output)")
	if err := f.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageErr("bootstrap: %v", err)
	}
	if f.NArg() > 0 {
		return usageErr("bootstrap: unexpected argument %q", f.Arg(0))
	}
	for _, r := range []struct{ flag, value string }{{"kind", *kind}, {"name", *name}, {"namespace", *ns}, {"service-account", *sa},
		{"hub", *hub}, {"hub-ca", *hubCA}, {"cert-dir", *certDir}} {
		if r.value == "" {
			return usageErr("bootstrap: --%s is required", r.flag)
		}
	}
	if *kind != "envoy" && *kind != "gateway" && *kind != "grpc" {
		return usageErr("bootstrap: --kind %q: want envoy, gateway or grpc", *kind)
	}
	if err := spiffeid.ValidateName(*ns); err != nil {
		return usageErr("bootstrap: --namespace %q: %v", *ns, err)
	}
	if *ip != "" && net.ParseIP(*ip) == nil {
		return usageErr("bootstrap: --ip %q is not an IP address", *ip)
	}
	if *network != "" && len(validation.IsValidLabelValue(*network)) > 0 {
		return usageErr("bootstrap: --network %q is not a label value (what topology.istio.io/network says)", *network)
	}
	lm, err := parseLabels(*labels)
	if err != nil {
		return usageErr("bootstrap: --labels: %v", err)
	}
	ca, err := os.ReadFile(*hubCA)
	if err != nil {
		return fmt.Errorf("--hub-ca: %w", err)
	}
	typ := xdsbootstrap.ProxySidecar
	if *kind == "gateway" {
		typ = xdsbootstrap.ProxyRouter
	}
	w := xdsbootstrap.Workload{ProxyType: typ, Mesh: *mesh, Cluster: *cluster, Namespace: *ns, ServiceAccount: *sa, Name: *name, IP: *ip, Network: *network, Labels: lm}
	file := func(n string) string { return filepath.Join(*certDir, n) }
	var doc []byte
	if *kind == "grpc" {
		meta := w.Metadata()
		meta[xdsbootstrap.MetaGenerator] = xdsbootstrap.GeneratorGRPC
		doc, err = xdsbootstrap.New(*hub, w.NodeID(*domain), meta, &xdsbootstrap.TLSFiles{CACertificateFile: *hubCA,
			CertificateFile: file(fileCertChain), PrivateKeyFile: file(fileKey)}).
			WithFallback(*fallback).
			WithServerListenerTemplate(xdsbootstrap.ServerListenerPrefix+"%s").
			WithFileWatcher(xdsbootstrap.CertificateProviderInstance, file(fileCertChain), file(fileKey), file(fileRootCert), "60s").
			JSON()
	} else {
		doc, err = (&xdsbootstrap.Envoy{NodeID: w.NodeID(*domain), Cluster: *name + "." + *ns, Metadata: w.Metadata(),
			XDSAddress: *hub, FallbackAddress: *fallback, ServerName: *serverName, HubCAPEM: string(ca), FallbackRootsFile: file(fileRootCert),
			CertFile: file(fileCertChain), KeyFile: file(fileKey), AdminPort: *adminPort, ReadyPort: *readyPort}).JSON()
	}
	if err != nil {
		return usageErr("bootstrap: %v", err)
	}
	if *out == "" {
		_, err = stdout.Write(append(doc, '\n'))
		return err
	}
	return atomicfile.Write(*out, append(doc, '\n'), 0o644)
}

// parseLabels parses k=v,k2=v2.
func parseLabels(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}
