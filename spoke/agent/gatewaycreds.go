package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/retry"
	"github.com/navemesh/nave/shared/typeurl"
)

// GatewayCredentials gets the secrets Envoy names beyond the workload's
// own — a gateway's credentialName certificates — from the spoke of the
// pod's cluster, which reads them from the cluster's Secrets
// (spoke/gatewaycert, decision 038), and hands them to the SDS server. It
// keeps one SDS stream to the spoke, on the registration authority's
// connection and with the pod's service-account token, open while Envoy
// asks for such names: the spoke pushes a rotated Secret on it. The keys
// stay in the agent's memory, as the workload's. Safe for concurrent use;
// Run it once.
type GatewayCredentials struct {
	ra      *RAClient
	client  secretv3.SecretDiscoveryServiceClient
	sds     *SDS
	log     *slog.Logger
	backoff retry.Policy

	mu    sync.Mutex
	names []string
	wake  chan struct{} // capacity 1: the names changed
}

// NewGatewayCredentials serves sds the names its streams ask for beyond
// the workload's own, from the spoke behind ra.
func NewGatewayCredentials(ra *RAClient, sds *SDS, backoff retry.Policy, log *slog.Logger) *GatewayCredentials {
	g := &GatewayCredentials{ra: ra, client: secretv3.NewSecretDiscoveryServiceClient(ra.conn), sds: sds, log: log, backoff: backoff,
		wake: make(chan struct{}, 1)}
	sds.WantCredentials(g.want)
	return g
}

// want records the names Envoy asks for now.
func (g *GatewayCredentials) want(names []string) {
	g.mu.Lock()
	g.names = slices.Clone(names)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

func (g *GatewayCredentials) wanted() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.names
}

// Run keeps the stream to the spoke open while names are wanted, retrying
// with backoff, until ctx ends (nil).
func (g *GatewayCredentials) Run(ctx context.Context) error {
	b := g.backoff.New()
	for {
		if len(g.wanted()) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-g.wake:
				continue
			}
		}
		answered, err := g.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if answered {
			b = g.backoff.New()
		}
		if err == nil {
			continue // no names wanted any more
		}
		wait := b.NextBackOff()
		g.log.Warn("gateway credentials: the stream to the spoke ended; retrying", "error", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// stream runs one stream to the spoke: it asks for the wanted names, hands
// each answer to the SDS server and follows changes of the names. It
// returns nil when no name is wanted any more; answered says whether the
// spoke answered at all.
func (g *GatewayCredentials) stream(ctx context.Context) (answered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	actx, err := g.ra.authorized(ctx)
	if err != nil {
		return false, err
	}
	st, err := g.client.StreamSecrets(actx)
	if err != nil {
		return false, err
	}
	names := g.wanted()
	if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Secret, ResourceNames: names}); err != nil {
		return false, err
	}
	type result struct {
		resp *discoveryv3.DiscoveryResponse
		err  error
	}
	recv := make(chan result)
	go func() {
		for {
			resp, err := st.Recv()
			select {
			case recv <- result{resp, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var last *discoveryv3.DiscoveryResponse
	for {
		select {
		case <-ctx.Done():
			return answered, nil
		case <-g.wake:
			names = g.wanted()
			if len(names) == 0 {
				return answered, nil
			}
			req := &discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Secret, ResourceNames: names}
			if last != nil {
				req.VersionInfo, req.ResponseNonce = last.GetVersionInfo(), last.GetNonce()
			}
			if err := st.Send(req); err != nil {
				return answered, err
			}
		case r := <-recv:
			if r.err != nil {
				if status.Code(r.err) == codes.Canceled {
					return answered, nil
				}
				return answered, r.err
			}
			answered, last = true, r.resp
			secrets, err := credentialSecrets(r.resp)
			req := &discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Secret, ResourceNames: names, ResponseNonce: r.resp.GetNonce()}
			if err != nil {
				req.ErrorDetail = status.New(codes.InvalidArgument, err.Error()).Proto()
				g.log.Warn("gateway credentials: the spoke's answer is refused", "error", err)
			} else {
				req.VersionInfo = r.resp.GetVersionInfo()
				g.sds.SetCredentials(secrets)
				g.log.Info("gateway credentials received", "names", slices.Sorted(maps.Keys(secrets)), "version", r.resp.GetVersionInfo())
			}
			if err := st.Send(req); err != nil {
				return answered, err
			}
		}
	}
}

// credentialSecrets are an answer's secrets by name, each with the hash of
// its content as its version.
func credentialSecrets(resp *discoveryv3.DiscoveryResponse) (map[string]credentialSecret, error) {
	out := map[string]credentialSecret{}
	for _, a := range resp.GetResources() {
		sec := &tlsv3.Secret{}
		if err := a.UnmarshalTo(sec); err != nil {
			return nil, err
		}
		if sec.GetName() == "" || isWorkloadSecret(sec.GetName()) {
			return nil, errors.New("a secret without a name, or named as the workload's own")
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(a)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		out[sec.GetName()] = credentialSecret{secret: a, version: hex.EncodeToString(sum[:8])}
	}
	return out, nil
}
