package policy_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/xds/gen/gentest"
)

// TestInboundMTLS walks connections through the virtual inbound listener
// for each PeerAuthentication mode: which chain takes them, whether TLS
// is terminated and with which peer, and what is refused.
func TestInboundMTLS(t *testing.T) {
	type conn struct {
		req    envoysim.Request
		chain  string
		tls    bool   // TLS terminated, peer = req.PeerCert
		denied string // substring of Result.Denied; "" = passes
	}
	appTLS := func(r envoysim.Request) envoysim.Request { r.TLS = true; return r }
	noCert := func(r envoysim.Request) envoysim.Request { r.TLS, r.ALPN = true, []string{"istio"}; return r }
	for _, tc := range []struct {
		name   string
		config string
		conns  []conn
	}{
		{"no policy: PERMISSIVE", "", []conn{
			{req: inHTTP("GET", "/"), chain: "inbound|80||"},
			{req: mtls(inHTTP("GET", "/"), sleepBar), chain: "inbound|80||mtls", tls: true},
			{req: appTLS(inTCP(80, "10.1.1.1")), chain: "inbound|80||tls"},
			{req: noCert(inHTTP("GET", "/")), chain: "inbound|80||mtls", denied: "requires a client certificate"},
			{req: mtls(inHTTP("GET", "/"), foreign), chain: "inbound|80||mtls", denied: "matches no accepted subject alt name"},
			{req: inTCP(9000, "10.1.1.1"), chain: "inbound|9000||"},
			{req: mtls(inTCP(9000, "10.1.1.1"), sleepBar), chain: "inbound|9000||mtls", tls: true},
			{req: inTCP(7777, "10.1.1.1"), chain: "default"},
			{req: mtls(inTCP(7777, "10.1.1.1"), sleepBar), chain: "InboundPassthroughFilterChainMTLS", tls: true},
			{req: appTLS(inTCP(7777, "10.1.1.1")), chain: "default"},
		}},
		{"mesh-wide STRICT", meshPA("STRICT"), []conn{
			{req: inHTTP("GET", "/"), chain: "inbound|80||", denied: "plain text"},
			{req: mtls(inHTTP("GET", "/"), sleepBar), chain: "inbound|80||", tls: true},
			{req: inTCP(9000, "10.1.1.1"), chain: "inbound|9000||", denied: "plain text"},
			{req: inTCP(7777, "10.1.1.1"), chain: "default", denied: "plain text"},
			{req: mtls(inTCP(7777, "10.1.1.1"), sleepBar), chain: "default", tls: true},
		}},
		{"namespace DISABLE over mesh STRICT", meshPA("STRICT") + gentest.PeerAuthentication("foo", "DISABLE"), []conn{
			{req: inHTTP("GET", "/"), chain: "inbound|80||"},
			{req: mtls(inTCP(9000, "10.1.1.1"), sleepBar), chain: "inbound|9000||"},
			{req: inTCP(7777, "10.1.1.1"), chain: "default"},
		}},
		{"workload STRICT with port 9000 PERMISSIVE", `
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: httpbin, namespace: foo}
spec:
  selector: {matchLabels: {app: httpbin}}
  mtls: {mode: STRICT}
  portLevelMtls: {9000: {mode: PERMISSIVE}}
`, []conn{
			{req: inHTTP("GET", "/"), chain: "inbound|80||", denied: "plain text"},
			{req: inTCP(9000, "10.1.1.1"), chain: "inbound|9000||"},
			{req: mtls(inTCP(9000, "10.1.1.1"), sleepBar), chain: "inbound|9000||mtls", tls: true},
			{req: inTCP(7777, "10.1.1.1"), chain: "default", denied: "plain text"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := secOut(t, gentest.Decode(t, gentest.SecurityMesh+tc.config))
			for _, c := range tc.conns {
				r := s.Do(c.req)
				desc := c.req.Path + " port " + strconv.Itoa(int(c.req.Port)) + " peer " + c.req.PeerCert
				if r.Err != nil {
					t.Errorf("%s: %v", desc, r.Err)
					continue
				}
				if r.Chain != c.chain {
					t.Errorf("%s: chain %s, want %s", desc, r.Chain, c.chain)
				}
				if c.denied == "" && r.Denied != "" || !strings.Contains(r.Denied, c.denied) {
					t.Errorf("%s: denied %q, want %q", desc, r.Denied, c.denied)
				}
				if c.denied == "" && (r.TLSTerminated != c.tls || (c.tls && r.Peer != c.req.PeerCert)) {
					t.Errorf("%s: TLS terminated %v peer %q, want %v", desc, r.TLSTerminated, r.Peer, c.tls)
				}
			}
		})
	}
}

func meshPA(mode string) string { return gentest.PeerAuthentication("istio-system", mode) }
