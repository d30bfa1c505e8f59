package replica_test

import (
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/navemesh/nave/hub/replica"
)

// TestBalancerShedsGraduallyTowardAnEvenSpread: a replica holding 30
// connections while two ready peers hold none sheds at most Rate a second,
// stops at its share (10) within the tolerance, and sheds nothing alone or
// when the spread is even.
func TestBalancerShedsGraduallyTowardAnEvenSpread(t *testing.T) {
	mine, peers := 30, []int{0, 0}
	shed := make(chan int, 100)
	b := replica.NewBalancer(replica.BalancerOptions{
		Mine: func() int { return mine }, Peers: func() []int { return peers },
		Shed: func(n int) int { mine -= n; peers[0] += n; shed <- n; return n },
		Rate: 5, Tolerance: 0.1, Interval: 20 * time.Millisecond,
	})
	if got := b.Excess(); got != 20 {
		t.Fatalf("excess %d, want 20 (30 held, share 10)", got)
	}
	total := 0
	for range 200 {
		n := b.Tick()
		if n > 1 {
			t.Fatalf("one tick of 20 ms at 5/s sheds %d, want at most 1", n)
		}
		for range n {
			select {
			case k := <-shed:
				total += k
			case <-time.After(5 * time.Second):
				t.Fatal("a scheduled close did not happen")
			}
		}
		if b.Excess() == 0 {
			break
		}
	}
	if b.Excess() != 0 || total == 0 {
		t.Fatalf("after shedding %d: %d held, peers %v, excess %d", total, mine, peers, b.Excess())
	}
	if mine > 10+2 {
		t.Errorf("stopped at %d connections, want at most the share 10 plus the tolerance", mine)
	}
	alone := replica.NewBalancer(replica.BalancerOptions{Mine: func() int { return 50 }, Peers: func() []int { return nil },
		Shed: func(int) int { t.Error("shed alone"); return 0 }, Rate: 100})
	if alone.Tick() != 0 {
		t.Error("a replica without ready peers sheds")
	}
	even := replica.NewBalancer(replica.BalancerOptions{Mine: func() int { return 11 }, Peers: func() []int { return []int{10, 9} },
		Shed: func(int) int { t.Error("shed at an even spread"); return 0 }, Rate: 100, Tolerance: 0.1})
	if even.Tick() != 0 {
		t.Error("an even spread is shed")
	}
}

// TestTrackedListenerClosesTheOldest: the tracked listener counts open
// connections and closes the oldest first.
func TestTrackedListenerClosesTheOldest(t *testing.T) {
	l := replica.Track(listen(t))
	defer l.Close()
	clients, _ := connectTracked(t, l, 3)
	if l.Len() != 3 {
		t.Fatalf("Len %d, want 3", l.Len())
	}
	if n := l.CloseOldest(1); n != 1 || l.Len() != 2 {
		t.Fatalf("CloseOldest(1) = %d, Len %d", n, l.Len())
	}
	_ = clients[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := clients[0].Read(make([]byte, 1)); err == nil {
		t.Error("the oldest connection is still open")
	}
	_ = clients[1].SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := clients[1].Read(make([]byte, 1)); err == nil || !isTimeout(err) {
		t.Errorf("the second connection was closed: %v", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestBalancerWaitsOutAConnectionStorm: while this replica's own count
// grows (proxies arriving) its peers' gossiped counts lag behind, so an
// even spread looks uneven: nothing is shed until the excess has been seen
// Settle checks in a row without the count growing.
func TestBalancerWaitsOutAConnectionStorm(t *testing.T) {
	mine, peers := 0, []int{0, 0}
	b := replica.NewBalancer(replica.BalancerOptions{
		Mine: func() int { return mine }, Peers: func() []int { return peers },
		Shed: func(n int) int { t.Errorf("shed %d during the storm", n); return 0 },
		Rate: 1000, Tolerance: 0.1, Interval: time.Millisecond,
	})
	// 500 proxies arrive evenly over 10 checks; the peers' counts are
	// those of the check before.
	apparent := 0
	for i := 1; i <= 10; i++ {
		peers = []int{mine, mine}
		mine += 17
		if b.Excess() > 0 {
			apparent++
		}
		if n := b.Tick(); n != 0 {
			t.Fatalf("check %d: sheds %d while connections arrive", i, n)
		}
	}
	if apparent < 3 {
		t.Fatalf("the storm showed an excess on %d checks; the test does not model the lag", apparent)
	}
	// The storm is over: the peers' counts catch up, nothing to shed.
	peers = []int{mine, mine}
	for range 5 {
		if n := b.Tick(); n != 0 {
			t.Fatalf("sheds %d at an even spread", n)
		}
	}

	// A lasting imbalance (a replica joined, empty) is shed after Settle
	// checks.
	held, shed := 30, 0
	joined := replica.NewBalancer(replica.BalancerOptions{
		Mine: func() int { return held }, Peers: func() []int { return []int{30, 0} },
		Shed: func(n int) int { shed += n; return n }, Rate: 1000, Tolerance: 0.1, Interval: time.Millisecond, Settle: 3,
	})
	if joined.Tick() != 0 { // the first check sees the count grow from zero
		t.Fatal("shed on the first check")
	}
	for i := range 2 {
		if joined.Tick() != 0 {
			t.Fatalf("shed on settling check %d", i+1)
		}
	}
	if joined.Tick() == 0 {
		t.Fatal("a settled excess is not shed")
	}
}

// TestBalancerSendsProxiesHome: a replica holding proxies homed on a
// ready peer sheds them, at most Rate a second, once that peer has been
// ready for Settle checks, until none is left; it never sheds proxies
// at home or homed on a replica that is not ready; the even-spread rule
// sheds only proxies without a home.
func TestBalancerSendsProxiesHome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		homes := map[string]int{"r0": 10, "r1": 5, "r2": 3, "": 4}
		var ready []string
		var shedHome []string
		mine := func() int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, k := range homes {
				n += k
			}
			return n
		}
		b := replica.NewBalancer(replica.BalancerOptions{
			Self: "r1", Mine: mine, Peers: func() []int { return []int{mine(), mine()} },
			Homes: func() map[string]int {
				mu.Lock()
				defer mu.Unlock()
				return maps.Clone(homes)
			},
			ReadyPeers: func() []string {
				mu.Lock()
				defer mu.Unlock()
				return slices.Clone(ready)
			},
			ShedHome: func(home string, n int) int {
				mu.Lock()
				defer mu.Unlock()
				n = min(n, homes[home])
				homes[home] -= n
				for range n {
					shedHome = append(shedHome, home)
				}
				return n
			},
			Shed: func(int) int { t.Error("an even spread is shed"); return 0 },
			Rate: 2, Interval: time.Second, Settle: 3,
		})
		tick := func() int {
			n := b.Tick()
			time.Sleep(time.Second) // the interval: its scheduled closes happen within it
			synctest.Wait()
			return n
		}
		// quiet makes peers the ready ones; the next checks shed nothing.
		quiet := func(why string, checks int, peers ...string) {
			mu.Lock()
			ready = peers
			mu.Unlock()
			for i := range checks {
				if n := tick(); n != 0 {
					t.Fatalf("%s: check %d sheds %d", why, i+1, n)
				}
			}
		}
		// No peer ready: the proxies homed elsewhere stay (their home may
		// be dead or starting). r2 is never ready.
		quiet("no home ready", 1)
		quiet("r0 settling", 2, "r0")
		quiet("r0 flapped: the wait starts over", 1)
		quiet("r0 settling after the flap", 2, "r0")
		total := 0
		for range 10 {
			n := tick()
			if n > 2 {
				t.Fatalf("one check at 2/s sheds %d", n)
			}
			total += n
		}
		mu.Lock()
		defer mu.Unlock()
		if total != 10 || homes["r0"] != 0 || len(shedHome) != 10 {
			t.Fatalf("shed %d (%v); held %v, want the 10 homed on r0 shed and nothing else", total, shedHome, homes)
		}
		for _, h := range shedHome {
			if h != "r0" {
				t.Errorf("shed a proxy homed on %q", h)
			}
		}
		if homes["r1"] != 5 || homes["r2"] != 3 || homes[""] != 4 {
			t.Errorf("held %v: shed proxies at home, homed on a replica not ready, or without a home", homes)
		}
	})
}

// TestBalancerShedsOnlyProxiesWithoutAHomeTowardAnEvenSpread: homed
// proxies count toward the spread but are not shed for it: a replica
// holding 25 proxies at home and 5 without one while its peers hold
// none sheds the 5 and stops.
func TestBalancerShedsOnlyProxiesWithoutAHomeTowardAnEvenSpread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		homes := map[string]int{"r1": 25, "": 5}
		held := func() int {
			mu.Lock()
			defer mu.Unlock()
			return homes["r1"] + homes[""]
		}
		b := replica.NewBalancer(replica.BalancerOptions{
			Self: "r1", Mine: held, Peers: func() []int { return []int{0, 0} },
			Homes: func() map[string]int {
				mu.Lock()
				defer mu.Unlock()
				return maps.Clone(homes)
			},
			ReadyPeers: func() []string { return []string{"r0", "r2"} },
			ShedHome:   func(home string, n int) int { t.Errorf("shed %d homed on %s", n, home); return 0 },
			Shed: func(n int) int {
				mu.Lock()
				defer mu.Unlock()
				n = min(n, homes[""])
				homes[""] -= n
				return n
			},
			Rate: 100, Interval: time.Second, Settle: 2,
		})
		total := 0
		for range 5 {
			total += b.Tick()
			time.Sleep(time.Second)
			synctest.Wait()
		}
		mu.Lock()
		defer mu.Unlock()
		if total != 5 || homes[""] != 0 || homes["r1"] != 25 {
			t.Fatalf("shed %d, held %v; want the 5 without a home shed, the 25 at home kept", total, homes)
		}
	})
}

// TestTrackedListenerKnowsHomes: a connection identified with a home is
// counted by it and shed only by CloseHomed; CloseOldest sheds only
// connections without a home.
func TestTrackedListenerKnowsHomes(t *testing.T) {
	l := replica.Track(listen(t))
	defer l.Close()
	_, server := connectTracked(t, l, 3)
	l.Identify(server[0].RemoteAddr().String(), "r0")
	l.Identify(server[1].RemoteAddr().String(), "r2")
	l.Identify("192.0.2.1:1", "r0") // no such connection
	if got := l.Homes(); got["r0"] != 1 || got["r2"] != 1 || got[""] != 1 {
		t.Fatalf("Homes %v, want one each of r0, r2 and none", got)
	}
	if n := l.CloseOldest(3); n != 1 {
		t.Fatalf("CloseOldest(3) closed %d, want only the one without a home", n)
	}
	if n := l.CloseHomed("r0", 3); n != 1 {
		t.Fatalf("CloseHomed(r0, 3) closed %d, want 1", n)
	}
	if got := l.Homes(); l.Len() != 1 || got["r2"] != 1 {
		t.Fatalf("left %v (%d), want the one homed on r2", got, l.Len())
	}
}

// connectTracked dials l n times and returns the client and the server ends of
// each connection, in order; the clients are closed when the test ends.
func connectTracked(t *testing.T, l *replica.TrackedListener, n int) (clients, server []net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, n)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range n {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
		server = append(server, <-accepted)
	}
	return clients, server
}
