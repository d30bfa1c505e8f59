package server

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

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/shared/kubeconfig"
	"github.com/navemesh/nave/shared/tlspin"
	"github.com/navemesh/nave/spoke/enroll"
	"github.com/navemesh/nave/spoke/inject"
	"github.com/navemesh/nave/spoke/spokeconfig"
)

// hubIdentity is how the spoke proves to the hub which (mesh, cluster) it
// is: the cluster certificate in its credentials store (hub.stateDir, or
// the Secret hub.credentialsSecret), got by enrolling with the join token
// in hub.tokenFile when the store holds none, and renewed by an enrollment
// Renewer. With hub.plaintext it is nothing: the uplink
// claims its mesh and cluster in metadata. Its ready check and debug view
// are safe for concurrent use.
type hubIdentity struct {
	hub           spokeconfig.Hub
	mesh, cluster string
	serverNames   []string // the fallback server's, in the certificate
	log           *slog.Logger
	reg           prometheus.Registerer
	kubeconfig    string // for hub.credentialsSecret

	store   enroll.Store
	storeAt string                         // the setting naming the store and the store, for messages
	renewer atomic.Pointer[enroll.Renewer] // set once the spoke has credentials
	mu      sync.Mutex
	lastErr string // why the spoke has no credentials yet
}

func newHubIdentity(cfg spokeconfig.Config, log *slog.Logger, reg prometheus.Registerer) *hubIdentity {
	id := &hubIdentity{hub: cfg.Hub, mesh: cfg.Mesh, cluster: cfg.Cluster, serverNames: cfg.FallbackServerNames(), log: log, reg: reg,
		kubeconfig: cfg.Kube.Kubeconfig, store: enroll.DirStore(cfg.Hub.StateDir)}
	id.storeAt = "hub.stateDir " + cfg.Hub.StateDir
	if cfg.Hub.CredentialsSecret != "" {
		id.storeAt = "hub.credentialsSecret " + cfg.Hub.CredentialsSecret
	}
	return id
}

// openStore connects the Secret store of hub.credentialsSecret (the state
// dir needs nothing).
func (id *hubIdentity) openStore() error {
	if id.hub.CredentialsSecret == "" {
		return nil
	}
	ns, name, err := id.hub.CredentialsSecretName()
	if err != nil {
		return err
	}
	rc, err := kubeconfig.Load(id.kubeconfig)
	if err != nil {
		return fmt.Errorf("hub.credentialsSecret: kubernetes.kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("hub.credentialsSecret: %w", err)
	}
	id.store = enroll.SecretStore{Client: cs, Namespace: ns, Name: name}
	return nil
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
	if err := id.openStore(); err != nil {
		return nil, err
	}
	client := &enroll.Client{Options: enroll.Options{Address: id.hub.Address, ServerName: id.hub.ServerName, HubCAHash: id.hub.CAHash,
		Store: id.store, ServerNames: id.serverNames},
		BackoffInitial: id.hub.BackoffInitial, BackoffMax: id.hub.BackoffMax, OnRetry: id.setErr, Logger: id.log}
	creds, err := client.Load(ctx)
	whose := id.storeAt + " holds"
	switch {
	case errors.Is(err, enroll.ErrNotEnrolled):
		id.setErr(err)
		if creds, err = id.enroll(ctx, client); err != nil {
			return nil, err
		}
		whose = "the join token in hub.tokenFile " + id.hub.TokenFile + " gave (saved in " + id.storeAt + ")"
	case err != nil:
		return nil, fmt.Errorf("%s: %w (remove it and give the spoke a new join token to enroll again)", id.storeAt, err)
	}
	if creds.Mesh != id.mesh || creds.Cluster != id.cluster {
		return nil, fmt.Errorf("%s the credentials of mesh %q cluster %q, but this spoke is configured as mesh %q cluster %q: "+
			"fix mesh and cluster, or give this cluster its own credentials store and join token",
			whose, creds.Mesh, creds.Cluster, id.mesh, id.cluster)
	}
	r, err := enroll.NewRenewer(enroll.RenewerOptions{Address: id.hub.Address, ServerName: id.hub.ServerName,
		ServerNames: id.serverNames, Store: id.store, Logger: id.log, Registerer: id.reg})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", id.storeAt, err)
	}
	id.renewer.Store(r)
	id.setErr(nil)
	leaf := r.Credentials().Certificate.Leaf
	id.log.Info("cluster identity", "mesh", creds.Mesh, "cluster", creds.Cluster, "trustDomain", creds.TrustDomain,
		"serial", leaf.SerialNumber.Text(16), "notAfter", leaf.NotAfter, "store", id.store.String())
	return r, nil
}

// enroll redeems the join token, retrying while the hub is unreachable
// (enroll.Client); the hub refusing the token is final.
func (id *hubIdentity) enroll(ctx context.Context, client *enroll.Client) (*enroll.Credentials, error) {
	token, err := id.enrollOptions(&client.Options)
	if err != nil {
		return nil, err
	}
	id.log.Info("no credentials yet; enrolling with the join token", "store", id.store.String(),
		"hub", id.hub.Address, "tokenFile", id.hub.TokenFile)
	creds, err := client.Enroll(ctx, token)
	var refused *enroll.RefusedError
	if errors.As(err, &refused) && refused.TokenRefused() {
		return nil, fmt.Errorf("the hub at %s refused the join token in hub.tokenFile %s (%s): %s; create a new one with navectl token create",
			id.hub.Address, id.hub.TokenFile, refused.Status.Code(), refused.Status.Message())
	}
	return creds, err
}

// enrollOptions reads what a first enrollment needs into opts (how to
// trust the hub) and returns the join token.
func (id *hubIdentity) enrollOptions(opts *enroll.Options) (string, error) {
	if id.hub.TokenFile == "" {
		return "", fmt.Errorf("%s holds no credentials and hub.tokenFile is not set: "+
			"the spoke needs a join token (navectl token create) to enroll", id.storeAt)
	}
	if id.hub.CAHash == "" && id.hub.CAFile == "" {
		return "", fmt.Errorf("%s holds no credentials and neither hub.caHash nor hub.caFile is set: "+
			"the spoke needs one of them to trust the hub before it sends the join token", id.storeAt)
	}
	if id.hub.CAFile != "" {
		ca, err := os.ReadFile(id.hub.CAFile)
		if err != nil {
			return "", fmt.Errorf("hub.caFile: %w", err)
		}
		opts.HubCA = ca
	}
	b, err := os.ReadFile(id.hub.TokenFile)
	if err != nil {
		return "", fmt.Errorf("hub.tokenFile: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("hub.tokenFile %s is empty", id.hub.TokenFile)
	}
	return token, nil
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
		return inject.Trust{}, fmt.Errorf("the hub gave the spoke no mesh roots (trust-bundle.pem in %s)", id.storeAt)
	}
	return inject.Trust{TrustDomain: c.TrustDomain, MeshRoots: c.TrustBundle, HubCA: c.HubCA}, nil
}

// identityView is the body of /debug/identity.
type identityView struct {
	Plaintext   bool      `json:"plaintext"`
	Enrolled    bool      `json:"enrolled"`
	StateDir    string    `json:"stateDir"`
	Store       string    `json:"store"`
	LastError   string    `json:"lastError,omitempty"`
	Mesh        string    `json:"mesh,omitempty"`
	Cluster     string    `json:"cluster,omitempty"`
	TrustDomain string    `json:"trustDomain,omitempty"`
	URI         string    `json:"uri,omitempty"`
	Serial      string    `json:"serial,omitempty"`
	NotBefore   time.Time `json:"notBefore,omitzero"`
	NotAfter    time.Time `json:"notAfter,omitzero"`
	RenewAt     time.Time `json:"renewAt,omitzero"`
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
	v := identityView{StateDir: id.hub.StateDir, Store: id.store.String()}
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
	v.Serial, v.NotBefore, v.NotAfter, v.RenewAt = leaf.SerialNumber.Text(16), leaf.NotBefore, leaf.NotAfter, r.NextRenewal()
	if len(leaf.URIs) == 1 {
		v.URI = leaf.URIs[0].String()
	}
	v.HubCAHashes, _ = tlspin.HashesPEM(c.HubCA) // parsed when loaded
	return v, nil
}
