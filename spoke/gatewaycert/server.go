package gatewaycert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/shared/grpcpeer"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/spoke/sdsstream"
)

// Options configure a Server; New copies them.
type Options struct {
	// Client reads Secrets (one watch per requested Secret) and reviews
	// access (SubjectAccessReviews); Dynamic reads ReferenceGrants.
	// Required.
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Authenticate names the workload calling: its namespace and
	// service account, from the call's service-account token (the
	// registration authority's ra.Server.Authenticate); its error is the
	// gRPC status returned to the caller. Required.
	Authenticate func(ctx context.Context) (namespace, serviceAccount string, err error)
	// Logger receives a line per refusal; nil discards them.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Now is the clock of the access reviews' cache; nil is time.Now.
	Now func() time.Time
}

// Server serves gateways' agents the credentialName secrets of their
// cluster (see the package documentation). Safe for concurrent use.
type Server struct {
	secretv3.UnimplementedSecretDiscoveryServiceServer

	opts    Options
	log     *slog.Logger
	metrics *metrics
	watches *watches
	reviews *accessReviewer

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every watched event
	streams  map[uint64]*stream
	nextID   uint64
	refusals map[Reason]uint64
}

// New returns a Server, or an error naming a missing option.
func New(opts Options) (*Server, error) {
	if opts.Client == nil || opts.Dynamic == nil {
		return nil, errors.New("gatewaycert: Kubernetes clients are required")
	}
	if opts.Authenticate == nil {
		return nil, errors.New("gatewaycert: an authenticator is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{opts: opts, log: opts.Logger, metrics: newMetrics(opts.Registerer), changed: make(chan struct{}),
		streams: map[uint64]*stream{}, refusals: make(map[Reason]uint64, len(Reasons)),
		reviews: &accessReviewer{cs: opts.Client, now: opts.Now, cache: map[string]review{}}}
	s.watches = newWatches(opts.Client, opts.Dynamic, opts.Logger, s.metrics, s.notify)
	return s, nil
}

// Register registers s on r.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	secretv3.RegisterSecretDiscoveryServiceServer(r, s)
}

// notify wakes every stream: something it may serve changed.
func (s *Server) notify() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

func (s *Server) changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// stream is one agent's stream: who it is and what it asked for.
type stream struct {
	namespace, serviceAccount, peer string

	mu    sync.Mutex // names' states, read by Status
	names map[string]*nameState
}

// nameState is one requested name: the Secret it reads and whether it is
// served, or why not.
type nameState struct {
	ref     Ref
	parsed  error
	watches []func() // releases the watches acquired for it
	served  string   // the served content's hash
	reason  Reason
	message string
}

// StreamSecrets serves one agent's stream: it authenticates the caller,
// then answers the names it asks for, and again whenever one of their
// Secrets (or ReferenceGrants) changes.
func (s *Server) StreamSecrets(ss secretv3.SecretDiscoveryService_StreamSecretsServer) error {
	ctx := ss.Context()
	ns, sa, err := s.opts.Authenticate(ctx)
	if err != nil {
		s.countRefusal(ReasonUnauthenticated)
		s.log.Warn("gateway credentials refused", "reason", string(ReasonUnauthenticated), "peer", grpcpeer.Addr(ctx), "error", status.Convert(err).Message())
		return err
	}
	st := &stream{namespace: ns, serviceAccount: sa, peer: grpcpeer.Addr(ctx), names: map[string]*nameState{}}
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.streams[id] = st
	s.mu.Unlock()
	s.metrics.streams.Inc()
	defer func() {
		s.metrics.streams.Dec()
		s.mu.Lock()
		delete(s.streams, id)
		s.mu.Unlock()
		for _, n := range st.names {
			for _, release := range n.watches {
				release()
			}
		}
	}()

	reqs, errc := sdsstream.Requests(ss)
	var (
		requested bool
		sent      string
		nonce     uint64
	)
	for {
		changed := s.changes()
		if requested {
			// Nothing is sent while a name's watches have not listed: a
			// first answer without it would drop the secret the agent
			// holds from before a reconnection.
			resp, version, pending := s.answer(ctx, st)
			if version != sent && !pending {
				nonce++
				resp.VersionInfo, resp.Nonce = version, strconv.FormatUint(nonce, 10)
				if err := ss.Send(resp); err != nil {
					return err
				}
				sent = version
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return sdsstream.Ended(err)
		case <-changed:
		case req := <-reqs:
			if err := sdsstream.Check(req); err != nil {
				return err
			}
			if e := req.GetErrorDetail(); e != nil {
				s.log.Warn("gateway agent rejected credentials", "identity", ns+"/"+sa, "version", req.GetVersionInfo(), "reason", e.GetMessage())
			}
			s.subscribe(st, req.GetResourceNames())
			requested = true
		}
	}
}

// subscribe makes names the stream's: it starts the watches of the new
// ones and releases those of the names no longer asked for.
func (s *Server) subscribe(st *stream, names []string) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for n, ns := range st.names {
		if !want[n] {
			for _, release := range ns.watches {
				release()
			}
			delete(st.names, n)
		}
	}
	for n := range want {
		if st.names[n] != nil {
			continue
		}
		ref, err := ParseName(n, st.namespace)
		state := &nameState{ref: ref, parsed: err}
		if err == nil {
			keys := []string{ref.Key()}
			if ref.CAOnly {
				keys = append(keys, ref.caFallback())
			}
			for _, k := range keys {
				s.watches.acquireSecret(k)
				state.watches = append(state.watches, func() { s.watches.releaseSecret(k) })
			}
			if ref.GatewayAPI && ref.Namespace != st.namespace {
				s.watches.acquireGrants(ref.Namespace)
				state.watches = append(state.watches, func() { s.watches.releaseGrants(ref.Namespace) })
			}
		}
		st.names[n] = state
	}
}

// answer is the stream's response now (without version and nonce), its
// version (a hash of what it holds), and whether a name is still pending
// (its watches have not listed); each name's state is updated, and a new
// refusal logged and counted.
func (s *Server) answer(ctx context.Context, st *stream) (*discoveryv3.DiscoveryResponse, string, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	names := make([]string, 0, len(st.names))
	for n := range st.names {
		names = append(names, n)
	}
	slices.Sort(names)
	resp := &discoveryv3.DiscoveryResponse{TypeUrl: typeurl.Secret}
	h := sha256.New()
	pending := false
	for _, n := range names {
		state := st.names[n]
		sec, reason, msg := s.resolve(ctx, st, state)
		pending = pending || (sec == nil && reason == "")
		if reason != "" && (reason != state.reason || msg != state.message) {
			s.countRefusal(reason)
			s.log.Warn("gateway credential refused", "name", n, "secret", state.ref.Key(), "identity", st.namespace+"/"+st.serviceAccount,
				"peer", st.peer, "reason", string(reason), "error", msg)
		}
		state.reason, state.message, state.served = reason, msg, ""
		if sec == nil {
			continue
		}
		a, err := anypb.New(sec)
		if err != nil {
			continue // not reached: a Secret always marshals
		}
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
		sum := sha256.Sum256(b)
		state.served = hex.EncodeToString(sum[:8])
		h.Write([]byte(n))
		h.Write(sum[:])
		resp.Resources = append(resp.Resources, a)
	}
	return resp, hex.EncodeToString(h.Sum(nil)[:12]), pending
}

// resolve is one name's secret now, or why it is not served; both nil and
// "" while its watches have not listed yet.
func (s *Server) resolve(ctx context.Context, st *stream, state *nameState) (*tlsv3.Secret, Reason, string) {
	if state.parsed != nil {
		return nil, ReasonBadName, state.parsed.Error()
	}
	ref := state.ref
	own := ref.Namespace == st.namespace
	if !own {
		if !ref.GatewayAPI {
			return nil, ReasonUnauthorized, fmt.Sprintf("%q names a Secret of namespace %s, not the gateway's (%s): only kubernetes-gateway://%s/%s with a ReferenceGrant in %s reads across namespaces",
				ref.Resource, ref.Namespace, st.namespace, ref.Namespace, ref.Name, ref.Namespace)
		}
	}
	// A private key needs Istio's check: the gateway's service account
	// may list Secrets in its own namespace. A CA bundle is public.
	if !ref.CAOnly {
		ok, why, err := s.reviews.mayReadSecrets(ctx, st.namespace, st.serviceAccount)
		if err != nil {
			return nil, ReasonAPIError, err.Error()
		}
		if !ok {
			return nil, ReasonUnauthorized, why
		}
	}
	granted := func(name string) (Reason, string, bool) {
		if own {
			return "", "", true
		}
		ok, synced, err := s.watches.grantAllows(ref.Namespace, st.namespace, name)
		switch {
		case err != nil:
			return ReasonNoReferenceGrant, fmt.Sprintf("the ReferenceGrants of namespace %s cannot be read: %v", ref.Namespace, err), false
		case !synced:
			return "", "", false
		case !ok:
			return ReasonNoReferenceGrant, fmt.Sprintf("no ReferenceGrant in namespace %s allows Gateways of namespace %s to read Secret %s", ref.Namespace, st.namespace, name), false
		}
		return "", "", true
	}
	if r, msg, ok := granted(ref.Name); !ok {
		return nil, r, msg
	}
	sec, synced, err := s.watches.secret(ref.Key())
	switch {
	case err != nil:
		return nil, ReasonAPIError, fmt.Sprintf("cannot watch Secret %s: %v", ref.Key(), err)
	case !synced:
		return nil, "", ""
	}
	if ref.CAOnly {
		key := ref.Key()
		if sec == nil {
			// Istio's convention: NAME-cacert, else NAME's CA keys.
			key = ref.caFallback()
			_, name := splitKey(key)
			if r, msg, ok := granted(name); !ok {
				return nil, r, msg
			}
			if sec, synced, err = s.watches.secret(key); err != nil {
				return nil, ReasonAPIError, fmt.Sprintf("cannot watch Secret %s: %v", key, err)
			} else if !synced {
				return nil, "", ""
			}
		}
		if sec == nil {
			return nil, ReasonNotFound, fmt.Sprintf("neither Secret %s nor %s exists", ref.Key(), key)
		}
		out, err := caSecret(ref.Resource, sec.Data)
		if err != nil {
			return nil, ReasonWrongShape, fmt.Sprintf("Secret %s: %v", key, err)
		}
		return out, "", ""
	}
	if sec == nil {
		return nil, ReasonNotFound, fmt.Sprintf("Secret %s does not exist", ref.Key())
	}
	out, err := certificateSecret(ref.Resource, sec.Data)
	if err != nil {
		return nil, ReasonWrongShape, fmt.Sprintf("Secret %s: %v", ref.Key(), err)
	}
	return out, "", ""
}

func (s *Server) countRefusal(r Reason) {
	s.mu.Lock()
	s.refusals[r]++
	s.mu.Unlock()
	s.metrics.refusals.WithLabelValues(string(r)).Inc()
}

// Status is what /debug/gateway-credentials shows: each open stream's
// names, served or why not (never a secret's content), and the refusals
// by reason since the start. A plain value, the caller's own.
type Status struct {
	Streams  []StreamStatus    `json:"streams"`
	Refusals map[Reason]uint64 `json:"refusals"`
}

// StreamStatus is one agent's stream (a plain value).
type StreamStatus struct {
	Identity string       `json:"identity"` // namespace/serviceAccount
	Peer     string       `json:"peer"`
	Names    []NameStatus `json:"names"`
}

// NameStatus is one requested name (a plain value).
type NameStatus struct {
	Name    string `json:"name"`
	Secret  string `json:"secret,omitempty"` // namespace/name
	Served  bool   `json:"served"`
	Version string `json:"version,omitempty"` // a hash of the served content
	Reason  Reason `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Status returns the open streams and the refusal counts.
func (s *Server) Status() Status {
	s.mu.Lock()
	streams := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		streams = append(streams, st)
	}
	out := Status{Streams: []StreamStatus{}, Refusals: make(map[Reason]uint64, len(Reasons))}
	for _, r := range Reasons {
		out.Refusals[r] = s.refusals[r]
	}
	s.mu.Unlock()
	for _, st := range streams {
		v := StreamStatus{Identity: st.namespace + "/" + st.serviceAccount, Peer: st.peer, Names: []NameStatus{}}
		st.mu.Lock()
		for n, state := range st.names {
			ns := NameStatus{Name: n, Served: state.served != "", Version: state.served, Reason: state.reason, Message: state.message}
			if state.parsed == nil {
				ns.Secret = state.ref.Key()
			}
			v.Names = append(v.Names, ns)
		}
		st.mu.Unlock()
		slices.SortFunc(v.Names, func(a, b NameStatus) int { return strings.Compare(a.Name, b.Name) })
		out.Streams = append(out.Streams, v)
	}
	slices.SortFunc(out.Streams, func(a, b StreamStatus) int { return strings.Compare(a.Identity+a.Peer, b.Identity+b.Peer) })
	return out
}
