package pushctx_test

import (
	"context"
	"testing"
	"time"

	"github.com/navemesh/nave/xds/pushctx"
)

// start returns a started Publisher over src; it stops with the test.
func start(t *testing.T, src pushctx.Source, quiet, maxWait time.Duration) *pushctx.Publisher {
	t.Helper()
	m := pushctx.New(src, pushctx.Options{DebounceQuiet: quiet, DebounceMax: maxWait})
	// The test's context: under synctest, its bubble's, ended before the
	// bubble waits for the Publisher's goroutines.
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	m.Start(ctx)
	return m
}
