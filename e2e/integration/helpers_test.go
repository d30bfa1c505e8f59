// Package integration tests spoke and hub code together, in process, where
// importing both sides is allowed: spoke packages (enrollment, the uplink,
// the registration authority) against a real hub (hub/enroll/enrolltest's
// fixture, hub/ingest, hub/ca), and the hub's composition of ingest, push
// context and ADS fed through the spoke protocol. No binaries: the tests
// that start nave's processes are e2e's.
package integration

import (
	"context"
	"strings"
	"testing"
	"time"
)

// waitFor bounds every wait for something that must happen; a passing
// test never waits for it.
const waitFor = 10 * time.Second

// testCtx is a context that ends after waitFor or with the test.
func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return c
}

// testWriter logs through t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
