package typeurl

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
)

func TestConstantsNameTheirMessages(t *testing.T) {
	for want, m := range map[string]proto.Message{
		Listener: &listenerv3.Listener{}, Route: &routev3.RouteConfiguration{}, Cluster: &clusterv3.Cluster{},
		Endpoint: &endpointv3.ClusterLoadAssignment{}, Secret: &tlsv3.Secret{},
	} {
		if got := Of(m); got != want {
			t.Errorf("Of(%T) = %q, want %q", m, got, want)
		}
	}
}

func TestShort(t *testing.T) {
	for in, want := range map[string]string{Cluster: "Cluster", Endpoint: "ClusterLoadAssignment", "plain": "plain", "": ""} {
		if got := Short(in); got != want {
			t.Errorf("Short(%q) = %q, want %q", in, got, want)
		}
	}
}
