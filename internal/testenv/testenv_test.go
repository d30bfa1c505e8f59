package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Missing skips without RequireEnv and fails with it: run as a child test
// process so the outcome can be inspected.
func TestMissing(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") != "" {
		Missing(t, "no %s here", "widget")
		return
	}
	for _, c := range []struct {
		require bool
		want    string
	}{{false, "--- SKIP: TestMissing"}, {true, "--- FAIL: TestMissing"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissing$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", RequireEnv+"=")
		if c.require {
			cmd.Env = append(cmd.Env, RequireEnv+"=1")
		}
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "no widget here") {
			t.Errorf("require=%v: want %q and the reason, got:\n%s", c.require, c.want, out)
		}
	}
}
