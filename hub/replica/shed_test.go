package replica_test

import (
	"net"
	"testing"
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
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		<-accepted
	}
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
