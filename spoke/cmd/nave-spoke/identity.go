package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/shared/tlspin"
	"github.com/navemesh/nave/spoke/enroll"
	"github.com/navemesh/nave/spoke/inject"
	"github.com/navemesh/nave/spoke/spokeconfig"
)

// enrollAttemptTimeout bounds one enrollment call, so that a hub that
// accepts the connection but never answers is retried like one that is down.
const enrollAttemptTimeout = 30 * time.Second

// hubIdentity is how the spoke proves to the hub which (mesh, cluster) it
// is: the cluster certificate in hub.stateDir, got by enrolling with the
// join token in hub.tokenFile when the state dir holds none, and renewed by
// an enrollment Renewer. With hub.plaintext it is nothing: the uplink
// claims its mesh and cluster in metadata. Its ready check and debug view
// are safe for concurrent use.
type hubIdentity struct {
	hub           spokeconfig.Hub
	mesh, cluster string
	serverNames   []string // the fallback server's, in the certificate
	log           *slog.Logger
	reg           prometheus.Registerer

	renewer atomic.Pointer[enroll.Renewer] // set once the spoke has credentials
	mu      sync.Mutex
	lastErr string // why the spoke has no credentials yet
}

func newHubIdentity(cfg spokeconfig.Config, log *slog.Logger, reg prometheus.Registerer) *hubIdentity {
	return &hubIdentity{hub: cfg.Hub, mesh: cfg.Mesh, cluster: cfg.Cluster, serverNames: cfg.FallbackServerNames(), log: log, reg: reg}
}

// establish returns the Renewer of the spoke's cluster credentials, from
// the state dir, or enrolling first when it holds none: it then waits,
// retrying, while the hub is unreachable. It returns nil with
// hub.plaintext. It refuses credentials for another (mesh, cluster) than
// the spoke's configuration names.
func (id *hubIdentity) establish(ctx context.Context) (*enroll.Renewer, error) {
	if id.hub.Plaintext {
		id.log.Warn("INSECURE: hub.plaintext is set: the spoke connects to the hub without TLS and claims its mesh and cluster " +
			"in metadata, which anyone can forge; use it only for tests and development, with a hub run with --tls.plaintext")
		return nil, nil
	}
	creds, err := enroll.Load(id.hub.StateDir)
	whose := "hub.stateDir " + id.hub.StateDir + " holds"
	switch {
	case errors.Is(err, enroll.ErrNotEnrolled):
		id.setErr(err)
		if creds, err = id.enroll(ctx); err != nil {
			return nil, err
		}
		whose = "the join token in hub.tokenFile " + id.hub.TokenFile + " gave (saved in hub.stateDir " + id.hub.StateDir + ")"
	case err != nil:
		return nil, fmt.Errorf("hub.stateDir: %w (remove the state dir and give the spoke a new join token to enroll again)", err)
	}
	if creds.Mesh != id.mesh || creds.Cluster != id.cluster {
		return nil, fmt.Errorf("%s the credentials of mesh %q cluster %q, but this spoke is configured as mesh %q cluster %q: "+
			"fix mesh and cluster, or give this cluster its own state dir and join token",
			whose, creds.Mesh, creds.Cluster, id.mesh, id.cluster)
	}
	r, err := enroll.NewRenewer(enroll.RenewerOptions{Address: id.hub.Address, ServerName: id.hub.ServerName,
		ServerNames: id.serverNames, StateDir: id.hub.StateDir, Logger: id.log, Registerer: id.reg})
	if err != nil {
		return nil, fmt.Errorf("hub.stateDir: %w", err)
	}
	id.renewer.Store(r)
	id.setErr(nil)
	leaf := r.Credentials().Certificate.Leaf
	id.log.Info("cluster identity", "mesh", creds.Mesh, "cluster", creds.Cluster, "trustDomain", creds.TrustDomain,
		"serial", leaf.SerialNumber.Text(16), "notAfter", leaf.NotAfter, "stateDir", id.hub.StateDir)
	return r, nil
}

// enroll redeems the join token, retrying with backoff while the hub is
// unreachable (Unavailable, DeadlineExceeded); any other failure, such as
// the hub refusing the token, is final.
func (id *hubIdentity) enroll(ctx context.Context) (*enroll.Credentials, error) {
	opts, token, err := id.enrollOptions()
	if err != nil {
		return nil, err
	}
	id.log.Info("state dir holds no credentials; enrolling with the join token", "stateDir", id.hub.StateDir,
		"hub", id.hub.Address, "tokenFile", id.hub.TokenFile)
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(id.hub.BackoffInitial),
		backoff.WithMaxInterval(id.hub.BackoffMax), backoff.WithMaxElapsedTime(0))
	for {
		attempt, cancel := context.WithTimeout(ctx, enrollAttemptTimeout)
		creds, err := enroll.Enroll(attempt, opts, token)
		cancel()
		switch {
		case err == nil:
			leaf := creds.Certificate.Leaf
			id.log.Info("enrolled", "mesh", creds.Mesh, "cluster", creds.Cluster, "trustDomain", creds.TrustDomain,
				"serial", leaf.SerialNumber.Text(16), "notAfter", leaf.NotAfter)
			return creds, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		var gs interface{ GRPCStatus() *status.Status }
		if !errors.As(err, &gs) {
			return nil, err // refused before reaching the hub: the settings or the hub's answer
		}
		st := gs.GRPCStatus()
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
		case codes.Unauthenticated:
			return nil, fmt.Errorf("the hub at %s refused the join token in hub.tokenFile %s (%s): %s; create a new one with navectl token create",
				id.hub.Address, id.hub.TokenFile, st.Code(), st.Message())
		default:
			return nil, fmt.Errorf("the hub at %s refused to enroll the spoke (%s): %s", id.hub.Address, st.Code(), st.Message())
		}
		id.setErr(err)
		wait := b.NextBackOff()
		id.log.Warn("hub unreachable or not trusted (TLS handshake); retrying enrollment", "hub", id.hub.Address, "in", wait.Round(time.Millisecond), "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// enrollOptions reads what a first enrollment needs: the join token and
// how to trust the hub.
func (id *hubIdentity) enrollOptions() (enroll.Options, string, error) {
	opts := enroll.Options{Address: id.hub.Address, ServerName: id.hub.ServerName, HubCAHash: id.hub.CAHash, StateDir: id.hub.StateDir,
		ServerNames: id.serverNames}
	if id.hub.TokenFile == "" {
		return opts, "", fmt.Errorf("hub.stateDir %s holds no credentials and hub.tokenFile is not set: "+
			"the spoke needs a join token (navectl token create) to enroll", id.hub.StateDir)
	}
	if id.hub.CAHash == "" && id.hub.CAFile == "" {
		return opts, "", fmt.Errorf("hub.stateDir %s holds no credentials and neither hub.caHash nor hub.caFile is set: "+
			"the spoke needs one of them to trust the hub before it sends the join token", id.hub.StateDir)
	}
	if id.hub.CAFile != "" {
		ca, err := os.ReadFile(id.hub.CAFile)
		if err != nil {
			return opts, "", fmt.Errorf("hub.caFile: %w", err)
		}
		opts.HubCA = ca
	}
	b, err := os.ReadFile(id.hub.TokenFile)
	if err != nil {
		return opts, "", fmt.Errorf("hub.tokenFile: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return opts, "", fmt.Errorf("hub.tokenFile %s is empty", id.hub.TokenFile)
	}
	return opts, token, nil
}

func (id *hubIdentity) setErr(err error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.lastErr = ""
	if err != nil {
		id.lastErr = err.Error()
	}
}

// ready fails until the spoke has credentials, and once its certificate
// has expired (renewals keep failing).
func (id *hubIdentity) ready() error {
	if id.hub.Plaintext {
		return nil
	}
	r := id.renewer.Load()
	if r == nil {
		id.mu.Lock()
		defer id.mu.Unlock()
		return fmt.Errorf("not enrolled yet: %s", id.lastErr)
	}
	if na := r.Credentials().Certificate.Leaf.NotAfter; !time.Now().Before(na) {
		return fmt.Errorf("the cluster certificate expired at %s; renewals are failing (see the log)", na.Format(time.RFC3339))
	}
	return nil
}

// trust is what injected pods need to trust the registration authority
// and the hub: the mesh's roots and the hub's CA as the spoke has them now
// (renewals may update them), or why there are none yet.
func (id *hubIdentity) trust() (inject.Trust, error) {
	r := id.renewer.Load()
	if r == nil {
		return inject.Trust{}, errors.New("the spoke is not enrolled with its hub yet (see /debug/identity)")
	}
	c := r.Credentials()
	if len(c.TrustBundle) == 0 {
		return inject.Trust{}, fmt.Errorf("the hub gave the spoke no mesh roots (trust-bundle.pem in hub.stateDir %s)", id.hub.StateDir)
	}
	return inject.Trust{TrustDomain: c.TrustDomain, MeshRoots: c.TrustBundle, HubCA: c.HubCA}, nil
}

// identityView is the body of /debug/identity.
type identityView struct {
	Plaintext   bool      `json:"plaintext"`
	Enrolled    bool      `json:"enrolled"`
	StateDir    string    `json:"stateDir"`
	LastError   string    `json:"lastError,omitempty"`
	Mesh        string    `json:"mesh,omitempty"`
	Cluster     string    `json:"cluster,omitempty"`
	TrustDomain string    `json:"trustDomain,omitempty"`
	URI         string    `json:"uri,omitempty"`
	Serial      string    `json:"serial,omitempty"`
	NotBefore   time.Time `json:"notBefore,omitzero"`
	NotAfter    time.Time `json:"notAfter,omitzero"`
	// HubCAHashes pin the roots the spoke trusts the hub by (the form
	// of hub.caHash).
	HubCAHashes []string `json:"hubCAHashes,omitempty"`
}

// debug is the /debug/identity view: the identity the spoke presents to
// the hub, or {"plaintext": true}.
func (id *hubIdentity) debug(*http.Request) (any, error) {
	if id.hub.Plaintext {
		return map[string]bool{"plaintext": true}, nil
	}
	v := identityView{StateDir: id.hub.StateDir}
	r := id.renewer.Load()
	if r == nil {
		id.mu.Lock()
		v.LastError = id.lastErr
		id.mu.Unlock()
		return v, nil
	}
	c := r.Credentials()
	leaf := c.Certificate.Leaf
	v.Enrolled, v.Mesh, v.Cluster, v.TrustDomain = true, c.Mesh, c.Cluster, c.TrustDomain
	v.Serial, v.NotBefore, v.NotAfter = leaf.SerialNumber.Text(16), leaf.NotBefore, leaf.NotAfter
	if len(leaf.URIs) == 1 {
		v.URI = leaf.URIs[0].String()
	}
	v.HubCAHashes, _ = tlspin.HashesPEM(c.HubCA) // parsed when loaded
	return v, nil
}
