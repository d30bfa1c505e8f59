package load

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// flagValue is the value of the last occurrence of flag in args.
func flagValue(args []string, flag string) string {
	v := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			v = args[i+1]
		}
	}
	return v
}

func TestReplicaSetup(t *testing.T) {
	dir := t.TempDir()
	s, err := NewReplicaSetup(3, dir, "--replicas.shed-rate", "5")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Hubs) != 3 || len(s.Args) != 3 {
		t.Fatalf("%d hubs, %d argument lists, want 3", len(s.Hubs), len(s.Args))
	}
	seen := map[string]bool{}
	var join string
	for i, h := range s.Hubs {
		args := s.Args[i]
		for _, a := range []string{h.Admin, h.Spokes, h.XDS, flagValue(args, "--replicas.relay-listen"), "127.0.0.1:" + flagValue(args, "--replicas.bind-port")} {
			if seen[a] {
				t.Errorf("replica %d: address %s used twice", i, a)
			}
			seen[a] = true
		}
		if got := flagValue(args, "--admin.listen"); got != h.Admin {
			t.Errorf("replica %d: --admin.listen %s, its Hub says %s", i, got, h.Admin)
		}
		if got := flagValue(args, "--replicas.id"); got != ReplicaID(i) {
			t.Errorf("replica %d: id %q", i, got)
		}
		if !slices.Contains(args, "--tls.plaintext") {
			t.Errorf("replica %d: not in plaintext mode like the single hub: %q", i, args)
		}
		if i == 0 {
			join = flagValue(args, "--replicas.join")
		} else if got := flagValue(args, "--replicas.join"); got != join {
			t.Errorf("replica %d joins %q, replica 0 %q", i, got, join)
		}
		if got := flagValue(args, "--replicas.shed-rate"); got != "5" {
			t.Errorf("replica %d: the extra --replicas.shed-rate does not come last (%q)", i, got)
		}
		if got := flagValue(args, "--state.dir"); got != filepath.Join(dir, "state") {
			t.Errorf("replica %d: state dir %q", i, got)
		}
	}
	for i := range s.Hubs {
		if !strings.Contains(join, "127.0.0.1:"+flagValue(s.Args[i], "--replicas.bind-port")) {
			t.Errorf("join list %q lacks replica %d's gossip address", join, i)
		}
	}
	b, err := os.ReadFile(flagValue(s.Args[0], "--replicas.keyring-file"))
	if err != nil {
		t.Fatal(err)
	}
	if key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b))); err != nil || len(key) != 32 {
		t.Errorf("keyring %q: %d bytes, %v; want one base64 32-byte key", b, len(key), err)
	}
	if _, err := NewReplicaSetup(0, dir); err == nil {
		t.Error("NewReplicaSetup(0) made a set")
	}
}

func TestReplicaNotes(t *testing.T) {
	e := map[string]float64{"replicas": 2, "r0_proxies": 3, "r1_proxies": 2, "r0_cpu_s": 1.25, "r1_cpu_s": 0.5,
		"r0_gossip_bytes_per_s": 512, "steady_initial_relay_bytes": 3 << 20, "steady_r0_initial_relay_bytes": 2 << 20,
		"steady_r1_initial_relay_bytes": 1 << 20, "steady_idle_seconds": 30, "steady_r1_idle_gossip_bytes_per_s": 400,
		"r0_alloc_mb": 55, "r1_alloc_mb": 93, "r0_gc_cycles": 1, "r1_gc_cycles": 2, "r1_idle_releases_before": 1}
	got := Result{Scenario: "S1", Extra: e}.Notes()
	for _, want := range []string{"2 replicas: proxies 3/2", "CPU-s 1.25/0.50", "allocated 55/93 MB, 1/2 collections (idle heap returned 0/1 times before)",
		"gossip sent 0.50/0.00 KB/s",
		"relay sent 3.00 MB (2048/1024 KB per replica)", "idle for 30.0s: gossip sent 0.00/0.39 KB/s"} {
		if !strings.Contains(got, want) {
			t.Errorf("notes %q lack %q", got, want)
		}
	}
	single := Result{Scenario: "S1", Extra: map[string]float64{"complete": 1, "hub_alloc_mb": 159, "hub_gc_cycles": 2}}.Notes()
	if strings.Contains(single, "replicas") {
		t.Error("a single hub's notes mention replicas")
	}
	if want := "hub allocated 159 MB, 2 collections"; !strings.Contains(single, want) {
		t.Errorf("a single hub's notes %q lack %q", single, want)
	}
}
