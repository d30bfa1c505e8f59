package replica_test

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/replica"
	"github.com/navemesh/nave/internal/testwait"
)

func keyring(t *testing.T, b byte) *memberlist.Keyring {
	t.Helper()
	key := base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune('a'+b)), 32)))
	kr, err := replica.ParseKeyring([]byte("# test key\n"+key+"\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func fast(c *memberlist.Config) {
	c.ProbeInterval, c.ProbeTimeout = 100*time.Millisecond, 50*time.Millisecond
	c.GossipInterval, c.SuspicionMult = 20*time.Millisecond, 2
	c.PushPullInterval = time.Second
	c.TCPTimeout = time.Second
}

type member struct {
	m    *replica.Membership
	stop chan struct{}
	held []ingest.Holding
	log  *memberLog
}

// memberLog counts a member's log lines that contain a string.
type memberLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *memberLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *memberLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func join(t *testing.T, id string, kr *memberlist.Keyring, seeds ...string) *member {
	t.Helper()
	mb := &member{stop: make(chan struct{}), log: &memberLog{}}
	m, err := replica.Join(replica.Options{ID: id, BindAddress: "127.0.0.1", Join: seeds, Keyring: kr, Logger: slog.New(slog.NewTextHandler(mb.log, nil)),
		RejoinInterval: time.Hour, QuorumWindow: time.Minute, ReadyTimeout: time.Minute, Tune: fast,
		RelayAddress: "127.0.0.1:1", In: fakeIngest{holdings: func() []ingest.Holding { return mb.held }}}, mb.stop)
	if err != nil {
		t.Fatal(err)
	}
	mb.m = m
	t.Cleanup(mb.leave)
	return mb
}

func (mb *member) leave() {
	select {
	case <-mb.stop:
	default:
		close(mb.stop)
	}
}

func (mb *member) gossip() string {
	for _, m := range mb.m.Members() {
		if m.Self {
			return m.Gossip
		}
	}
	return ""
}

func (mb *member) ids() string {
	var out []string
	for _, m := range mb.m.Members() {
		out = append(out, m.ID)
	}
	return strings.Join(out, ",")
}

// TestMembershipKeyringLeaderAndQuorum: replicas with the key form one
// set and a member without it cannot join; the leader is the lowest live
// id; withdrawal is the owner's while it lives, else the leader's, and no
// one's without a majority.
func TestMembershipKeyringLeaderAndQuorum(t *testing.T) {
	kr := keyring(t, 0)
	a := join(t, "a", kr)
	b := join(t, "b", kr, a.gossip())
	c := join(t, "c", kr, a.gossip())
	for _, mb := range []*member{a, b, c} {
		testwait.For(t, waitFor, func() error {
			if got := mb.ids(); got != "a,b,c" && !strings.HasSuffix(got, ",a,b,c") && len(strings.Split(got, ",")) != 3 {
				return fmt.Errorf("members %s", got)
			}
			return nil
		})
	}
	refused := a.log.count("memberlist: failed to receive")
	// Both are stopped when the test ends: left running, they would go on
	// dialling addresses a later test's members may bind.
	intruderStop, clearStop := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(intruderStop); close(clearStop) })
	if _, err := replica.Join(replica.Options{ID: "intruder", BindAddress: "127.0.0.1", Join: []string{a.gossip()}, Keyring: keyring(t, 1),
		Tune: fast, RejoinInterval: time.Hour, In: fakeIngest{}}, intruderStop); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.Join(replica.Options{ID: "clear", BindAddress: "127.0.0.1", Join: []string{a.gossip()}, Insecure: true,
		Tune: fast, RejoinInterval: time.Hour, In: fakeIngest{}}, clearStop); err != nil {
		t.Fatal(err)
	}
	// a refused both: each Join's push-pull with a failed on a's side.
	testwait.Until(t, "a refused the two members without the key", func() bool {
		return a.log.count("memberlist: failed to receive") >= refused+2
	})
	if got := len(a.m.Members()); got != 3 {
		t.Errorf("members without the key joined: %s", a.ids())
	}
	if l := b.m.Leader(); l != "a" {
		t.Errorf("leader %s, want a", l)
	}
	x := ingest.ClusterIdentity{Mesh: "default", Cluster: "x"}
	if b.m.MayWithdraw(x, "a") || c.m.MayWithdraw(x, "a") {
		t.Error("a peer may withdraw a cluster whose owner is alive")
	}
	if !a.m.MayWithdraw(x, "a") {
		t.Error("the live owner may not withdraw its own cluster")
	}
	a.leave()
	testwait.For(t, waitFor, func() error {
		if b.m.IsAlive("a") {
			return fmt.Errorf("b still sees a alive")
		}
		return nil
	})
	if !b.m.MayWithdraw(x, "a") || c.m.MayWithdraw(x, "a") {
		t.Error("with a gone, b (the leader) and only b may withdraw a's cluster")
	}
	b.leave()
	testwait.For(t, waitFor, func() error {
		if c.m.IsAlive("b") {
			return fmt.Errorf("c still sees b alive")
		}
		return nil
	})
	if ok, alive, known := c.m.Quorum(); ok || alive != 1 || known != 3 {
		t.Errorf("alone of 3, c reports quorum %v (%d alive of %d)", ok, alive, known)
	}
	if c.m.MayWithdraw(x, "a") || c.m.MayWithdraw(x, "c") {
		t.Error("c, cut off from most of the set, may withdraw")
	}
}

// TestReadyWaitsForPeersClusters: a replica that joins is ready only once
// it holds every cluster its peers hold, at their epoch or a newer one.
func TestReadyWaitsForPeersClusters(t *testing.T) {
	kr := keyring(t, 0)
	x := ingest.ClusterIdentity{Mesh: "default", Cluster: "x"}
	epoch := ingest.Epoch{At: 100, Replica: "a"}
	a := join(t, "a", kr)
	a.held = []ingest.Holding{{State: ingest.State{ClusterIdentity: x, Epoch: epoch, Owner: "a", Connected: true, Synced: true, EverSynced: true}}}
	b := join(t, "b", kr, a.gossip())
	if err := b.m.Ready(); err == nil || !strings.Contains(err.Error(), "default/x") {
		t.Fatalf("b holding nothing: Ready() = %v, want waiting for default/x", err)
	}
	b.held = []ingest.Holding{{State: ingest.State{ClusterIdentity: x, Epoch: ingest.Epoch{At: 99, Replica: "z"}, Relayed: true, EverSynced: true}}}
	if err := b.m.Ready(); err == nil {
		t.Fatal("b holding an older epoch is ready")
	}
	b.held = []ingest.Holding{{State: ingest.State{ClusterIdentity: x, Epoch: epoch, Owner: "a", Relayed: true, EverSynced: true}}}
	if err := b.m.Ready(); err != nil {
		t.Fatalf("b holding a's cluster: %v", err)
	}
}

func TestParseKeyringRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "holds no key"},
		{"# only a comment\n", "holds no key"},
		{"not base64!\n", "line 1: not base64"},
		{"\n" + base64.StdEncoding.EncodeToString([]byte("short")), "line 2: key of 5 bytes"},
	} {
		if _, err := replica.ParseKeyring([]byte(tc.in), "f"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseKeyring(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// FuzzParseKeyring: ParseKeyring never panics, and what it accepts has a
// primary key of an AES size. Seeds are in testdata/fuzz/FuzzParseKeyring.
func FuzzParseKeyring(f *testing.F) {
	f.Add([]byte(base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n"))
	f.Add([]byte("# c\n\n" + base64.StdEncoding.EncodeToString(make([]byte, 16)) + "\n" + base64.StdEncoding.EncodeToString(make([]byte, 24))))
	f.Add([]byte("!!"))
	f.Fuzz(func(t *testing.T, b []byte) {
		kr, err := replica.ParseKeyring(b, "fuzz")
		if err != nil {
			return
		}
		if n := len(kr.GetPrimaryKey()); n != 16 && n != 24 && n != 32 {
			t.Fatalf("primary key of %d bytes", n)
		}
	})
}

// TestRejoinOnlyWhileASeedIsMissing: a replica whose seed is not up yet
// keeps joining it and finds it once it starts; once every seed is a
// live member it stops joining again (each rejoin was a push/pull with
// every seed, repeating memberlist's own).
func TestRejoinOnlyWhileASeedIsMissing(t *testing.T) {
	kr := keyring(t, 0)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	noPushPull := func(c *memberlist.Config) {
		fast(c)
		c.PushPullInterval = 0 // only joins start a push/pull
	}
	var ticks atomic.Int64
	aLog := &memberLog{}
	aStop := make(chan struct{})
	t.Cleanup(func() { close(aStop) })
	a, err := replica.Join(replica.Options{ID: "a", BindAddress: "127.0.0.1", Join: []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, Keyring: kr,
		Logger: slog.New(slog.NewTextHandler(aLog, &slog.HandlerOptions{Level: slog.LevelDebug})), RejoinInterval: time.Millisecond, Tune: noPushPull,
		QuorumWindow: time.Minute, ReadyTimeout: time.Minute, RelayAddress: "127.0.0.1:1", In: fakeIngest{},
		Load: func() replica.Load { ticks.Add(1); return replica.Load{} }}, aStop)
	if err != nil {
		t.Fatal(err)
	}
	bStop := make(chan struct{})
	t.Cleanup(func() { close(bStop) })
	if _, err := replica.Join(replica.Options{ID: "b", BindAddress: "127.0.0.1", BindPort: port, Keyring: kr, Tune: noPushPull,
		RejoinInterval: time.Millisecond, QuorumWindow: time.Minute, ReadyTimeout: time.Minute, RelayAddress: "127.0.0.1:1", In: fakeIngest{}}, bStop); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a found b, started after it, by joining again", func() bool { return len(a.Members()) == 2 })
	// Two more ticks of a's loop (each asks for the load, then decides
	// whether to join again) after the one that may still have joined.
	pushPulls := aLog.count("Initiating push/pull sync")
	after := ticks.Load()
	testwait.Until(t, "three more ticks of a's membership loop", func() bool { return ticks.Load() >= after+3 })
	if n := aLog.count("Initiating push/pull sync"); n > pushPulls+1 {
		t.Errorf("a started %d push/pulls after every seed had joined, want at most the one of the tick in progress", n-pushPulls)
	}
}

// TestReplacedMemberRejoinsAtANewAddress: a replica that died without
// leaving comes back under its id at another address (a StatefulSet's pod
// on a new IP); its peers take it as soon as they hold the old one dead,
// not once they forgot it (held here for ten minutes).
func TestReplacedMemberRejoinsAtANewAddress(t *testing.T) {
	kr := keyring(t, 0)
	slow := func(c *memberlist.Config) { fast(c); c.GossipToTheDeadTime = 10 * time.Minute }
	a := &member{stop: make(chan struct{}), log: &memberLog{}}
	m, err := replica.Join(replica.Options{ID: "a", BindAddress: "127.0.0.1", Keyring: kr, Logger: slog.New(slog.NewTextHandler(a.log, nil)),
		RejoinInterval: time.Hour, QuorumWindow: time.Minute, ReadyTimeout: time.Minute, Tune: slow,
		RelayAddress: "127.0.0.1:1", In: fakeIngest{}}, a.stop)
	if err != nil {
		t.Fatal(err)
	}
	a.m = m
	t.Cleanup(a.leave)

	// The first b: a bare gossip node that dies without leaving.
	c := memberlist.DefaultLANConfig()
	c.Name, c.BindAddr, c.BindPort, c.Keyring = "b", "127.0.0.1", 0, kr
	c.GossipVerifyIncoming, c.GossipVerifyOutgoing = true, true
	c.LogOutput = &memberLog{}
	fast(c)
	first, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Join([]string{a.gossip()}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a sees the first b", func() bool { return a.m.IsAlive("b") })
	if err := first.Shutdown(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a holds the first b dead", func() bool { return !a.m.IsAlive("b") })

	b := join(t, "b", kr, a.gossip())
	testwait.For(t, waitFor, func() error {
		for _, mb := range a.m.Members() {
			if mb.ID == "b" && mb.Gossip == b.gossip() && a.m.IsAlive("b") {
				return nil
			}
		}
		return fmt.Errorf("a does not hold b at its new address %s: members %+v", b.gossip(), a.m.Members())
	})
}
