package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/spoke/sdsstream"
)

// SDS serves the workload's secrets to Envoy (state-of-the-world
// SecretDiscoveryService.StreamSecrets and FetchSecrets, as Istio's agent
// does): "default", the workload certificate and key, and "ROOTCA", the
// mesh roots; and any other name Envoy asks for (a gateway's
// credentialName) as its Credentials get it from the spoke. Update pushes
// a new credential to every open stream, SetCredentials new
// credentialName secrets. Safe for concurrent use.
type SDS struct {
	secretv3.UnimplementedSecretDiscoveryServiceServer
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	cred    *Credential
	secrets map[string]*anypb.Any
	creds   map[string]credentialSecret // credentialName secrets, by name
	changed chan struct{}               // closed and replaced by Update and SetCredentials
	// streams' requested names, and who wants the union of those that
	// are not the workload's own (the Credentials).
	streams map[uint64][]string
	nextID  uint64
	wanted  []string
	want    func(names []string)
}

// credentialSecret is a credentialName secret and its version (a hash of
// its content).
type credentialSecret struct {
	secret  *anypb.Any
	version string
}

// NewSDS returns an SDS server with no credential yet: streams wait for
// the first Update.
func NewSDS(log *slog.Logger, m *metrics) *SDS {
	if m == nil {
		m = newMetrics(nil)
	}
	return &SDS{log: log, metrics: m, changed: make(chan struct{}), streams: map[uint64][]string{}}
}

// Update makes cred the served credential and pushes it to open streams.
// It never fails; it has Keeper.Publish's signature.
func (s *SDS) Update(cred *Credential) error {
	secrets := secretsOf(cred)
	s.mu.Lock()
	s.cred, s.secrets = cred, secrets
	s.changedLocked()
	s.mu.Unlock()
	return nil
}

// SetCredentials makes secrets the served credentialName secrets (by
// name, with their versions) and pushes them to the streams asking.
func (s *SDS) SetCredentials(secrets map[string]credentialSecret) {
	s.mu.Lock()
	s.creds = secrets
	s.changedLocked()
	s.mu.Unlock()
}

// WantCredentials has want called with the names the open streams ask
// for beyond the workload's own, each time they change (and now).
func (s *SDS) WantCredentials(want func(names []string)) {
	s.mu.Lock()
	s.want = want
	names := s.wanted
	s.mu.Unlock()
	want(names)
}

func (s *SDS) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// subscribe records a stream's names (nil: the stream ended) and tells
// the Credentials when the union of credential names changed.
func (s *SDS) subscribe(id uint64, names []string) {
	s.mu.Lock()
	if names == nil {
		delete(s.streams, id)
	} else {
		s.streams[id] = names
	}
	var union []string
	for _, ns := range s.streams {
		for _, n := range ns {
			if !isWorkloadSecret(n) {
				union = append(union, n)
			}
		}
	}
	slices.Sort(union)
	union = slices.Compact(union)
	changed := !slices.Equal(union, s.wanted)
	s.wanted = union
	want := s.want
	s.mu.Unlock()
	if changed && want != nil {
		want(union)
	}
}

func isWorkloadSecret(name string) bool {
	return name == xdsbootstrap.WorkloadCertSecret || name == xdsbootstrap.RootCASecret
}

// current returns the secrets of names that exist, their version, and a
// channel closed on the next change. The version is the workload
// credential's serial when names asks for one of its secrets, then each
// credentialName secret's version; "" when none exists.
func (s *SDS) current(names []string) ([]*anypb.Any, string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(names) == 0 {
		for n := range s.secrets {
			names = append(names, n)
		}
	}
	names = slices.Clone(names)
	slices.Sort(names)
	var (
		out      []*anypb.Any
		versions []string
		workload bool
	)
	for _, n := range slices.Compact(names) {
		if a, ok := s.secrets[n]; ok {
			out, workload = append(out, a), true
		} else if c, ok := s.creds[n]; ok {
			out, versions = append(out, c.secret), append(versions, c.version)
		}
	}
	if workload {
		versions = append([]string{s.cred.Serial()}, versions...)
	}
	return out, strings.Join(versions, ","), s.changed
}

// secretsOf are cred's secrets by name.
func secretsOf(cred *Credential) map[string]*anypb.Any {
	inline := func(b []byte) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
	}
	out := map[string]*anypb.Any{}
	for _, sec := range []*tlsv3.Secret{
		{Name: xdsbootstrap.WorkloadCertSecret, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: inline(cred.ChainPEM), PrivateKey: inline(cred.KeyPEM)}}},
		{Name: xdsbootstrap.RootCASecret, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: inline(cred.RootsPEM)}}},
	} {
		a, err := anypb.New(sec)
		if err != nil {
			panic(err) // not reached: a Secret always marshals
		}
		out[sec.GetName()] = a
	}
	return out
}

// Serve serves SDS on the Unix socket path (replacing a stale one, mode
// 0600) until ctx ends.
func (s *SDS) Serve(ctx context.Context, path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sds socket: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("sds socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("sds socket: %w", err)
	}
	srv := grpc.NewServer()
	secretv3.RegisterSecretDiscoveryServiceServer(srv, s)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	s.log.Info("sds serving", "socket", path)
	select {
	case err := <-done:
		return fmt.Errorf("sds socket %s: %w", path, err)
	case <-ctx.Done():
	}
	srv.Stop()
	<-done
	return nil
}

// FetchSecrets answers one request with the named secrets.
func (s *SDS) FetchSecrets(_ context.Context, req *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryResponse, error) {
	secrets, version, _ := s.current(req.GetResourceNames())
	if version == "" {
		return nil, status.Error(codes.Unavailable, "no workload certificate yet")
	}
	return &discoveryv3.DiscoveryResponse{VersionInfo: version, TypeUrl: typeurl.Secret, Resources: secrets}, nil
}

// StreamSecrets serves one Envoy SDS stream: it answers each change of the
// requested names and pushes every new credential; ACKs and NACKs are
// logged.
func (s *SDS) StreamSecrets(stream secretv3.SecretDiscoveryService_StreamSecretsServer) error {
	s.metrics.sdsStreams.Inc()
	defer s.metrics.sdsStreams.Dec()
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.mu.Unlock()
	defer s.subscribe(id, nil)
	reqs, errc := sdsstream.Requests(stream)
	var (
		names     []string
		requested bool
		sent      bool
		sentVer   string
		nonce     uint64
	)
	for {
		secrets, version, changed := s.current(names)
		if requested && version != sentVer && (version != "" || sent) {
			nonce++
			resp := &discoveryv3.DiscoveryResponse{VersionInfo: version, TypeUrl: typeurl.Secret, Nonce: strconv.FormatUint(nonce, 10), Resources: secrets}
			if err := stream.Send(resp); err != nil {
				return err
			}
			s.metrics.sdsPushes.Inc()
			sent, sentVer = true, version
			s.log.Debug("sds pushed", "version", version, "names", names)
		}
		select {
		case <-stream.Context().Done():
			return nil
		case err := <-errc:
			return sdsstream.Ended(err)
		case <-changed:
		case req := <-reqs:
			if err := sdsstream.Check(req); err != nil {
				return err
			}
			if e := req.GetErrorDetail(); e != nil {
				s.log.Warn("envoy rejected secrets", "version", req.GetVersionInfo(), "reason", e.GetMessage())
			}
			want := slices.Sorted(slices.Values(req.GetResourceNames()))
			if !requested || !slices.Equal(want, names) {
				requested, names, sentVer, sent = true, want, "", false
				s.subscribe(id, append([]string{}, want...))
			}
		}
	}
}
