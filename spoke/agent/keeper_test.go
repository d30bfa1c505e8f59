package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/x509test"
)

func TestRenewAt(t *testing.T) {
	ca := x509test.NewAuthority("mesh")
	c := testCredential(t, ca, time.Hour) // NotBefore a minute ago, backdated
	start := c.Received
	for _, tc := range []struct {
		fraction, jitter, r float64
		want                time.Duration
	}{
		{0.5, 0.3, 0, 30 * time.Minute},
		{0.5, 0.3, 0.999999, 48 * time.Minute},
		{0.8, 0, 0.5, 48 * time.Minute},
	} {
		got := RenewAt(c, tc.fraction, tc.jitter, tc.r).Sub(start)
		if d := got - tc.want; d < -time.Second || d > time.Second {
			t.Errorf("RenewAt(%g, %g, r=%g) = received + %s; want + %s (the lifetime counts from receipt, not the backdated NotBefore)",
				tc.fraction, tc.jitter, tc.r, got, tc.want)
		}
	}
	// A certificate received before its NotBefore counts from NotBefore.
	early := *c
	early.Received = c.Leaf.NotBefore.Add(-time.Hour)
	if got := RenewAt(&early, 0.5, 0, 0); !got.Equal(c.Leaf.NotBefore.Add(c.Leaf.NotAfter.Sub(c.Leaf.NotBefore) / 2)) {
		t.Errorf("RenewAt of an early credential = %s", got)
	}
	// One received expired renews at once.
	expired := *c
	expired.Received = c.Leaf.NotAfter.Add(time.Minute)
	if got := RenewAt(&expired, 0.5, 0.3, 0.5); got.After(expired.Received) {
		t.Errorf("RenewAt of a credential received expired = %s, after its receipt %s", got, expired.Received)
	}
}

// TestKeeperRenewsAndKeepsTheOldOne: the Keeper publishes each new
// credential before serving it, renews at the computed time, and while
// requests fail keeps the credential it has, counting the failures.
func TestKeeperRenewsAndKeepsTheOldOne(t *testing.T) {
	ca := x509test.NewAuthority("mesh")
	var (
		mu        sync.Mutex
		calls     int
		published []*Credential
	)
	failing := make(chan struct{})
	req := RequesterFunc(func(ctx context.Context) (*Credential, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch {
		case n == 1:
			return makeCredential(ca, 4*time.Second) // renewed at 5 % (200 ms)
		case n <= 3:
			if n == 2 {
				close(failing)
			}
			return nil, errTest
		default:
			return makeCredential(ca, time.Hour)
		}
	})
	m := newMetrics(nil)
	k := NewKeeper(req, KeeperOptions{RenewFraction: 0.05, RenewJitter: 0, RetryInitial: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Timeout: time.Second, Publish: func(c *Credential) error {
			mu.Lock()
			published = append(published, c)
			mu.Unlock()
			return nil
		}}, discard(), m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-k.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("no first credential")
	}
	first, _, _ := k.Current()
	select {
	case <-failing:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal attempt")
	}
	if cur, _, _ := k.Current(); cur != first {
		t.Error("the credential changed while renewal fails; want the old one kept")
	}
	var lastErr error
	testwait.Until(t, "renewed", func() bool {
		cur, _, err := k.Current()
		lastErr = err
		return cur != first
	})
	if lastErr != nil {
		t.Errorf("last error %v after a success; want none", lastErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(published) != 2 || published[0] != first {
		t.Errorf("published %d credentials; want the first, then the renewed one", len(published))
	}
	if got := testutil.ToFloat64(m.failures); got != 2 {
		t.Errorf("failures = %g, want 2", got)
	}
	if got := testutil.ToFloat64(m.renewals); got != 2 {
		t.Errorf("renewals = %g, want 2", got)
	}
}

// TestKeeperPublishFailureIsRetried: a credential that cannot be put in
// place (files not written) is not served; the Keeper asks again.
func TestKeeperPublishFailureIsRetried(t *testing.T) {
	ca := x509test.NewAuthority("mesh")
	attempts := 0
	k := NewKeeper(RequesterFunc(func(context.Context) (*Credential, error) { return makeCredential(ca, time.Hour) }),
		KeeperOptions{RenewFraction: 0.5, RetryInitial: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond, Timeout: time.Second,
			Publish: func(*Credential) error {
				attempts++
				if attempts == 1 {
					return errTest
				}
				return nil
			}}, discard(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = k.Run(ctx) }()
	select {
	case <-k.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("no credential after a failed publish")
	}
	if attempts != 2 {
		t.Errorf("published %d times; want a failure, then a success", attempts)
	}
}
