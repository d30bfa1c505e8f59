// Command navectl administers a hub's spoke enrollment through the state
// the hub replicas share — the hub's state directory, or with
// --state-store kubernetes its Secrets (the hub's state.store): it creates
// one-time join tokens, lists tokens and enrolled clusters, and revokes
// clusters. Every hub replica enforces a revocation within about a second.
// It prints the pin of the hub's serving CA, and issues workload
// certificates from a mesh's CA, for VMs and the demo.
//
//	navectl token create   STATE --mesh M --cluster C [--ttl 1h] [--namespaces a,b]
//	navectl token list     STATE
//	navectl cluster list   STATE
//	navectl cluster revoke STATE --mesh M --cluster C [--force]
//	navectl ca-hash        FILE | STATE
//	navectl cert issue     --state-dir D --mesh M [--trust-domain cluster.local]
//	                       --namespace NS --service-account SA --out DIR [--ttl 24h]
//	                       [--ca-store kubernetes --ca-namespace N --kubeconfig F]
//	navectl roots          add|switch|drop|status --state-dir D --mesh M [...]
//	navectl bootstrap      --kind envoy|gateway|grpc --name N --namespace NS --service-account SA
//	                       --hub HOST:PORT --hub-ca FILE --cert-dir DIR [...]
//
// where STATE is --state-dir D, or --state-store kubernetes
// [--state-namespace nave-system] [--kubeconfig F].
//
// It reads a hub's admin server for operators, as istioctl does for Istio:
//
//	navectl mesh           create|list|get|update|delete [-f FILE] [NAME] [--hub-admin URL] [...]
//	navectl status         [--hub-admin URL] [-o table|json|yaml]
//	navectl proxy-status   [PROXY] [--hub-admin URL] [-o ...]
//	navectl proxy-config   clusters|listeners|routes|endpoints|secrets PROXY [--hub-admin URL] [-o ...]
//
// and checks mesh config offline with the validator the spoke and hub use:
//
//	navectl analyze        FILE|DIR|- ... [--cluster NAME=FILE|DIR ...] [--fail-on-warning]
//
// The command tree is cobra's (shell completion: navectl completion bash).
//
// Exit codes: 0 done, 1 failed (analyze: errors found), 2 usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/shared/tlspin"
)

const usage = `navectl administers a nave hub: spoke enrollment and workload certificates
through the hub's state (its state directory or its Secrets), status and proxy
config through its admin server, and offline analysis of mesh config.

Usage:
  navectl token create   STATE --mesh MESH --cluster CLUSTER [--ttl 1h] [--namespaces a,b]
        print a one-time join token for (MESH, CLUSTER); only its hash is stored
  navectl token list     STATE
        list join tokens (pending, expired, used); never their secrets
  navectl cluster list   STATE
        list enrolled and revoked clusters
  navectl cluster revoke STATE --mesh MESH --cluster CLUSTER [--force]
        cut a cluster off: its streams are closed, its renewals refused
        (--force revokes a cluster that has not enrolled)
  navectl ca-hash        FILE | STATE
        print the pin (sha256:...) of each CA certificate in the PEM FILE,
        or of the hub's serving CA, for a spoke's first contact with the hub
  navectl cert issue     --state-dir DIR --mesh MESH [--trust-domain cluster.local]
                         --namespace NS --service-account SA --out OUT [--ttl 24h]
        issue a workload certificate spiffe://TD/ns/NS/sa/SA from MESH's CA
        (DIR/ca) and write OUT/cert-chain.pem, OUT/key.pem, OUT/root-cert.pem;
        with --ca-store kubernetes [--ca-namespace nave-system] [--kubeconfig F]
        the CA is Secret nave-ca-MESH (a hub with ca.store kubernetes) and
        --state-dir is not needed
  navectl roots add      CA --mesh MESH [--cacerts DIR]
  navectl roots switch   CA --mesh MESH [--min-distribution 2h] [--force]
  navectl roots drop     CA --mesh MESH [--force]
  navectl roots status   CA --mesh MESH [-o table|json]
        rotate MESH's root of trust in three steps (docs/operate.md): add a
        new root (generated, or Istio's cacerts in DIR) to the bundle; switch
        signing to it; drop the old root once its certificates expired.
        Each step is idempotent and refused when it would strand a
        certificate; every hub replica takes it up within ca.refreshInterval.
        CA is --state-dir DIR [--trust-domain TD], or --ca-store kubernetes
        [--ca-namespace nave-system] [--kubeconfig F], as for cert issue
  navectl operator issue STATE (--mesh MESH | --vendor) --name NAME --out OUT [--ttl 24h]
        issue an operator's client certificate for the hub's operator admin
        listener (admin.operatorListen): a tenant's operator sees only MESH,
        the vendor's every mesh; writes OUT/cert-chain.pem, OUT/key.pem and
        OUT/hub-ca.pem (the hub's serving CA) for --operator-dir
  navectl mesh create    (-f FILE | NAME --trust-domain TD [--meshconfig FILE]) [ADMIN]
  navectl mesh list      [ADMIN] [-o table|json|yaml]
  navectl mesh get       NAME [--spec] [ADMIN] [-o table|json|yaml]
  navectl mesh update    -f FILE [ADMIN]
  navectl mesh delete    NAME [--keep-ca] [--force] [ADMIN]
        the meshes (tenants) of a running hub (docs/meshes.md): create, update
        and delete need a vendor's operator certificate on the operator listener;
        delete with spokes connected needs --force; --keep-ca keeps the mesh's CA
  navectl status         [ADMIN] [-o table|json|yaml]
        meshes, their clusters (connected, stale, withdrawn, missing; last
        sync; rejected resources), conflicts, problems, hub replicas
  navectl proxy-status   [PROXY] [ADMIN] [-o table|json|yaml]
        every connected proxy: SYNCED / NOT SENT / STALE / NACKED per type
  navectl proxy-config   clusters|listeners|routes|endpoints|secrets PROXY [ADMIN] [-o ...]
        what the hub would send PROXY now (secrets without private keys)
  navectl analyze        FILE|DIR|- ... [--cluster NAME=FILE|DIR ...] [--fail-on-warning]
        validate mesh config offline as the spoke and hub do, plus checks
        across objects and clusters; exit 1 on errors
  navectl completion     bash|zsh|fish|powershell
        print a shell completion script
` + bootstrapUsage + `
STATE is where the hub keeps its state (its state.store):
  --state-dir DIR                  the hub's state.dir (state.store dir)
  --state-store kubernetes [--state-namespace nave-system] [--kubeconfig F]
                                   the hub's Secrets (state.store kubernetes);
                                   --kubeconfig empty: in-cluster, else $KUBECONFIG
ADMIN is the hub's admin server: --hub-admin URL (default http://127.0.0.1:15014,
or $NAVE_HUB_ADMIN) [--timeout 10s]; for its operator listener, an https:// URL and
--operator-dir DIR (or $NAVE_OPERATOR_DIR) holding an operator certificate.
`

// errUsage marks errors that exit with status 2.
var errUsage = errors.New("usage")

func main() {
	// Interrupted, a command stops waiting for the API server.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(ctx, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case errors.Is(err, errUsage):
		// A command with cobra-parsed flags shows its own usage; the
		// others, and navectl itself, the overview.
		help := usage
		if c, _, ferr := root.Find(args); ferr == nil && c != root && !c.DisableFlagParsing && c.Runnable() && c.HasParent() && c.Parent() == root {
			help = c.UsageString()
		}
		fmt.Fprintf(stderr, "navectl: %v\n\n%s", err, help)
		return 2
	case errors.Is(err, errFindings):
		return 1 // the command printed what it found
	default:
		fmt.Fprintf(stderr, "navectl: %v\n", err)
		return 1
	}
}

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// flags is one command's flag set; parse reports bad flags as usage errors.
type flags struct {
	*flag.FlagSet
	stateDir string
	// stateOptional: the command checks itself whether it needs
	// --state-dir.
	stateOptional bool
	// Where the hub's state is, for the commands on it (newStateFlags).
	stateStore, stateNamespace, kubeconfig string
}

func newFlags(name string) *flags {
	f := &flags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
	f.SetOutput(io.Discard) // errors are reported once, by run
	f.StringVar(&f.stateDir, "state-dir", "", "the hub's state directory")
	return f
}

// newStateFlags is the flag set of a command on the hub's state, which
// is in --state-dir or, with --state-store kubernetes, in Secrets.
func newStateFlags(name string) *flags {
	f := newFlags(name)
	f.StringVar(&f.stateStore, "state-store", ca.StoreDir, "where the hub keeps its state (its state.store): dir (--state-dir) or kubernetes (Secrets)")
	f.StringVar(&f.stateNamespace, "state-namespace", "nave-system", "with --state-store kubernetes: the namespace of the hub's state Secrets (its state.namespace)")
	f.StringVar(&f.kubeconfig, "kubeconfig", "", "with --state-store kubernetes: kubeconfig file (empty: in-cluster, else $KUBECONFIG)")
	f.stateOptional = true
	return f
}

// parse parses args and opens the hub's enrollment store.
func (f *flags) parse(args []string) (enroll.Store, error) {
	if err := f.parseArgs(args); err != nil {
		return nil, err
	}
	if err := f.checkStateStore(); err != nil {
		return nil, err
	}
	return enroll.OpenStore(f.stateStore, f.stateDir, f.stateNamespace, f.kubeconfig)
}

// checkStateStore checks the flags that say where the hub's state is.
func (f *flags) checkStateStore() error {
	switch f.stateStore {
	case ca.StoreDir:
		if f.stateDir == "" {
			return usageErr("%s: --state-dir is required (or --state-store %s)", f.Name(), ca.StoreKubernetes)
		}
		if f.kubeconfig != "" {
			return usageErr("%s: --kubeconfig is used only with --state-store %s", f.Name(), ca.StoreKubernetes)
		}
		return f.checkStateDir()
	case ca.StoreKubernetes:
		if f.stateDir != "" {
			return usageErr("%s: --state-dir is not used with --state-store %s", f.Name(), ca.StoreKubernetes)
		}
		return nil
	}
	return usageErr("%s: --state-store %q: want %s or %s", f.Name(), f.stateStore, ca.StoreDir, ca.StoreKubernetes)
}

// parseArgs parses args: flags only, --state-dir required.
func (f *flags) parseArgs(args []string) error {
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%s: %v", f.Name(), err)
	}
	if f.NArg() > 0 {
		return usageErr("%s: unexpected argument %q", f.Name(), f.Arg(0))
	}
	if f.stateDir == "" && !f.stateOptional {
		return usageErr("%s: --state-dir is required", f.Name())
	}
	return nil
}

// checkStateDir fails unless the state dir exists: a typo must not make a
// new, empty one.
func (f *flags) checkStateDir() error {
	if st, err := os.Stat(f.stateDir); err != nil || !st.IsDir() {
		return fmt.Errorf("state dir %s: not a directory", f.stateDir)
	}
	return nil
}

func required(name string, vals map[string]string) error {
	for _, k := range []string{"mesh", "cluster", "namespace", "service-account", "out"} {
		if v, ok := vals[k]; ok && v == "" {
			return usageErr("%s: --%s is required", name, k)
		}
	}
	return nil
}

func tokenCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newStateFlags("token create")
	mesh := f.String("mesh", "", "the mesh the cluster joins")
	cluster := f.String("cluster", "", "the cluster's name (a DNS label)")
	ttl := f.Duration("ttl", time.Hour, "how long the token stays valid (at most "+enroll.MaxTokenTTL.String()+")")
	namespaces := f.String("namespaces", "", "comma-separated namespaces whose workload certificates the cluster may obtain as registration authority (default: any of its mesh)")
	store, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := required(f.Name(), map[string]string{"mesh": *mesh, "cluster": *cluster}); err != nil {
		return err
	}
	var scope []string
	if *namespaces != "" {
		scope = strings.Split(*namespaces, ",")
	}
	tok, info, err := store.CreateToken(ctx, *mesh, *cluster, *ttl, scope...)
	if err != nil {
		return err
	}
	// stdout gets the token alone, for scripts; the note goes to stderr.
	fmt.Fprintln(stdout, tok)
	scoped := "any namespace"
	if len(info.Namespaces) > 0 {
		scoped = "namespaces " + strings.Join(info.Namespaces, ", ")
	}
	fmt.Fprintf(stderr, "join token %s for %s/%s (workload certificates: %s), single use, expires %s\n", info.ID, info.Mesh, info.Cluster,
		scoped, info.ExpiresAt.Format(time.RFC3339))
	return nil
}

func tokenList(ctx context.Context, args []string, stdout io.Writer) error {
	store, err := newStateFlags("token list").parse(args)
	if err != nil {
		return err
	}
	tokens, err := store.ListTokens(ctx)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tMESH\tCLUSTER\tSTATE\tCREATED\tEXPIRES\tUSED")
	for _, t := range tokens {
		used := "-"
		if t.UsedAt != nil {
			used = t.UsedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Mesh, t.Cluster, t.State,
			t.CreatedAt.Format(time.RFC3339), t.ExpiresAt.Format(time.RFC3339), used)
	}
	return w.Flush()
}

func clusterList(ctx context.Context, args []string, stdout io.Writer) error {
	store, err := newStateFlags("cluster list").parse(args)
	if err != nil {
		return err
	}
	clusters, err := store.Clusters(ctx)
	if err != nil {
		return err
	}
	revs, err := store.Revocations(ctx)
	if err != nil {
		return err
	}
	revoked := map[string]enroll.Revocation{}
	for _, r := range revs {
		revoked[r.Identity().String()] = r
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MESH\tCLUSTER\tSTATUS\tTRUST DOMAIN\tSERIAL\tCERT EXPIRES\tENROLLED")
	for _, c := range clusters {
		st := "enrolled"
		if r, ok := revoked[c.Identity().String()]; ok {
			st = "revoked " + r.RevokedAt.Format(time.RFC3339)
			delete(revoked, c.Identity().String())
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Mesh, c.Cluster, st, c.TrustDomain, c.Serial,
			c.NotAfter.Format(time.RFC3339), c.EnrolledAt.Format(time.RFC3339))
	}
	// Revoked before they ever enrolled.
	for _, r := range revs {
		if _, ok := revoked[r.Identity().String()]; ok {
			fmt.Fprintf(w, "%s\t%s\trevoked %s\t-\t-\t-\t-\n", r.Mesh, r.Cluster, r.RevokedAt.Format(time.RFC3339))
		}
	}
	return w.Flush()
}

func clusterRevoke(ctx context.Context, args []string, stdout io.Writer) error {
	f := newStateFlags("cluster revoke")
	mesh := f.String("mesh", "", "the cluster's mesh")
	cluster := f.String("cluster", "", "the cluster to revoke")
	force := f.Bool("force", false, "revoke even if the cluster has not enrolled")
	store, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := required(f.Name(), map[string]string{"mesh": *mesh, "cluster": *cluster}); err != nil {
		return err
	}
	if _, err := store.Cluster(ctx, *mesh, *cluster); err != nil {
		if !errors.Is(err, enroll.ErrNotEnrolled) || !*force {
			return fmt.Errorf("%w (a typo? --force revokes it anyway)", err)
		}
	}
	if err := store.Revoke(ctx, *mesh, *cluster); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster %s/%s revoked: hub replicas close its streams and refuse its renewals\n", *mesh, *cluster)
	return nil
}

// caHash prints the pins of the CA certificates of a PEM file, or of the
// hub's serving CA where the hub keeps it.
func caHash(ctx context.Context, args []string, stdout io.Writer) error {
	var (
		b    []byte
		name string
		err  error
	)
	switch {
	case len(args) == 0:
		return usageErr("ca-hash: want a PEM file, --state-dir DIR or --state-store %s", ca.StoreKubernetes)
	case len(args) == 1 && !strings.HasPrefix(args[0], "-"):
		name = args[0]
		b, err = os.ReadFile(name)
	default:
		f := newStateFlags("ca-hash")
		if err := f.parseArgs(args); err != nil {
			return err
		}
		if err := f.checkStateStore(); err != nil {
			return err
		}
		if f.stateStore == ca.StoreDir {
			// Read the file: nothing is created in the state dir.
			name = servingcert.RootPath(f.stateDir)
			b, err = os.ReadFile(name)
			break
		}
		store, serr := servingcert.OpenStore(f.stateStore, f.stateDir, f.stateNamespace, f.kubeconfig)
		if serr != nil {
			return serr
		}
		name = store.Location(servingcert.Mesh)
		b, err = servingcert.RootPEM(ctx, store)
	}
	if err != nil {
		return err
	}
	pins, err := tlspin.HashesPEM(b)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, p := range pins {
		fmt.Fprintln(stdout, p)
	}
	if len(pins) == 0 {
		return fmt.Errorf("%s: no CA certificate", name)
	}
	return nil
}
