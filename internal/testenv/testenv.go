// Package testenv decides what a test does when the machine lacks what it
// needs (root, a network namespace, iptables, Chromium): skip on a
// developer's machine, fail where the environment is promised. .ci/run
// installs every such dependency, runs as root and sets RequireEnv, so
// there a missing piece fails the run instead of passing it silently.
package testenv

import (
	"os"
	"testing"
)

// RequireEnv is the environment variable that turns Missing's skip into a
// failure.
const RequireEnv = "NAVE_REQUIRE_TEST_ENV"

// Missing ends the test because what it needs is missing, saying what:
// a skip, or a failure when RequireEnv is set.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("the test environment is incomplete ("+RequireEnv+" is set): "+format, args...)
	}
	t.Skipf(format, args...)
}
