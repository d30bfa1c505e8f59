// Package adstest drives the hub's ADS server as a proxy would, for tests
// of the server and of what composes it: a raw state-of-the-world stream
// whose requests, ACKs and NACKs the test writes. Imported only by tests.
package adstest

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// waitFor bounds every wait; a passing test never waits for it.
const waitFor = 10 * time.Second

// Proxy is a raw state-of-the-world ADS client stream driven by a test.
// It belongs to the test's goroutine; a reader goroutine (Connect) only
// feeds Responses.
type Proxy struct {
	t         testing.TB
	Stream    discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel    context.CancelFunc
	node      *corev3.Node
	sent      bool
	Responses chan *discoveryv3.DiscoveryResponse
	done      chan struct{} // closed when the stream ended; err is set then
	err       error
}

// Connect opens an ADS stream for n on conn. A reader
// goroutine collects responses until the stream ends or the test is
// cleaned up.
func Connect(t testing.TB, conn *grpc.ClientConn, n *corev3.Node) *Proxy {
	t.Helper()
	p := Open(t, conn, n)
	t.Cleanup(func() {
		p.cancel()
		<-p.done
	})
	go func() {
		defer close(p.done)
		for {
			r, err := p.Stream.Recv()
			if err != nil {
				p.err = err
				return
			}
			select {
			case p.Responses <- r:
			case <-p.Stream.Context().Done():
				p.err = p.Stream.Context().Err()
				return
			}
		}
	}()
	return p
}

// Open opens an ADS stream for n on conn without reading from it.
func Open(t testing.TB, conn *grpc.ClientConn, n *corev3.Node) *Proxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatalf("open ADS stream: %v", err)
	}
	p := &Proxy{t: t, Stream: stream, cancel: cancel, node: n, Responses: make(chan *discoveryv3.DiscoveryResponse, 64), done: make(chan struct{})}
	t.Cleanup(cancel)
	return p
}

// Send sends req, adding the node to the stream's first request.
func (p *Proxy) Send(req *discoveryv3.DiscoveryRequest) {
	p.t.Helper()
	if !p.sent {
		req.Node = p.node
		p.sent = true
	}
	if err := p.Stream.Send(req); err != nil {
		p.t.Fatalf("send %s request: %v", req.GetTypeUrl(), err)
	}
}

// Subscribe requests names of typeURL (the first request for a type).
func (p *Proxy) Subscribe(typeURL string, names ...string) {
	p.t.Helper()
	p.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
}

// ACK ACKs resp, keeping the subscription to names.
func (p *Proxy) ACK(resp *discoveryv3.DiscoveryResponse, names ...string) {
	p.t.Helper()
	p.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: names,
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
}

// NACK rejects resp with reason, keeping the subscription to names and the
// version it last accepted.
func (p *Proxy) NACK(resp *discoveryv3.DiscoveryResponse, accepted, reason string, names ...string) {
	p.t.Helper()
	p.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: names,
		VersionInfo: accepted, ResponseNonce: resp.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: reason}})
}

// Next returns the Next response, which must be of typeURL.
func (p *Proxy) Next(typeURL string) *discoveryv3.DiscoveryResponse {
	p.t.Helper()
	select {
	case r := <-p.Responses:
		if r.GetTypeUrl() != typeURL {
			p.t.Fatalf("got a %s response (version %s), want %s", r.GetTypeUrl(), r.GetVersionInfo(), typeURL)
		}
		return r
	case <-p.done:
		p.t.Fatalf("stream ended while waiting for %s: %v", typeURL, p.err)
	case <-time.After(waitFor):
		p.t.Fatalf("no %s response", typeURL)
	}
	return nil
}

// Quiet fails if a response arrives within d.
func (p *Proxy) Quiet(d time.Duration, why string) {
	p.t.Helper()
	select {
	case r := <-p.Responses:
		p.t.Fatalf("%s: got a %s response (version %s, %d resources)", why, r.GetTypeUrl(), r.GetVersionInfo(), len(r.GetResources()))
	case <-p.done:
		p.t.Fatalf("%s: stream ended: %v", why, p.err)
	case <-time.After(d):
	}
}

// Ended waits for the stream to end and returns its error.
func (p *Proxy) Ended() error {
	p.t.Helper()
	select {
	case <-p.done:
		if status.Code(p.err) == codes.Canceled {
			p.t.Fatal("stream was ended by the test, not the server")
		}
		return p.err
	case <-time.After(waitFor):
		p.t.Fatal("stream did not end")
	}
	return nil
}

// Node is the node the stream's first request carries.
func (p *Proxy) Node() *corev3.Node { return p.node }

// Names lists the resource names of resp, in order, failing the test on a
// resource without a name.
func Names(t testing.TB, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range resp.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("resource of %s: %v", resp.GetTypeUrl(), err)
		}
		n, ok := m.(interface{ GetName() string })
		if !ok {
			n2, ok := m.(interface{ GetClusterName() string })
			if !ok {
				t.Fatalf("resource %T has no name", m)
			}
			out = append(out, n2.GetClusterName())
			continue
		}
		out = append(out, n.GetName())
	}
	return out
}
