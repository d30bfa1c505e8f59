package server

import (
	"context"
	"net"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/hub/replica"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// recvStream is a grpc.ServerStream whose RecvMsg hands out reqs in turn.
type recvStream struct {
	grpc.ServerStream
	reqs []proto.Message
}

func (s *recvStream) Context() context.Context { return context.Background() }

func (s *recvStream) RecvMsg(m any) error {
	proto.Merge(m.(proto.Message), s.reqs[0])
	s.reqs = s.reqs[1:]
	return nil
}

// TestHomedStreamMarksTheConnection: the first request of an ADS stream
// (SotW or delta) marks its connection with the home its node names; an
// agent's name-table stream, a node naming no home and later requests
// mark nothing.
func TestHomedStreamMarksTheConnection(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := replica.Track(lis)
	defer l.Close()
	node := func(home string) *corev3.Node {
		n := &corev3.Node{Id: "sidecar~10.0.0.1~web-1.shop~shop.svc.cluster.local", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{}}}
		if home != "" {
			n.Metadata.Fields[xdsbootstrap.MetaHomeReplica] = structpb.NewStringValue(home)
		}
		return n
	}
	for name, tc := range map[string]struct {
		first, second proto.Message
		req           func() proto.Message
		want          string
	}{
		"sotw": {&discoveryv3.DiscoveryRequest{Node: node("hub-1"), TypeUrl: typeurl.Cluster}, &discoveryv3.DiscoveryRequest{Node: node("hub-2")},
			func() proto.Message { return &discoveryv3.DiscoveryRequest{} }, "hub-1"},
		"delta": {&discoveryv3.DeltaDiscoveryRequest{Node: node("hub-1"), TypeUrl: typeurl.Cluster}, &discoveryv3.DeltaDiscoveryRequest{Node: node("hub-2")},
			func() proto.Message { return &discoveryv3.DeltaDiscoveryRequest{} }, "hub-1"},
		"name table": {&discoveryv3.DiscoveryRequest{Node: node("hub-1"), TypeUrl: typeurl.NameTable}, &discoveryv3.DiscoveryRequest{Node: node("hub-2")},
			func() proto.Message { return &discoveryv3.DiscoveryRequest{} }, ""},
		"no home": {&discoveryv3.DiscoveryRequest{Node: node(""), TypeUrl: typeurl.Cluster}, &discoveryv3.DiscoveryRequest{Node: node("hub-2")},
			func() proto.Message { return &discoveryv3.DiscoveryRequest{} }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := l.Accept()
				if err == nil {
					accepted <- c
				}
			}()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			server := <-accepted
			defer server.Close()
			s := &homedStream{ServerStream: &recvStream{reqs: []proto.Message{tc.first, tc.second}}, proxies: l, remote: server.RemoteAddr().String()}
			for range 2 {
				if err := s.RecvMsg(tc.req()); err != nil {
					t.Fatal(err)
				}
			}
			homes := l.Homes()
			if tc.want == "" && (homes[""] != 1 || len(homes) != 1) || tc.want != "" && homes[tc.want] != 1 {
				t.Errorf("homes %v, want the connection homed on %q", homes, tc.want)
			}
		})
	}
}
