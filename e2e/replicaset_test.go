package e2e

// Harness: a set of hub replicas and the TCP proxy that stands for a load
// balancer in front of them.

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/e2e/load"
)

// tcpProxy is a loopback TCP proxy the test controls (load.Forwarder):
// each connection goes to the first of its backends that accepts, as a
// Service address in front of the hub replicas would send it. A spoke's
// hub.address takes one address, so a spoke reaches the replicas through
// one of these.
type tcpProxy struct{ *load.Forwarder }

func startProxy(t *testing.T, backends ...string) *tcpProxy {
	t.Helper()
	f, err := load.NewForwarder(backends...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return &tcpProxy{f}
}

func (p *tcpProxy) addr() string { return p.Addr() }

func (p *tcpProxy) port() int {
	_, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	return n
}

// replicaSet is n nave-hub replicas sharing one state dir (state.store dir
// on one machine; on Kubernetes, Secrets) and one gossip key.
type replicaSet struct {
	hubs   []*hub
	gossip []int
	relay  []int
	key    string
}

func newReplicaSet(t *testing.T, n int, extra ...string) *replicaSet {
	t.Helper()
	return newReplicaSetOn(t, make([]placement, n), false, extra...)
}

// placement is where one replica runs: in a network namespace or not, and
// the address its listeners bind ("" is 127.0.0.1).
type placement struct {
	ns   *harness.NetNS
	host string
}

// newReplicaSetOn starts one replica per placement; plaintext runs them
// with tls.plaintext (the relay is then plaintext too).
func newReplicaSetOn(t *testing.T, places []placement, plaintext bool, extra ...string) *replicaSet {
	t.Helper()
	rs := planReplicaSet(t, places, plaintext, extra...)
	for _, h := range rs.hubs {
		h.start() // one after the other: the first creates the CAs
	}
	return rs
}

// planReplicaSet is newReplicaSetOn without starting the replicas, so
// that a test can add flags of its own to each.
func planReplicaSet(t *testing.T, places []placement, plaintext bool, extra ...string) *replicaSet {
	t.Helper()
	rs := &replicaSet{key: filepath.Join(t.TempDir(), "gossip.key")}
	if err := os.WriteFile(rs.key, []byte(base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	var join []string
	hosts := []string{"127.0.0.1", "localhost"}
	for _, p := range places {
		rs.gossip = append(rs.gossip, harness.FreePort(t))
		rs.relay = append(rs.relay, harness.FreePort(t))
		host := p.host
		if host == "" {
			host = "127.0.0.1"
		} else {
			hosts = append(hosts, host)
		}
		join = append(join, net.JoinHostPort(host, strconv.Itoa(rs.gossip[len(rs.gossip)-1])))
	}
	for i, p := range places {
		h := &hub{t: t, admin: harness.FreePort(t), spokes: harness.FreePort(t), xds: harness.FreePort(t), state: state, ns: p.ns, host: p.host}
		if plaintext {
			h.state = ""
		}
		h.extraArgs = append([]string{"--replicas.id", fmt.Sprintf("hub-%d", i), "--replicas.join", strings.Join(join, ","),
			"--replicas.bind-address", h.at(0)[:strings.LastIndex(h.at(0), ":")], "--replicas.bind-port", strconv.Itoa(rs.gossip[i]),
			"--replicas.relay-listen", h.at(rs.relay[i]), "--replicas.keyring-file", rs.key, "--tls.hosts", strings.Join(hosts, ",")}, extra...)
		rs.hubs = append(rs.hubs, h)
	}
	return rs
}
