package uplink

import (
	"context"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// TestRunWaitsForTheSource: before its source's first state the uplink
// opens no stream (an early empty full state would make the hub prune the
// cluster at the synced marker). On synctest's fake clock a minute passes:
// the uplink is still waiting, with no session and nothing dialled. (Its
// hub address refuses connections, so that an uplink that dialled would
// fail at once and back off on the fake clock, and say so in its status.
// e2e/integration's TestUplinkWaitsForTheSource syncs it with a real hub.)
func TestRunWaitsForTheSource(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := lis.Addr().String()
	lis.Close()
	synctest.Test(t, func(t *testing.T) {
		u := New(Options{Address: refusing, Mesh: "m", Cluster: "c1", BackoffInitial: 20 * time.Millisecond,
			BackoffMax: 100 * time.Millisecond, MaxMessageBytes: 1 << 20})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- u.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		if st := u.Status(); st.State != StateWaiting || st.Sessions != 0 || st.LastErr != "" || st.Target != "" {
			t.Errorf("a minute before the source's first state: %+v, want waiting, no session, nothing dialled", st)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
