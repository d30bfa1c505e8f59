package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/renewal"
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
		got := RenewAt(c, renewal.Policy{Fraction: tc.fraction, Jitter: tc.jitter, Rand: func() float64 { return tc.r }}).Sub(start)
		if d := got - tc.want; d < -time.Second || d > time.Second {
			t.Errorf("RenewAt(%g, %g, r=%g) = received + %s; want + %s (the lifetime counts from receipt, not the backdated NotBefore)",
				tc.fraction, tc.jitter, tc.r, got, tc.want)
		}
	}
	// A certificate received before its NotBefore counts from NotBefore.
	early := *c
	early.Received = c.Leaf.NotBefore.Add(-time.Hour)
	if got := RenewAt(&early, renewal.Policy{Fraction: 0.5}); !got.Equal(c.Leaf.NotBefore.Add(c.Leaf.NotAfter.Sub(c.Leaf.NotBefore) / 2)) {
		t.Errorf("RenewAt of an early credential = %s", got)
	}
	// One received expired renews at once.
	expired := *c
	expired.Received = c.Leaf.NotAfter.Add(time.Minute)
	if got := RenewAt(&expired, renewal.Policy{Fraction: 0.5, Jitter: 0.3}); got.After(expired.Received) {
		t.Errorf("RenewAt of a credential received expired = %s, after its receipt %s", got, expired.Received)
	}
}

// TestKeeperRenewsAndKeepsTheOldOne: the Keeper publishes each new
// credential before serving it, renews at the computed time, and while
// requests fail keeps the credential it has, counting the failures
// (synctest's clock).
func TestKeeperRenewsAndKeepsTheOldOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ca := x509test.NewAuthority("mesh") // valid from the bubble's clock
		var (
			calls     atomic.Int32
			mu        sync.Mutex
			published []*Credential
		)
		req := RequesterFunc(func(ctx context.Context) (*Credential, error) {
			switch n := calls.Add(1); {
			case n == 1:
				return makeCredential(ca, 4*time.Second) // renewed at 5 % (200 ms)
			case n <= 3:
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
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- k.Run(ctx) }()
		synctest.Wait()
		first, at, _ := k.Current()
		if first == nil {
			t.Fatal("no first credential")
		}
		if d := at.Sub(first.Received); d != 200*time.Millisecond {
			t.Fatalf("renewal due %s after receipt, want 200ms (5 %% of 4s)", d)
		}

		time.Sleep(time.Until(at))
		synctest.Wait()
		if cur, _, err := k.Current(); cur != first || !errors.Is(err, errTest) || calls.Load() != 2 {
			t.Fatalf("after the first failed renewal: %d requests, credential kept %v, last error %v; want 2, the old one, %v",
				calls.Load(), cur == first, err, errTest)
		}
		// The retries wait at most RetryMax each; the next renewal of the
		// hour-long credential is minutes away.
		time.Sleep(time.Second)
		synctest.Wait()
		cur, _, err := k.Current()
		if cur == first || err != nil || calls.Load() != 4 {
			t.Fatalf("a second after the renewal was due: %d requests, renewed %v, last error %v; want 4, renewed, none", calls.Load(), cur != first, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(published) != 2 || published[0] != first || published[1] != cur {
			t.Errorf("published %d credentials; want the first, then the renewed one", len(published))
		}
		if got := testutil.ToFloat64(m.failures); got != 2 {
			t.Errorf("failures = %g, want 2", got)
		}
		if got := testutil.ToFloat64(m.renewals); got != 2 {
			t.Errorf("renewals = %g, want 2", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
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
