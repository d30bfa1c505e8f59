package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/operatorca"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/hub/tenants"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/handshake"
	"github.com/navemesh/nave/xds/ads"
)

// security is what the hub authenticates spokes and proxies with. In
// plaintext mode it trusts what they claim, within the meshes it serves.
type security struct {
	plaintext bool
	// meshes are the meshes served: every other mesh is refused.
	meshes    *tenants.Registry
	authority *ca.Authority
	serving   *servingcert.Cert
	store     enroll.Store
	// known remembers the clusters that synced, in every mode (state.store):
	// store with TLS; in plaintext mode a store holding only them.
	known     enroll.Store
	spokeAuth *enroll.CertAuthenticator
	// servingCA and enrollment say where the serving CA and the
	// enrollment state are (/debug/security).
	servingCA, enrollment string
	// operators is the operators' CA, loaded when admin.operatorListen is
	// set; nil otherwise.
	operators *ca.Authority
}

// newSecurity loads the CAs of the Active meshes of meshes (ca.store), the
// serving certificate and the enrollment state (state.store); in
// plaintext mode it loads nothing and warns.
func newSecurity(ctx context.Context, cfg hubconfig.Config, meshes *tenants.Registry, log *slog.Logger, reg prometheus.Registerer) (*security, error) {
	if cfg.TLS.Plaintext {
		log.Warn("INSECURE: tls.plaintext is set: the spokes and xds listeners serve without TLS and check no credentials; "+
			"whoever reaches them is believed: a spoke writes the cluster it names, a proxy reads its node's mesh (else defaultMesh) "+
			"as the namespace and service account it names, in any of these meshes; other meshes are refused. Use only where every client is trusted",
			"meshes", strings.Join(meshes.Names(), ","), "defaultMesh", cfg.XDS.DefaultMesh)
		// Nothing is enrolled, but the clusters that synced are
		// remembered in state.store, so that a restarted hub waits for
		// them as for enrolled ones.
		st := cfg.State
		known, err := enroll.OpenStore(st.Store, st.Dir, st.Namespace, st.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("state.store: %w", err)
		}
		return &security{plaintext: true, meshes: meshes, known: known}, nil
	}
	dir := cfg.State.Dir
	store, err := ca.OpenStore(cfg.CA.Store, dir, cfg.CA.Namespace, cfg.CA.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("ca.store: %w", err)
	}
	log.Info("mesh CAs", "store", cfg.CA.Store, "location", store.Location("<mesh>"))
	auth, err := ca.New(store, ca.Options{DefaultTTL: cfg.CA.WorkloadCertTTL, Logger: log.With("component", "ca"), Registerer: reg,
		HubNames: cfg.TLS.Hosts})
	if err != nil {
		return nil, err
	}
	// One tenant's broken CA does not keep the others from being served:
	// it is logged and tried again by the reconcile (meshLife). Only when
	// no mesh's CA loads (the store is unreachable, most likely) does the
	// hub refuse to start.
	var loaded, failed int
	var firstErr error
	for _, m := range meshes.List() {
		if m.Phase != tenants.Active {
			continue
		}
		if err := auth.Load(ctx, ca.Mesh{Name: m.Name, TrustDomain: m.TrustDomain}); err != nil {
			failed++
			if firstErr == nil {
				firstErr = fmt.Errorf("mesh %s: %w", m.Name, err)
			}
			log.Error("mesh CA not loaded: the mesh is not served until it is (tried again every ca.refreshInterval)", "mesh", m.Name, "err", err)
			continue
		}
		loaded++
	}
	if loaded == 0 && failed > 0 {
		return nil, fmt.Errorf("ca: no mesh CA loads: %w", firstErr)
	}
	// The serving CA and enrollment follow state.store: replicas racing to
	// create the serving CA end with one (create-if-absent).
	st := cfg.State
	servingStore, err := servingcert.OpenStore(st.Store, dir, st.Namespace, st.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("state.store: %w", err)
	}
	serving, err := servingcert.New(ctx, servingStore, cfg.TLS.Hosts, log.With("component", "servingcert"))
	if err != nil {
		return nil, fmt.Errorf("state.store: %w", err)
	}
	es, err := enroll.OpenStore(st.Store, dir, st.Namespace, st.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("state.store: %w", err)
	}
	sec := &security{meshes: meshes, authority: auth, serving: serving, store: es, known: es}
	if cfg.Admin.OperatorListen != "" {
		if sec.operators, err = operatorca.Load(ctx, servingStore, log.With("component", "operatorca")); err != nil {
			return nil, fmt.Errorf("state.store: %w", err)
		}
	}
	if st.Store == hubconfig.StoreDir {
		sec.servingCA, sec.enrollment = servingcert.RootPath(dir), filepath.Join(dir, enroll.StateSubdir)
	} else {
		sec.servingCA, sec.enrollment = servingStore.Location(servingcert.Mesh), st.Namespace+"/nave-enroll-*"
	}
	log.Info("hub state", "store", st.Store, "servingCA", sec.servingCA, "enrollment", sec.enrollment)
	sec.spokeAuth = enroll.NewCertAuthenticator(auth, es, enroll.AuthOptions{Logger: log.With("component", "spokeauth"), Registerer: reg,
		Hosted: meshes.Hosted})
	return sec, nil
}

// operatorTLS is the operator admin listener's TLS: the hub's serving
// certificate, and a client certificate required and verified against the
// operators' CA (a tenant's or a spoke's certificate fails the handshake).
func (s *security) operatorTLS() (*tls.Config, error) {
	roots, err := s.operators.Roots(operatorca.Mesh)
	if err != nil {
		return nil, err
	}
	cfg := s.serving.ServerConfig()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = roots
	return cfg, nil
}

// operatorScope is the scope of the operator making r, from the client
// certificate its TLS handshake verified.
func operatorScope(r *http.Request) (admin.Scope, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return admin.Scope{}, errors.New("no verified operator certificate")
	}
	return operatorca.Scope(r.TLS.VerifiedChains[0][0])
}

// spokeAuthenticator decides a spoke stream's (mesh, cluster), refusing
// meshes the hub does not serve.
func (s *security) spokeAuthenticator() ingest.Authenticator {
	if s.plaintext {
		return ingest.HostedMeshes(s.meshes.Hosted, s.meshes.Names, ingest.ClaimedIdentity())
	}
	return s.spokeAuth
}

// proxyAuthenticator decides a proxy stream's mesh and workload; nil in
// plaintext mode (the node's metadata stands).
func (s *security) proxyAuthenticator() ads.Authenticator {
	if s.plaintext {
		return nil
	}
	authz := ca.PeerCertificateAuthorizer{Authority: s.authority, Service: "the xDS listener (xds.listen)"}
	return ads.AuthenticatorFunc(func(ctx context.Context) (ads.WorkloadIdentity, error) {
		g, err := authz.Authorize(ctx)
		if err != nil {
			return ads.WorkloadIdentity{}, err
		}
		ns, sa, _ := g.Identities[0].Workload()
		return ads.WorkloadIdentity{Mesh: g.Mesh, Namespace: ns, ServiceAccount: sa, Name: g.Caller}, nil
	})
}

// trustDomain is mesh's trust domain, its CA's ("" in plaintext mode or for a mesh without a
// CA: the default), for the push context's snapshots.
func (s *security) trustDomain(mesh string) string {
	if s.plaintext {
		return ""
	}
	td, _ := s.authority.TrustDomain(mesh)
	return td
}

// roots is the trust bundle of mesh served on Watch; nil in plaintext
// mode (no CA).
func (s *security) roots(mesh string) (*protocolv1.TrustBundle, error) {
	if s.plaintext {
		return nil, nil
	}
	td, err := s.authority.TrustDomain(mesh)
	if err != nil {
		return nil, err
	}
	pem, err := s.authority.RootsPEM(mesh)
	if err != nil {
		return nil, err
	}
	return &protocolv1.TrustBundle{Mesh: mesh, TrustDomain: td, RootsPem: string(pem)}, nil
}

// secrets mints the certificates the xds listener serves Envoy proxies by
// SDS when mint (sds.mintKeys) is set; nil otherwise and in plaintext mode.
func (s *security) secrets(mint bool) ads.SecretSource {
	if s.plaintext || !mint {
		return nil
	}
	return meshSecrets{s.authority}
}

// meshSecrets mints a proxy's workload certificate from its mesh's CA.
type meshSecrets struct{ a *ca.Authority }

func (m meshSecrets) Mint(ctx context.Context, id ads.WorkloadIdentity) (*ads.Credential, error) {
	td, err := m.a.TrustDomain(id.Mesh)
	if err != nil {
		return nil, err
	}
	wid, err := ca.WorkloadID(td, id.Namespace, id.ServiceAccount)
	if err != nil {
		return nil, err
	}
	mt, err := m.a.Mint(ctx, id.Mesh, ca.SignOptions{Identities: []ca.ID{wid}})
	if err != nil {
		return nil, err
	}
	roots, err := m.a.RootsPEM(id.Mesh)
	if err != nil {
		return nil, err
	}
	return &ads.Credential{ChainPEM: mt.ChainPEM, KeyPEM: mt.KeyPEM, RootsPEM: roots,
		Serial: mt.Leaf.SerialNumber.Text(16), RenewAt: ca.RenewAt(mt.Leaf)}, nil
}

// serverOptions are the transport options of the gRPC listener of config
// key listener (spokes.listen, xds.listen); its failed handshakes are
// counted and logged by hs.
func (s *security) serverOptions(cfg hubconfig.Config, listener string, hs *handshake.Failures) []grpc.ServerOption {
	if s.plaintext {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(hs.Credentials(listener, credentials.NewTLS(s.serving.ServerConfig()))), grpc.ConnectionTimeout(cfg.TLS.HandshakeTimeout)}
}

// register adds the services that need the CA: on the spokes listener
// Enrollment and Istio's CA API for spokes acting for their workloads (and
// for renewals), on the xds listener the CA API for workloads renewing
// their own certificates with the one they hold.
func (s *security) register(cfg hubconfig.Config, spokes, xds *grpc.Server, log *slog.Logger, reg prometheus.Registerer) {
	if s.plaintext {
		return
	}
	protocolv1.RegisterEnrollmentServer(spokes, enroll.NewServer(s.store, s.authority, s.spokeAuth, enroll.ServerOptions{
		CertTTL: cfg.CA.ClusterCertTTL, Logger: log.With("component", "enroll"), Registerer: reg, Hosted: s.meshes.Hosted}))
	own := ca.PeerCertificateAuthorizer{Authority: s.authority}
	caLog := ca.ServerOptions{Logger: log.With("component", "ca")}
	// Spokes obtain their workloads' certificates (as registration
	// authorities); any caller may renew its own.
	ca.NewServer(s.authority, enroll.SpokeRAAuthorizer{Auth: s.spokeAuth, Signer: s.authority, Next: own}, caLog).Register(spokes)
	ca.NewServer(s.authority, own, caLog).Register(xds)
}

// enforcer cuts revoked clusters off (withdraw): their streams closed and
// their resources withdrawn at once (not after the stale grace period); nil in
// plaintext mode.
func (s *security) enforcer(withdraw func(ingest.ClusterIdentity, string) bool, log *slog.Logger, reg prometheus.Registerer) *enroll.Enforcer {
	if s.plaintext {
		return nil
	}
	return enroll.NewEnforcer(s.store, withdraw, enroll.EnforcerOptions{Logger: log.With("component", "enforcer"), Registerer: reg})
}

// debug registers /debug/security: the mode, the meshes and their trust
// domains, where the serving CA and the enrollment state are, and the
// enrolled and revoked clusters.
func (s *security) debug(adm *admin.Server) {
	adm.HandleTenantDebug("roots", "each mesh's roots of trust and where a root rotation stands (navectl roots)", func(r *http.Request) (any, error) {
		if s.plaintext {
			return map[string]any{"plaintext": true}, nil
		}
		var out []ca.RotationStatus
		for _, m := range s.authority.Meshes() {
			if !admin.Visible(r, m.Name) {
				continue
			}
			st, err := s.authority.Rotation(m.Name)
			if err != nil {
				return nil, err
			}
			out = append(out, st)
		}
		return out, nil
	})
	adm.HandleDebug("security", "transport security: plaintext or TLS, meshes and trust domains, serving CA, enrolled and revoked clusters", func(r *http.Request) (any, error) {
		if s.plaintext {
			return map[string]any{"plaintext": true, "meshes": s.meshList()}, nil
		}
		clusters, err := s.store.Clusters(r.Context())
		if err != nil {
			return nil, err
		}
		revoked, err := s.store.Revocations(r.Context())
		if err != nil {
			return nil, err
		}
		return map[string]any{
			"plaintext":  false,
			"meshes":     s.meshList(),
			"servingCA":  s.servingCA,
			"enrollment": s.enrollment,
			"clusters":   clusters,
			"revoked":    revoked,
			"now":        time.Now().UTC(),
		}, nil
	})
}

// securityMesh is one mesh of /debug/security.
type securityMesh struct {
	Name        string        `json:"name"`
	UID         string        `json:"uid"`
	TrustDomain string        `json:"trustDomain"`
	Phase       tenants.Phase `json:"phase"`
	// CA says whether the mesh's CA is loaded (always false in plaintext
	// mode): a mesh being deleted has none.
	CA bool `json:"ca"`
}

// meshList lists the registry's meshes for /debug/security.
func (s *security) meshList() []securityMesh {
	out := []securityMesh{}
	for _, m := range s.meshes.List() {
		sm := securityMesh{Name: m.Name, UID: m.UID, TrustDomain: m.TrustDomain, Phase: m.Phase}
		if !s.plaintext {
			_, err := s.authority.TrustDomain(m.Name)
			sm.CA = err == nil
		}
		out = append(out, sm)
	}
	return out
}

// purge deletes what the hub keeps of mesh, which it no longer serves:
// its enrollment state (join tokens, enrolled clusters, revocations) and,
// unless keepCA, its CA, keys and all; and the clusters it had (known),
// so that a mesh re-created with its name does not wait for them.
func (s *security) purge(ctx context.Context, mesh string, keepCA bool) error {
	if s.meshes.Hosted(mesh) {
		return fmt.Errorf("purge mesh %s: it is served (Active): mark it Deleting first", mesh)
	}
	if s.plaintext {
		// Only the known clusters are kept in plaintext mode.
		if err := s.known.PurgeMesh(ctx, mesh); err != nil {
			return fmt.Errorf("purge mesh %s: known clusters: %w", mesh, err)
		}
		return nil
	}
	if err := s.store.PurgeMesh(ctx, mesh); err != nil {
		return fmt.Errorf("purge mesh %s: enrollment state: %w", mesh, err)
	}
	if keepCA {
		s.authority.Forget(mesh)
		return nil
	}
	if err := s.authority.Destroy(ctx, mesh); err != nil {
		return fmt.Errorf("purge mesh %s: %w", mesh, err)
	}
	return nil
}

// expected lists the clusters a restarted hub waits for
// (ingest.StoreOptions.Expected): those that synced with the hub before
// (s.known, in every mode) and, with TLS, the enrolled ones; revoked ones
// never. The answer is kept for a few seconds (the store may be the API
// server, and /debug/spokes and metric scrapes ask too); a store that
// cannot be read expects none (logged).
func (s *security) expected(log *slog.Logger) func() []ingest.ClusterIdentity {
	const keep = 5 * time.Second
	var (
		mu   sync.Mutex
		at   time.Time
		last []ingest.ClusterIdentity
	)
	return func() []ingest.ClusterIdentity {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < keep {
			return last
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ids, err := s.known.KnownClusters(ctx)
		if err != nil {
			log.Error("known clusters unreadable; the hub waits for none of them", "err", err)
			return nil
		}
		revoked := map[ingest.ClusterIdentity]bool{}
		if !s.plaintext {
			clusters, err := s.store.Clusters(ctx)
			if err != nil {
				log.Error("enrolled clusters unreadable; the hub waits for none of them", "err", err)
				return nil
			}
			revocations, err := s.store.Revocations(ctx)
			if err != nil {
				log.Error("revocations unreadable; the hub waits for none of the enrolled clusters", "err", err)
				return nil
			}
			for _, r := range revocations {
				revoked[r.Identity()] = true
			}
			for _, c := range clusters {
				ids = append(ids, c.Identity())
			}
		}
		seen := map[ingest.ClusterIdentity]bool{}
		last = last[:0:0]
		for _, id := range ids {
			if !revoked[id] && !seen[id] {
				seen[id] = true
				last = append(last, id)
			}
		}
		at = time.Now()
		return last
	}
}

// remember records, in the background, a cluster that synced (s.known),
// so that a restarted hub waits for it (ingest.StoreOptions.Synced).
func (s *security) remember(log *slog.Logger) func(ingest.ClusterIdentity) {
	return func(id ingest.ClusterIdentity) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.known.RememberCluster(ctx, id.Mesh, id.Cluster); err != nil {
				log.Error("could not remember a synced cluster; a restarted hub may serve its mesh without waiting for it", "mesh", id.Mesh, "cluster", id.Cluster, "err", err)
			}
		}()
	}
}
