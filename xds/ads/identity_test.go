package ads_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// identityKey carries, in these tests only, the identity a certificate
// would prove ("mesh/namespace/sa"); the hub's real Authenticator reads the
// TLS client certificate (tested end to end in e2e).
const identityKey = "x-test-identity"

func metadataAuthenticator() ads.Authenticator {
	return ads.AuthenticatorFunc(func(ctx context.Context) (ads.WorkloadIdentity, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md.Get(identityKey)
		if len(v) != 1 {
			return ads.WorkloadIdentity{}, errors.New("no client certificate")
		}
		p := strings.Split(v[0], "/")
		return ads.WorkloadIdentity{Mesh: p[0], Namespace: p[1], ServiceAccount: p[2], Name: v[0]}, nil
	})
}

// withIdentity dials so that every stream carries id.
func withIdentity(id string) grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if id != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, identityKey, id)
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
}

func workloadNode(id, meshName, namespace, sa string) *corev3.Node {
	n := node(id, meshName)
	if n.Metadata == nil {
		n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	if namespace != "" {
		n.Metadata.Fields["NAMESPACE"] = structpb.NewStringValue(namespace)
	}
	if sa != "" {
		n.Metadata.Fields["SERVICE_ACCOUNT"] = structpb.NewStringValue(sa)
	}
	return n
}

// With an Authenticator, a proxy's mesh is its identity's: a node that names
// no mesh gets its identity's mesh (not the default), and a node that names
// another mesh, namespace or service account is refused with a reason.
func TestProxyIdentityDecidesItsMesh(t *testing.T) {
	f := newFixture(t, nil, func(o *ads.Options) { o.Authenticator = metadataAuthenticator() })
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	f.set(t, "m2", synced("c1", pushctxtest.Decode(t, otherYAML)))

	// Proven m2, names nothing: gets m2, though the default mesh is m.
	p := f.connect(t, workloadNode("proxy-1", "", "", ""), withIdentity("m2/shop/other"))
	p.Subscribe(typeurl.Cluster)
	if got, want := adstest.Names(t, p.Next(typeurl.Cluster)), []string{"outbound|8080||other.shop.svc.cluster.local"}; !slices.Equal(got, want) {
		t.Errorf("clusters = %v, want %v (mesh m2's)", got, want)
	}

	for _, tc := range []struct {
		name, identity string
		node           *corev3.Node
		code           codes.Code
		says           string
	}{
		{"no credentials", "", workloadNode("proxy-2", "m", "", ""), codes.Unauthenticated, "no client certificate"},
		{"another mesh", "m2/shop/other", workloadNode("proxy-3", "m", "", ""), codes.PermissionDenied, `names mesh "m", but its certificate (m2/shop/other) is of mesh "m2"`},
		{"another namespace", "m/shop/other", workloadNode("proxy-4", "", "bank", ""), codes.PermissionDenied, `names namespace "bank"`},
		{"another service account", "m/shop/other", workloadNode("proxy-5", "", "shop", "admin"), codes.PermissionDenied, `names service account "admin"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := f.connect(t, tc.node, withIdentity(tc.identity))
			p.Subscribe(typeurl.Cluster)
			err := p.Ended()
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("stream ended with %v; want %s saying %q", err, tc.code, tc.says)
			}
		})
	}
	if got := f.metric(t, "nave_xds_auth_refusals_total"); got != 4 {
		t.Errorf("nave_xds_auth_refusals_total = %v, want 4", got)
	}
}
