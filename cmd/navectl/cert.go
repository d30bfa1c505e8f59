package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/shared/atomicfile"
	"github.com/navemesh/nave/shared/spiffeid"
)

// The files cert issue writes, named as Istio names a workload's
// certificate files (./etc/certs on a VM).
const (
	fileCertChain = "cert-chain.pem" // the leaf, then its CA chain up to the root
	fileKey       = "key.pem"        // the leaf's PKCS #8 key, mode 0600
	fileRootCert  = "root-cert.pem"  // the mesh's roots, to verify peers with
)

// certIssue issues a workload certificate from a mesh's CA and writes it,
// its key and the mesh's roots to a directory.
func certIssue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("cert issue")
	mesh := f.String("mesh", "", "the mesh whose CA signs")
	td := f.String("trust-domain", "cluster.local", "the mesh's trust domain (the hub's ca.meshes)")
	ns := f.String("namespace", "", "the workload's namespace")
	sa := f.String("service-account", "", "the workload's service account")
	out := f.String("out", "", "directory to write "+fileCertChain+", "+fileKey+" and "+fileRootCert+" to")
	ttl := f.Duration("ttl", ca.DefaultTTL, "the certificate's lifetime (at most "+ca.DefaultMaxTTL.String()+")")
	caStore := f.String("ca-store", ca.StoreDir, "where the hub keeps its mesh CAs (its ca.store): dir (under --state-dir) or kubernetes (Secrets)")
	caNamespace := f.String("ca-namespace", "nave-system", "with --ca-store kubernetes: the namespace of the CA Secrets (the hub's ca.namespace)")
	kubeconfig := f.String("kubeconfig", "", "with --ca-store kubernetes: kubeconfig file (empty: in-cluster, else $KUBECONFIG)")
	f.stateOptional = true
	if err := f.parseArgs(args); err != nil {
		return err
	}
	switch {
	case *caStore != ca.StoreDir && *caStore != ca.StoreKubernetes:
		return usageErr("%s: --ca-store %q: want %s or %s", f.Name(), *caStore, ca.StoreDir, ca.StoreKubernetes)
	case *caStore == ca.StoreDir && f.stateDir == "":
		return usageErr("%s: --state-dir is required", f.Name())
	}
	if err := required(f.Name(), map[string]string{"mesh": *mesh, "namespace": *ns, "service-account": *sa, "out": *out}); err != nil {
		return err
	}
	if err := spiffeid.ValidateName(*mesh); err != nil {
		return usageErr("%s: --mesh %q: %v", f.Name(), *mesh, err)
	}
	id, err := ca.WorkloadID(*td, *ns, *sa)
	if err != nil {
		return usageErr("%s: %v", f.Name(), err)
	}
	if *ttl <= 0 {
		return usageErr("%s: --ttl must be positive, got %s", f.Name(), *ttl)
	}
	if *ttl > ca.DefaultMaxTTL {
		return fmt.Errorf("--ttl %s: at most %s", *ttl, ca.DefaultMaxTTL)
	}
	if *caStore == ca.StoreDir {
		if err := f.checkStateDir(); err != nil {
			return err
		}
	}
	store, err := ca.OpenStore(*caStore, f.stateDir, *caNamespace, *kubeconfig)
	if err != nil {
		return err
	}
	// Load creates the mesh's root when there is none, as the hub does:
	// whichever of the two comes first makes it. Say so, since a root made
	// here for a mistyped mesh is trusted by nothing.
	before, err := store.Get(ctx, *mesh)
	if err != nil {
		return err
	}
	authority, err := ca.New(store, ca.Options{})
	if err != nil {
		return err
	}
	if err := authority.Load(ctx, ca.Mesh{Name: *mesh, TrustDomain: *td}); err != nil {
		return err
	}
	if len(before) == 0 {
		fmt.Fprintf(stderr, "navectl: mesh %q had no CA in %s: generated a new root for trust domain %s\n",
			*mesh, store.Location(*mesh), *td)
	}
	rootsPEM, err := authority.RootsPEM(*mesh)
	if err != nil {
		return err
	}
	m, err := authority.Mint(ctx, *mesh, ca.SignOptions{Identities: []ca.ID{id}, TTL: *ttl})
	if err != nil {
		return err
	}
	leaf := m.Leaf
	if err := writeFiles(*out, []atomicfile.File{
		{Name: fileKey, Data: m.KeyPEM, Perm: 0o600},
		{Name: fileCertChain, Data: m.ChainPEM, Perm: 0o644},
		{Name: fileRootCert, Data: rootsPEM, Perm: 0o644},
	}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "issued %s (mesh %s), valid until %s: %s, %s, %s in %s\n", id, *mesh,
		leaf.NotAfter.UTC().Format(time.RFC3339), fileCertChain, fileKey, fileRootCert, *out)
	return nil
}

// writeFiles writes files into dir (created, mode 0700, if missing), each
// replaced whole (atomicfile.WriteSet).
func writeFiles(dir string, files []atomicfile.File) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := atomicfile.WriteSet(dir, files); err != nil {
		return err
	}
	// A failed directory sync leaves complete files that may not survive a
	// power loss: no reason to fail (as atomicfile.Write).
	_ = atomicfile.SyncDir(dir)
	return nil
}
