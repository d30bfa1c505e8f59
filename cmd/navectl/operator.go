package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/operatorca"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/shared/atomicfile"
	"github.com/navemesh/nave/shared/tlsconfig"
)

// fileHubCA is the hub's serving CA, which an operator verifies the hub
// with; written by operator issue beside the certificate and key.
const fileHubCA = "hub-ca.pem"

// operatorIssue issues an operator's client certificate for the hub's
// operator admin listener (admin.operatorListen) from the operators' CA in
// the hub's state.
func operatorIssue(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := newStateFlags("operator issue")
	mesh := f.String("mesh", "", "the mesh a tenant's operator sees (and nothing else)")
	vendor := f.Bool("vendor", false, "an operator of the vendor running the hub: every mesh, metrics and profiles")
	name := f.String("name", "", "the operator's name (a DNS label), part of its identity")
	out := f.String("out", "", "directory to write "+fileCertChain+", "+fileKey+" and "+fileHubCA+" to")
	ttl := f.Duration("ttl", 24*time.Hour, "the certificate's lifetime (at most "+operatorca.MaxTTL.String()+")")
	if err := f.parseArgs(args); err != nil {
		return err
	}
	if err := f.checkStateStore(); err != nil {
		return err
	}
	switch {
	case *vendor == (*mesh != ""):
		return usageErr("%s: give --mesh MESH (a tenant's operator) or --vendor, not both", f.Name())
	case *name == "":
		return usageErr("%s: --name is required", f.Name())
	case *out == "":
		return usageErr("%s: --out is required", f.Name())
	case *ttl <= 0:
		return usageErr("%s: --ttl must be positive, got %s", f.Name(), *ttl)
	case *ttl > operatorca.MaxTTL:
		return fmt.Errorf("--ttl %s: at most %s", *ttl, operatorca.MaxTTL)
	}
	id, err := operatorca.ID(*mesh, *name)
	if err != nil {
		return usageErr("%s: %v", f.Name(), err)
	}
	store, err := servingcert.OpenStore(f.stateStore, f.stateDir, f.stateNamespace, f.kubeconfig)
	if err != nil {
		return err
	}
	hubCA, err := servingcert.RootPEM(ctx, store)
	if err != nil {
		return err
	}
	auth, err := operatorca.Load(ctx, store, nil)
	if err != nil {
		return err
	}
	m, err := auth.Mint(ctx, operatorca.Mesh, ca.SignOptions{Identities: []ca.ID{id}, TTL: *ttl})
	if err != nil {
		return err
	}
	if err := writeFiles(*out, []atomicfile.File{
		{Name: fileKey, Data: m.KeyPEM, Perm: 0o600},
		{Name: fileCertChain, Data: m.ChainPEM, Perm: 0o644},
		{Name: fileHubCA, Data: hubCA, Perm: 0o644},
	}); err != nil {
		return err
	}
	scope := "mesh " + *mesh
	if *vendor {
		scope = "every mesh (vendor)"
	}
	fmt.Fprintf(stdout, "issued operator %s (%s), valid until %s: %s, %s, %s in %s\n", id, scope,
		m.Leaf.NotAfter.UTC().Format(time.RFC3339), fileCertChain, fileKey, fileHubCA, *out)
	return nil
}

// operatorTLS is the TLS configuration of a client of the hub's operator
// admin listener: the certificate and key in dir, verifying the hub with
// dir's hub-ca.pem.
func operatorTLS(dir string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, fileCertChain), filepath.Join(dir, fileKey))
	if err != nil {
		return nil, fmt.Errorf("operator certificate: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, fileHubCA))
	if err != nil {
		return nil, fmt.Errorf("operator certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("operator certificate: %s holds no certificate", filepath.Join(dir, fileHubCA))
	}
	return tlsconfig.MutualClient(roots, "", tlsconfig.Static(cert)), nil
}
