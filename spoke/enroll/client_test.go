package enroll_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/x509test"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/spoke/enroll"
)

const testToken = "nave-join.6f1c0e9a3b2d4c58.secret"

// flakyStore fails to load with an unreachable API server the first
// failures times, then says it holds nothing.
type flakyStore struct{ failures int }

func (s *flakyStore) Load(context.Context) (*enroll.Credentials, error) {
	if s.failures > 0 {
		s.failures--
		return nil, &url.Error{Op: "Get", URL: "https://api:6443", Err: errors.New("connection refused")}
	}
	return nil, enroll.ErrNotEnrolled
}
func (s *flakyStore) Save(context.Context, *enroll.Credentials) error { return nil }
func (s *flakyStore) String() string                                  { return "flaky store" }

// TestClientLoadRetriesAnUnreachableStore: an API server that cannot be
// reached is retried (each failure told to OnRetry); what the store then
// answers is returned.
func TestClientLoadRetriesAnUnreachableStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var retried []error
		c := &enroll.Client{Options: enroll.Options{Store: &flakyStore{failures: 3}}, BackoffInitial: time.Second, BackoffMax: 4 * time.Second,
			OnRetry: func(err error) { retried = append(retried, err) }}
		_, err := c.Load(t.Context())
		if !errors.Is(err, enroll.ErrNotEnrolled) {
			t.Fatalf("Load: %v, want enroll.ErrNotEnrolled", err)
		}
		if len(retried) != 3 {
			t.Errorf("%d retries told, want 3: %v", len(retried), retried)
		}
	})
}

// refusingHub is an Enrollment server that refuses every token.
type refusingHub struct {
	protocolv1.UnimplementedEnrollmentServer
	code codes.Code
}

func (h refusingHub) Enroll(context.Context, *protocolv1.EnrollRequest) (*protocolv1.EnrollResponse, error) {
	return nil, status.Error(h.code, "token already used")
}

// startHub serves h over TLS for hub.test; it returns its address and CA.
func startHub(t *testing.T, h protocolv1.EnrollmentServer) (string, []byte) {
	t.Helper()
	ca := x509test.NewAuthority("hub serving root")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(new(ca.ServerCert("hub.test")))))
	protocolv1.RegisterEnrollmentServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), ca.PEM()
}

// TestClientEnrollRetriesWhileTheHubIsDown: a hub nothing answers for is
// retried until the context ends.
func TestClientEnrollRetriesWhileTheHubIsDown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	retried := make(chan error, 16)
	c := &enroll.Client{Options: enroll.Options{Address: addr, ServerName: "hub.test", HubCA: x509test.NewAuthority("hub").PEM(), StateDir: t.TempDir()},
		BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		OnRetry: func(err error) {
			select {
			case retried <- err:
			default:
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Enroll(ctx, testToken)
		done <- err
	}()
	for range 2 {
		select {
		case err := <-retried:
			if st, _ := status.FromError(err); st.Code() != codes.Unavailable {
				t.Errorf("retried %v, want Unavailable", err)
			}
		case <-time.After(testwait.Timeout):
			t.Fatal("no retry")
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Enroll after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(testwait.Timeout):
		t.Fatal("Enroll did not return after its context ended")
	}
}

// TestClientEnrollRefusalIsFinal: the hub refusing is returned at once as
// a *enroll.RefusedError, which tells a refused token from other refusals.
func TestClientEnrollRefusalIsFinal(t *testing.T) {
	for _, tc := range []struct {
		code         codes.Code
		tokenRefused bool
	}{{codes.Unauthenticated, true}, {codes.PermissionDenied, false}} {
		addr, ca := startHub(t, refusingHub{code: tc.code})
		c := &enroll.Client{Options: enroll.Options{Address: addr, ServerName: "hub.test", HubCA: ca, StateDir: t.TempDir()},
			BackoffInitial: time.Millisecond, BackoffMax: time.Millisecond,
			OnRetry: func(err error) { t.Errorf("%s retried: %v", tc.code, err) }}
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Timeout)
		_, err := c.Enroll(ctx, testToken)
		cancel()
		var refused *enroll.RefusedError
		if !errors.As(err, &refused) || refused.Status.Code() != tc.code || refused.TokenRefused() != tc.tokenRefused {
			t.Errorf("%s: %v, want a refusal (token refused: %v)", tc.code, err, tc.tokenRefused)
		}
	}
}
