package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/shared/spiffeid"
)

// defaultMinDistribution is how long roots switch waits after roots add
// by default: twice nave-agent's default ra.rootsRefresh, so that every
// running agent fetched the new bundle, and more than a spoke needs to
// get it on its Watch stream.
const defaultMinDistribution = 2 * time.Hour

// rootsFlags are the flags every roots command takes: where the mesh's
// CA is, as cert issue finds it.
type rootsFlags struct {
	*flags
	mesh, td, caStore, caNamespace, kubeconfig *string
}

func newRootsFlags(name string) rootsFlags {
	f := newFlags(name)
	f.stateOptional = true
	return rootsFlags{flags: f,
		mesh:        f.String("mesh", "", "the mesh whose root of trust is rotated"),
		td:          f.String("trust-domain", "cluster.local", "the mesh's trust domain (the hub's ca.meshes)"),
		caStore:     f.String("ca-store", ca.StoreDir, "where the hub keeps its mesh CAs (its ca.store): dir (under --state-dir) or kubernetes (Secrets)"),
		caNamespace: f.String("ca-namespace", "nave-system", "with --ca-store kubernetes: the namespace of the CA Secrets (the hub's ca.namespace)"),
		kubeconfig:  f.String("kubeconfig", "", "with --ca-store kubernetes: kubeconfig file (empty: in-cluster, else $KUBECONFIG)"),
	}
}

// open parses args and loads the mesh's CA, which must exist: a rotation
// never creates a mesh's first root.
func (f rootsFlags) open(ctx context.Context, args []string) (*ca.Authority, error) {
	if err := f.parseArgs(args); err != nil {
		return nil, err
	}
	switch {
	case *f.caStore != ca.StoreDir && *f.caStore != ca.StoreKubernetes:
		return nil, usageErr("%s: --ca-store %q: want %s or %s", f.Name(), *f.caStore, ca.StoreDir, ca.StoreKubernetes)
	case *f.caStore == ca.StoreDir && f.stateDir == "":
		return nil, usageErr("%s: --state-dir is required (or --ca-store %s)", f.Name(), ca.StoreKubernetes)
	case *f.mesh == "":
		return nil, usageErr("%s: --mesh is required", f.Name())
	}
	if err := spiffeid.ValidateName(*f.mesh); err != nil {
		return nil, usageErr("%s: --mesh %q: %v", f.Name(), *f.mesh, err)
	}
	if *f.caStore == ca.StoreDir {
		if err := f.checkStateDir(); err != nil {
			return nil, err
		}
	}
	store, err := ca.OpenStore(*f.caStore, f.stateDir, *f.caNamespace, *f.kubeconfig)
	if err != nil {
		return nil, err
	}
	blobs, err := store.Get(ctx, *f.mesh)
	if err != nil {
		return nil, err
	}
	if len(blobs) == 0 {
		return nil, fmt.Errorf("mesh %q has no CA in %s: a hub makes it at its first start; there is nothing to rotate", *f.mesh, store.Location(*f.mesh))
	}
	a, err := ca.New(store, ca.Options{})
	if err != nil {
		return nil, err
	}
	if err := a.Load(ctx, ca.Mesh{Name: *f.mesh, TrustDomain: *f.td}); err != nil {
		return nil, err
	}
	return a, nil
}

// rootsAdd is rotation step 1.
func rootsAdd(ctx context.Context, args []string, stdout io.Writer) error {
	f := newRootsFlags("roots add")
	cacerts := f.String("cacerts", "", "directory of a plugged-in CA in Istio's cacerts layout (ca-cert.pem, ca-key.pem, cert-chain.pem, root-cert.pem); empty: generate a root")
	a, err := f.open(ctx, args)
	if err != nil {
		return err
	}
	var files map[string][]byte
	if *cacerts != "" {
		files = map[string][]byte{}
		for _, n := range []string{ca.FileCACert, ca.FileCAKey, ca.FileCertChain, ca.FileRootCert} {
			b, err := os.ReadFile(filepath.Join(*cacerts, n))
			if err != nil {
				return fmt.Errorf("--cacerts: %w", err)
			}
			files[n] = b
		}
	}
	msg, err := a.AddRoot(ctx, *f.mesh, files)
	if err != nil {
		return err
	}
	return printRotation(stdout, a, *f.mesh, msg)
}

// rootsSwitch is rotation step 2.
func rootsSwitch(ctx context.Context, args []string, stdout io.Writer) error {
	f := newRootsFlags("roots switch")
	wait := f.Duration("min-distribution", defaultMinDistribution, "refuse to switch sooner than this after roots add (agents fetch the bundle every ra.rootsRefresh)")
	force := f.Bool("force", false, "switch even before --min-distribution has passed")
	a, err := f.open(ctx, args)
	if err != nil {
		return err
	}
	msg, err := a.SwitchRoot(ctx, *f.mesh, ca.SwitchOptions{MinDistribution: *wait, Force: *force})
	if err != nil {
		return err
	}
	return printRotation(stdout, a, *f.mesh, msg)
}

// rootsDrop is rotation step 3.
func rootsDrop(ctx context.Context, args []string, stdout io.Writer) error {
	f := newRootsFlags("roots drop")
	force := f.Bool("force", false, "drop even while certificates of the previous root may still be valid (they are then refused)")
	a, err := f.open(ctx, args)
	if err != nil {
		return err
	}
	msg, err := a.DropRoot(ctx, *f.mesh, *force)
	if err != nil {
		return err
	}
	return printRotation(stdout, a, *f.mesh, msg)
}

// rootsStatus prints where the rotation stands.
func rootsStatus(ctx context.Context, args []string, stdout io.Writer) error {
	f := newRootsFlags("roots status")
	out := f.String("o", "table", "output: table or json")
	a, err := f.open(ctx, args)
	if err != nil {
		return err
	}
	if *out == "json" {
		st, err := a.Rotation(*f.mesh)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	if *out != "table" {
		return usageErr("%s: -o %q: want table or json", f.Name(), *out)
	}
	return printRotation(stdout, a, *f.mesh, "")
}

func printRotation(w io.Writer, a *ca.Authority, mesh, msg string) error {
	st, err := a.Rotation(mesh)
	if err != nil {
		return err
	}
	if msg != "" {
		fmt.Fprintf(w, "%s: %s\n", mesh, msg)
	}
	fmt.Fprintf(w, "mesh %s: phase %s; signing: %s\n", st.Mesh, st.Phase, st.Signer)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tSHA256\tSUBJECT\tNOT AFTER")
	for _, r := range st.Roots {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Role, r.SHA256[:16], r.Subject, r.NotAfter.UTC().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !st.PreviousValidUntil.IsZero() {
		fmt.Fprintf(w, "certificates of the previous root expire by %s\n", st.PreviousValidUntil.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "next: %s\n", st.Next)
	return nil
}
