package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/navemesh/nave/hub/ca"
)

// TestRootsSteps runs the rotation commands on a state dir: each step,
// each one again (idempotent), and the refusals that protect certificates.
func TestRootsSteps(t *testing.T) {
	state := t.TempDir()
	roots := func(step string, extra ...string) result {
		t.Helper()
		return navectlRun(t, append([]string{"roots", step, "--state-dir", state, "--mesh", "default"}, extra...)...)
	}
	status := func() ca.RotationStatus {
		t.Helper()
		r := roots("status", "-o", "json")
		if r.code != 0 {
			t.Fatalf("roots status: exit %d: %s", r.code, r.stderr)
		}
		var st ca.RotationStatus
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("roots status -o json: %v: %s", err, r.stdout)
		}
		return st
	}
	// No CA yet: nothing is created.
	if r := roots("add"); r.code != 1 || !strings.Contains(r.stderr, "has no CA") {
		t.Fatalf("add without a CA: exit %d: %s", r.code, r.stderr)
	}
	if r := navectlRun(t, "cert", "issue", "--state-dir", state, "--mesh", "default", "--namespace", "a", "--service-account", "b", "--out", t.TempDir()); r.code != 0 {
		t.Fatalf("cert issue: %s", r.stderr)
	}
	if r := roots("status"); r.code != 0 || !strings.Contains(r.stdout, "phase none") || !strings.Contains(r.stdout, "navectl roots add") {
		t.Fatalf("status: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	for i := range 2 {
		if r := roots("add"); r.code != 0 {
			t.Fatalf("add #%d: exit %d: %s", i+1, r.code, r.stderr)
		}
	}
	if st := status(); st.Phase != ca.PhaseAdded || len(st.Roots) != 2 {
		t.Fatalf("after add: %+v", st)
	}
	if r := roots("drop", "--force"); r.code != 1 || !strings.Contains(r.stderr, "switch first") {
		t.Fatalf("drop before switch: exit %d: %s", r.code, r.stderr)
	}
	if r := roots("switch"); r.code != 1 || !strings.Contains(r.stderr, "may not all hold it") {
		t.Fatalf("early switch: exit %d: %s", r.code, r.stderr)
	}
	if r := roots("switch", "--min-distribution", "0s"); r.code != 0 || !strings.Contains(r.stdout, "switched") {
		t.Fatalf("switch: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := roots("switch"); r.code != 0 || !strings.Contains(r.stdout, "already switched") {
		t.Fatalf("switch again: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := roots("drop"); r.code != 1 || !strings.Contains(r.stderr, "may be valid until") {
		t.Fatalf("early drop: exit %d: %s", r.code, r.stderr)
	}
	if r := roots("drop", "--force"); r.code != 0 {
		t.Fatalf("drop: exit %d: %s", r.code, r.stderr)
	}
	if st := status(); st.Phase != ca.PhaseNone || len(st.Roots) != 1 {
		t.Fatalf("after drop: %+v", st)
	}
	if r := roots("switch", "--bogus"); r.code != 2 {
		t.Fatalf("bad flag: exit %d, want 2", r.code)
	}
}
