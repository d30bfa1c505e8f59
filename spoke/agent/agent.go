package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/atomicfile"
	"github.com/navemesh/nave/shared/retry"
	"github.com/navemesh/nave/shared/spiffeid"
	"github.com/navemesh/nave/spoke/agentconfig"
	"github.com/navemesh/nave/spoke/appprobe"
)

// Files the agent writes in its directory (agentconfig.Config.Dir).
const (
	SDSSocket          = "sds.sock"
	CertChainFile      = "cert-chain.pem"
	KeyFile            = "key.pem"
	RootCertFile       = "root-cert.pem"
	HubCAFile          = "hub-ca.pem"
	GRPCBootstrapFile  = "grpc-bootstrap.json"
	EnvoyBootstrapFile = "envoy-bootstrap.json"
)

// fileWatcherRefresh is how often grpc re-reads the certificate files.
const fileWatcherRefresh = "10s"

// envoyGrace is how long Envoy has to exit after SIGTERM.
const envoyGrace = 20 * time.Second

// Agent is one pod's agent. Build it with New, then Run it once.
type Agent struct {
	cfg     agentconfig.Config
	log     *slog.Logger
	adm     *admin.Server
	metrics *metrics
	id      spiffeid.ID
	ra      *RAClient
	keeper  *Keeper
	sds     *SDS
	creds   *GatewayCredentials
	envoy   *Envoy
	probes  *AppProber
	dns     *dnsAgent // nil: DNS not captured

	bootstrapWritten atomic.Bool
	envoyRunning     atomic.Bool
}

// New builds the agent from a validated configuration; reg receives its
// metrics, which the status server exposes with the rest.
func New(cfg agentconfig.Config, log *slog.Logger, reg *prometheus.Registry) (*Agent, error) {
	id, err := cfg.WorkloadID()
	if err != nil {
		return nil, fmt.Errorf("workload identity: %w", err)
	}
	raID, err := spiffeid.ParseClusterID(cfg.RA.Identity)
	if err != nil {
		return nil, fmt.Errorf("ra.identity: %w", err)
	}
	probers, err := appprobe.Parse(cfg.AppProbes)
	if err != nil {
		return nil, fmt.Errorf("appProbes: %w", err)
	}
	a := &Agent{cfg: cfg, log: log, adm: admin.New(log, reg), metrics: newMetrics(reg), id: id}
	a.probes = NewAppProber(probers, cfg.Pod.IP, log.With("component", "app-probes"), reg)
	a.ra, err = DialRA(RAOptions{Address: cfg.RA.Address, Identity: raID, RootsPEM: startRoots(cfg, log),
		TokenFile: cfg.RA.TokenFile, Workload: id, TTL: cfg.RA.CertTTL})
	if err != nil {
		return nil, err
	}
	publish := a.writeCredentialFiles
	if cfg.Mode == agentconfig.ModeEnvoy {
		a.sds = NewSDS(log.With("component", "sds"), a.metrics)
		a.creds = NewGatewayCredentials(a.ra, a.sds, retry.Policy{Initial: cfg.RA.RetryInitial, Max: cfg.RA.RetryMax},
			log.With("component", "gateway-credentials"))
		publish = func(c *Credential) error {
			// Kept for a restart of the container (startRoots).
			if err := atomicfile.Write(filepath.Join(cfg.Dir, RootCertFile), c.RootsPEM, 0o644); err != nil {
				return err
			}
			return a.sds.Update(c)
		}
		a.envoy = &Envoy{Binary: cfg.Envoy.Binary, Bootstrap: filepath.Join(cfg.Dir, EnvoyBootstrapFile), AdminPort: cfg.Envoy.AdminPort,
			Grace: envoyGrace, Drain: cfg.Envoy.DrainDuration, Stdout: os.Stdout, Stderr: os.Stderr, Log: log.With("component", "envoy")}
		if a.envoy.ExitOnZero, a.envoy.MinDrain, err = drainMetadata(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.DNSCapture() {
		if a.dns, err = newDNSAgent(cfg, log.With("component", "dns"), reg); err != nil {
			return nil, err
		}
		a.adm.HandleDebug("dns", "the DNS proxy: where it listens, its upstreams, queries by outcome, the name table stream and the table (docs/dns.md)", a.dnsView)
	}
	a.keeper = NewKeeper(a.ra, KeeperOptions{RenewFraction: cfg.RA.RenewFraction, RenewJitter: cfg.RA.RenewJitter,
		RetryInitial: cfg.RA.RetryInitial, RetryMax: cfg.RA.RetryMax, Timeout: cfg.RA.Timeout, RootsRefresh: cfg.RA.RootsRefresh, Publish: publish},
		log.With("component", "certificate"), a.metrics)
	a.adm.AddReadyCheck("certificate", a.certificateReady)
	a.adm.AddReadyCheck("bootstrap", func() error {
		if !a.bootstrapWritten.Load() {
			return errors.New("the bootstrap is not written yet")
		}
		return nil
	})
	if a.envoy != nil {
		a.adm.AddReadyCheck("envoy", func() error {
			if !a.envoyRunning.Load() {
				if a.envoy.Present() {
					return errors.New("envoy is not started yet")
				}
				return nil // no Envoy in this image: SDS and the bootstrap serve an Envoy run otherwise
			}
			return a.envoy.Ready(context.Background())
		})
	}
	a.adm.HandleDebug("app-probes", "the app containers' original probes the agent runs for the kubelet, by path (decision 032)",
		func(*http.Request) (any, error) { return probers, nil })
	a.adm.HandleDebug("certificate", "the workload certificate in place: identity, serial, validity, renewal (never the key)", a.certificateView)
	return a, nil
}

// Run runs the agent until ctx ends (nil) or a part fails: the status
// server on status, the certificate keeper, and by mode the SDS server
// and Envoy, or the gRPC files. Envoy exiting on its own is a failure.
func (a *Agent) Run(ctx context.Context, status net.Listener) error {
	defer a.ra.Close()
	if err := os.MkdirAll(a.cfg.Dir, 0o755); err != nil {
		status.Close()
		return fmt.Errorf("dir: %w", err)
	}
	g, ctx := errgroup.WithContext(ctx)
	// The status port is on the pod's IP (probes, scrapes): no profiles,
	// and no warning meant for the hub's and spoke's admin ports.
	g.Go(func() error { return a.adm.ServeHandler(ctx, status, a.StatusHandler(), nil) })
	boot, err := a.bootstrap()
	if err != nil {
		return a.stop(g, err)
	}
	g.Go(func() error { return a.keeper.Run(ctx) })
	if a.sds != nil {
		g.Go(func() error { return a.sds.Serve(ctx, filepath.Join(a.cfg.Dir, SDSSocket)) })
		g.Go(func() error { return a.creds.Run(ctx) })
	}
	name := EnvoyBootstrapFile
	if a.cfg.Mode == agentconfig.ModeGRPC {
		name = GRPCBootstrapFile
		if err := atomicfile.Write(filepath.Join(a.cfg.Dir, HubCAFile), []byte(XDSRoots(a.cfg)), 0o644); err != nil {
			return a.stop(g, err)
		}
	}
	if a.dns != nil {
		// Listening before the bootstrap is written: the agent is ready,
		// and the app starts, only with the DNS proxy in place.
		if err := a.startDNS(boot); err != nil {
			return a.stop(g, err)
		}
		g.Go(func() error { return a.dns.server.Serve(ctx) })
		g.Go(func() error { return a.runNameTable(ctx) })
	}
	if err := atomicfile.Write(filepath.Join(a.cfg.Dir, name), boot, 0o644); err != nil {
		return a.stop(g, err)
	}
	a.bootstrapWritten.Store(true)
	a.log.Info("bootstrap written", "file", filepath.Join(a.cfg.Dir, name), "identity", a.id.String())
	if a.envoy != nil {
		g.Go(func() error {
			select {
			case <-ctx.Done():
				return nil
			case <-a.keeper.Ready():
			}
			if !a.envoy.Present() {
				a.log.Warn("no envoy binary: serving SDS and the bootstrap only", "binary", a.envoy.Binary)
				return nil
			}
			a.envoyRunning.Store(true)
			defer a.envoyRunning.Store(false)
			return a.envoy.Run(ctx)
		})
	}
	return g.Wait()
}

// StatusHandler is what the status listener serves: the workload's admin
// endpoints and the app probes under /app-health/.
func (a *Agent) StatusHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(appprobe.PathPrefix, a.probes)
	mux.Handle("/", a.adm.WorkloadHandler())
	return mux
}

// stop ends the group with err.
func (a *Agent) stop(g *errgroup.Group, err error) error {
	g.Go(func() error { return err })
	return g.Wait()
}

// startRoots are the mesh roots the agent trusts the RA with at start: the
// pod's meshRoots (from its injection) and the bundle a previous run of
// the agent in this pod received last (root-cert.pem in its in-memory
// directory, which outlives a container restart), so that a container
// restarted after a root rotation still trusts the RA's new certificate.
func startRoots(cfg agentconfig.Config, log *slog.Logger) []byte {
	roots := []byte(cfg.Trust.MeshRoots)
	b, err := os.ReadFile(filepath.Join(cfg.Dir, RootCertFile))
	if err != nil {
		return roots
	}
	if _, err := parseBundle(string(b)); err != nil {
		log.Warn("ignoring the roots a previous run left", "file", filepath.Join(cfg.Dir, RootCertFile), "error", err)
		return roots
	}
	return append(append(bytes.TrimRight(roots, "\n"), '\n'), b...)
}

// Keeper is the agent's certificate keeper.
func (a *Agent) Keeper() *Keeper { return a.keeper }

// writeCredentialFiles writes grpc's file_watcher files, each whole. The key is readable by
// every user (0644): the app containers that read it run as users of their own, not as the
// agent's 1337, and the directory is the pod's own in-memory emptyDir, which no other pod sees
// (with 0600 a real pod's app could not load it: e2e/node).
func (a *Agent) writeCredentialFiles(c *Credential) error {
	return atomicfile.WriteSet(a.cfg.Dir, []atomicfile.File{
		{Name: KeyFile, Data: c.KeyPEM, Perm: 0o644},
		{Name: CertChainFile, Data: c.ChainPEM, Perm: 0o644},
		{Name: RootCertFile, Data: c.RootsPEM, Perm: 0o644},
	})
}

func (a *Agent) certificateReady() error {
	cur, _, err := a.keeper.Current()
	switch {
	case cur == nil && err != nil:
		return fmt.Errorf("no workload certificate yet: %w", err)
	case cur == nil:
		return errors.New("no workload certificate yet")
	case time.Now().After(cur.Leaf.NotAfter):
		return fmt.Errorf("the workload certificate expired at %s and no new one could be obtained: %v", cur.Leaf.NotAfter.UTC().Format(time.RFC3339), err)
	}
	return nil
}

// certificateView is /debug/certificate.
func (a *Agent) certificateView(*http.Request) (any, error) {
	type view struct {
		Identity  string    `json:"identity"`
		Mode      string    `json:"mode"`
		Serial    string    `json:"serial,omitempty"`
		Issuer    string    `json:"issuer,omitempty"`
		NotBefore time.Time `json:"notBefore,omitzero"`
		NotAfter  time.Time `json:"notAfter,omitzero"`
		RenewAt   time.Time `json:"renewAt,omitzero"`
		LastError string    `json:"lastError,omitempty"`
	}
	cur, at, err := a.keeper.Current()
	v := view{Identity: a.id.String(), Mode: a.cfg.Mode}
	if cur != nil {
		v.Serial, v.Issuer, v.NotBefore, v.NotAfter, v.RenewAt = cur.Serial(), cur.Leaf.Issuer.String(), cur.Leaf.NotBefore, cur.Leaf.NotAfter, at
	}
	if err != nil {
		v.LastError = err.Error()
	}
	return v, nil
}

// drainMetadata reads Istio's drain variables from proxyMetadata:
// EXIT_ON_ZERO_ACTIVE_CONNECTIONS (a boolean; nil when unset) and
// MINIMUM_DRAIN_DURATION (a duration; 0 when unset).
func drainMetadata(cfg agentconfig.Config) (*bool, time.Duration, error) {
	pm, err := cfg.ProxyMetadataMap()
	if err != nil {
		return nil, 0, fmt.Errorf("proxyMetadata: %w", err)
	}
	var exit *bool
	if v, ok := pm["EXIT_ON_ZERO_ACTIVE_CONNECTIONS"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, 0, fmt.Errorf("proxyMetadata EXIT_ON_ZERO_ACTIVE_CONNECTIONS: %q is not a boolean", v)
		}
		exit = &b
	}
	var least time.Duration
	if v, ok := pm["MINIMUM_DRAIN_DURATION"]; ok {
		if least, err = time.ParseDuration(v); err != nil || least < 0 {
			return nil, 0, fmt.Errorf("proxyMetadata MINIMUM_DRAIN_DURATION: %q is not a duration of 0 or more", v)
		}
	}
	return exit, least, nil
}
