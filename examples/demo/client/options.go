package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/metadata"
)

// options are the client's command-line settings.
type options struct {
	target    string
	bootstrap string
	hub       string
	nodeID    string
	mesh      string
	namespace string
	// xdsCertDir and xdsCAFile make the bootstrap dial the hub over mTLS (see tls.go).
	xdsCertDir string
	xdsCAFile  string
	json       bool
	timeout    time.Duration
	headers    metadata.MD
	pacing     pacing
}

func parseFlags(args []string, output io.Writer) (options, error) {
	var (
		o       options
		headers []string
	)
	fs := pflag.NewFlagSet("nave-demo-client", pflag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&o.target, "target", "xds:///echo.demo.svc.cluster.local:7070", "gRPC target to call")
	fs.StringVar(&o.bootstrap, "bootstrap", "", "xDS bootstrap file (else one is made from --hub and --node-id)")
	fs.StringVar(&o.hub, "hub", "", "hub xDS address HOST:PORT, for a bootstrap made on the fly")
	fs.StringVar(&o.nodeID, "node-id", "", "xDS node id, for a bootstrap made on the fly")
	fs.StringVar(&o.mesh, "mesh", "default", "mesh named in the node metadata of a bootstrap made on the fly")
	fs.StringVar(&o.namespace, "namespace", "demo", "namespace named in the node metadata of a bootstrap made on the fly")
	fs.StringVar(&o.xdsCertDir, "xds-cert-dir", "", "dial the hub over mTLS with the workload certificate in this directory (cert-chain.pem, key.pem, as navectl cert issue writes them); needs --xds-ca-file")
	fs.StringVar(&o.xdsCAFile, "xds-ca-file", "", "CA (PEM) that the hub's xDS serving certificate must chain to, with --xds-cert-dir: the hub's serving CA, <hub state dir>/serving-ca/hub/root-cert.pem")
	fs.DurationVar(&o.pacing.interval, "interval", 100*time.Millisecond, "time between the starts of two calls")
	fs.IntVar(&o.pacing.count, "count", 0, "calls to make before exiting; 0 means until interrupted")
	fs.StringArrayVar(&headers, "header", nil, "request header k=v sent with every call (repeatable)")
	fs.BoolVar(&o.json, "json", false, "print one JSON line per call instead of periodic summaries")
	fs.DurationVar(&o.pacing.report, "report", 2*time.Second, "time between two summaries (without --json)")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "deadline of each call")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case o.target == "":
		return o, errors.New("--target must not be empty")
	case o.pacing.interval <= 0 || o.pacing.report <= 0 || o.timeout <= 0:
		return o, errors.New("--interval, --report and --timeout must be positive")
	case o.pacing.count < 0:
		return o, errors.New("--count must not be negative")
	case (o.xdsCertDir == "") != (o.xdsCAFile == ""):
		return o, errors.New("--xds-cert-dir and --xds-ca-file must be given together")
	case o.xdsCertDir != "" && o.hub == "":
		return o, errors.New("--xds-cert-dir needs --hub: it goes into the bootstrap made from --hub and --node-id")
	}
	md, err := parseHeaders(headers)
	if err != nil {
		return o, err
	}
	o.headers = md
	if o.json {
		o.pacing.report = 0
	}
	return o, nil
}

// parseHeaders turns k=v strings into request metadata.
func parseHeaders(kvs []string) (metadata.MD, error) {
	md := metadata.MD{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("--header %q: want key=value", kv)
		}
		md.Append(k, v)
	}
	return md, nil
}
