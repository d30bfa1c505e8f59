package enroll

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/renewal"
	"github.com/navemesh/nave/shared/retry"
	"github.com/navemesh/nave/shared/spiffeid"
	"github.com/navemesh/nave/shared/tlsconfig"
)

// renewalPolicy is when a cluster certificate is renewed: between 70 and
// 80 % of its lifetime (so that spokes enrolled together do not renew
// together), never sooner than a second after a renewal, retrying between
// RetryInitial and RetryMax.
var renewalPolicy = renewal.Policy{Fraction: 0.7, Jitter: 0.1, Floor: time.Second}

// RenewerOptions configure a Renewer.
type RenewerOptions struct {
	// Address is the hub's spoke listener, host:port.
	Address string
	// ServerName the hub's certificate must be valid for; "" is
	// Address's host.
	ServerName string
	// ServerNames are the fallback server's names each renewal asks
	// for (Options.ServerNames).
	ServerNames []string
	// StateDir holds the credentials Enroll saved; renewed ones replace
	// them there. Store, if set, is used instead.
	StateDir string
	Store    Store
	// RetryInitial and RetryMax bound the backoff between failed
	// renewals; 0 is 1 s and 5 min.
	RetryInitial, RetryMax time.Duration
	Logger                 *slog.Logger
	// Registerer receives nave_spoke_cert_renewals_total and
	// nave_spoke_cert_expiry_timestamp_seconds; nil registers nowhere.
	Registerer prometheus.Registerer
}

// Renewer keeps a spoke's cluster certificate fresh: Run renews it
// between 70 and 80 % of its lifetime (renewalPolicy), over mTLS with the
// current certificate, with a fresh key each time, and saves it to the
// state dir. New TLS connections made with ClientTLS (or
// GetClientCertificate) present the newest certificate; open connections
// keep the one they started with.
// A Renewer is safe for concurrent use.
type Renewer struct {
	opts       RenewerOptions
	serverName string
	log        *slog.Logger
	cur        atomic.Pointer[Credentials]
	renewMu    sync.Mutex // one renewal at a time
	loop       atomic.Pointer[renewal.Loop]
	renewals   *prometheus.CounterVec
	expiry     prometheus.Gauge
}

// NewRenewer loads the credentials from opts.Store (or opts.StateDir).
func NewRenewer(opts RenewerOptions) (*Renewer, error) {
	if opts.RetryInitial <= 0 {
		opts.RetryInitial = time.Second
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = 5 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	name, err := Options{Address: opts.Address, ServerName: opts.ServerName}.serverName()
	if err != nil {
		return nil, err
	}
	if opts.Store == nil {
		opts.Store = DirStore(opts.StateDir)
	}
	creds, err := opts.Store.Load(context.Background())
	if err != nil {
		return nil, err
	}
	r := &Renewer{opts: opts, serverName: name, log: opts.Logger,
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_spoke_cert_renewals_total",
			Help: "Cluster certificate renewals, by result (ok, error)."}, []string{"result"}),
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_spoke_cert_expiry_timestamp_seconds",
			Help: "When the current cluster certificate expires (Unix time)."}),
	}
	r.renewals.WithLabelValues("ok")
	r.renewals.WithLabelValues("error")
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(r.renewals, r.expiry)
	}
	r.set(creds)
	return r, nil
}

func (r *Renewer) set(c *Credentials) {
	r.cur.Store(c)
	r.expiry.Set(float64(c.Certificate.Leaf.NotAfter.Unix()))
}

// Credentials are the current credentials.
func (r *Renewer) Credentials() *Credentials { return r.cur.Load() }

// GetClientCertificate returns the current certificate, for
// tls.Config.GetClientCertificate.
func (r *Renewer) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.certificate()
}

// certificate returns the current certificate (a tlsconfig.Certificate).
func (r *Renewer) certificate() (*tls.Certificate, error) {
	c := r.cur.Load().Certificate
	return &c, nil
}

// ClientTLS is the configuration for connections to the hub: it trusts the
// hub's CA from the state dir and presents the current certificate.
func (r *Renewer) ClientTLS() *tls.Config {
	return tlsconfig.MutualClient(r.cur.Load().HubRoots, r.serverName, r.certificate)
}

// PolledTLS is the configuration of the spoke's Poll listener (polled
// mode): it serves the current cluster certificate, and requires the
// caller to present the hub's own certificate — a chain to the hub CA in
// the state dir (what the spoke pinned at enrollment), valid for client
// authentication, naming exactly spiffeid.Hub. Anything else (a tenant's
// or a spoke's certificate, a workload's, another CA's look-alike) fails
// the handshake; refused, if set, is called with the reason.
func (r *Renewer) PolledTLS(refused func(error)) *tls.Config {
	c := tlsconfig.MutualServer(tlsconfig.Ours, r.certificate, tls.RequireAnyClientCert, nil)
	c.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		_, err := spiffeid.VerifyChain(raw, r.cur.Load().HubRoots, x509.ExtKeyUsageClientAuth, spiffeid.Hub)
		if err != nil {
			err = fmt.Errorf("the caller is not the hub: %w", err)
			if refused != nil {
				refused(err)
			}
		}
		return err
	}
	return c
}

// Renew renews the certificate now.
func (r *Renewer) Renew(ctx context.Context) error {
	r.renewMu.Lock()
	defer r.renewMu.Unlock()
	err := r.renew(ctx)
	result := "ok"
	if err != nil {
		result = "error"
	}
	r.renewals.WithLabelValues(result).Inc()
	return err
}

func (r *Renewer) renew(ctx context.Context) error {
	cur := r.cur.Load()
	key, csr, err := newKey(r.opts.ServerNames)
	if err != nil {
		return err
	}
	// A connection of its own, so that the hub sees the current
	// certificate whatever other connections started with.
	conn, err := grpc.NewClient(r.opts.Address, grpc.WithTransportCredentials(credentials.NewTLS(r.ClientTLS())))
	if err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	defer conn.Close()
	resp, err := protocolv1.NewEnrollmentClient(conn).Renew(ctx, &protocolv1.RenewRequest{CsrPem: csr})
	if err != nil {
		return fmt.Errorf("renew at %s: %w", r.opts.Address, err)
	}
	cert, td, err := checkIssued(resp.GetCertChainPem(), key, resp.GetTrustBundlePem())
	if err != nil {
		return fmt.Errorf("renew: the hub's answer: %w", err)
	}
	if _, cluster, _ := spiffeid.FromCertificate(cert.Leaf); td != cur.TrustDomain || cluster != cur.Cluster {
		return fmt.Errorf("renew: the hub issued a certificate for %s/%s, want %s/%s", td, cluster, cur.TrustDomain, cur.Cluster)
	}
	next := *cur
	next.Certificate = cert
	if b := resp.GetTrustBundlePem(); len(b) > 0 {
		next.TrustBundle = b
	}
	if err := r.opts.Store.Save(ctx, &next); err != nil {
		return fmt.Errorf("renew: saving the certificate in the %s: %w", r.opts.Store, err)
	}
	r.set(&next)
	r.log.Info("cluster certificate renewed", "mesh", next.Mesh, "cluster", next.Cluster,
		"serial", cert.Leaf.SerialNumber.Text(16), "notAfter", cert.Leaf.NotAfter)
	return nil
}

// Run renews the certificate whenever it is due until ctx is done, then
// returns nil. A failed renewal is logged and retried with capped
// exponential backoff (a revoked cluster keeps failing; its log says so).
func (r *Renewer) Run(ctx context.Context) error {
	p := renewalPolicy
	p.Retry = retry.Policy{Initial: r.opts.RetryInitial, Max: r.opts.RetryMax}
	first := r.due()
	if missing := r.missingNames(); len(missing) > 0 {
		// Saved before the fallback server had these names: renew once
		// now, so that it serves a certificate valid for them.
		r.log.Info("the cluster certificate lacks fallback server names; renewing it now", "missing", missing)
		first = time.Now()
	}
	loop := renewal.NewLoop(func(ctx context.Context) (time.Time, error) {
		if err := r.Renew(ctx); err != nil {
			return time.Time{}, err
		}
		return r.due(), nil
	}, renewal.Options{Policy: p, First: first, Failed: func(err error, wait time.Duration) {
		leaf := r.cur.Load().Certificate.Leaf
		r.log.Warn("cluster certificate renewal failed; retrying", "err", err, "retryIn", wait,
			"notAfter", leaf.NotAfter, "expired", !time.Now().Before(leaf.NotAfter))
	}})
	r.loop.Store(loop)
	return loop.Run(ctx)
}

// NextRenewal is when Run renews next (after a failure, when it retries);
// zero before Run.
func (r *Renewer) NextRenewal() time.Time {
	if l := r.loop.Load(); l != nil {
		return l.Next()
	}
	return time.Time{}
}

// missingNames are the ServerNames the current certificate is not valid
// for.
func (r *Renewer) missingNames() []string {
	leaf := r.cur.Load().Certificate.Leaf
	var missing []string
	for _, n := range r.opts.ServerNames {
		if leaf.VerifyHostname(n) != nil {
			missing = append(missing, n)
		}
	}
	return missing
}

// due is when the current certificate is due for renewal.
func (r *Renewer) due() time.Time {
	leaf := r.cur.Load().Certificate.Leaf
	return renewalPolicy.At(leaf.NotBefore, leaf.NotAfter)
}
