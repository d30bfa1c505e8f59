package load

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ReplicaSetup is what n nave-hub replicas on loopback need to form one
// replica set (docs/replicas.md): each one's addresses and flags. The
// replicas share one state directory and one gossip key, both under the
// directory NewReplicaSetup was given, and gossip encrypted as in
// production; in plaintext mode (HubArgs) the relay is plaintext too.
//
// Shedding runs with the hub's defaults: the load tool spreads its proxies
// evenly itself (round robin), and a replica waits out a connection storm
// before it sheds (replica.BalancerOptions.Settle), so nothing is shed;
// with Options.SpreadByNamespace each proxy names its home, where it is
// never shed.
type ReplicaSetup struct {
	Hubs []*Hub
	// Args are each replica's nave-hub flags (HubArgs included), extra
	// last.
	Args [][]string
}

// NewReplicaSetup picks free loopback ports for n replicas, writes a fresh
// gossip keyring into dir and makes dir/state their shared state
// directory.
func NewReplicaSetup(n int, dir string, extra ...string) (*ReplicaSetup, error) {
	if n < 1 {
		return nil, fmt.Errorf("replicas: %d, want at least 1", n)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	keyring := filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(keyring, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return nil, err
	}
	s := &ReplicaSetup{}
	gossip := make([]int, n)
	relay := make([]string, n)
	var join []string
	for i := range n {
		g, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		_, port, _ := net.SplitHostPort(g)
		gossip[i], _ = strconv.Atoi(port)
		join = append(join, g)
		if relay[i], err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	for i := range n {
		h, err := freeHub()
		if err != nil {
			return nil, err
		}
		s.Hubs = append(s.Hubs, h)
		s.Args = append(s.Args, HubArgs(h.Admin, h.Spokes, h.XDS, append([]string{"--state.dir", state,
			"--replicas.id", ReplicaID(i), "--replicas.join", strings.Join(join, ","),
			"--replicas.bind-address", "127.0.0.1", "--replicas.bind-port", strconv.Itoa(gossip[i]),
			"--replicas.relay-listen", relay[i], "--replicas.keyring-file", keyring}, extra...)...))
	}
	return s, nil
}

// ReplicaID is the id of replica i of a set NewReplicaSetup made.
func ReplicaID(i int) string { return fmt.Sprintf("hub-%d", i) }

// WaitMembers waits until every hub of a set sees all of them as live
// members.
func WaitMembers(ctx context.Context, hubs []*Hub, deadline time.Duration) error {
	return poll(ctx, deadline, 100*time.Millisecond, func() error {
		for i, h := range hubs {
			var v struct {
				Members []struct {
					ID string `json:"id"`
				} `json:"members"`
			}
			if err := h.getJSON("/debug/replicas", &v); err != nil {
				return fmt.Errorf("%s: %w", ReplicaID(i), err)
			}
			if len(v.Members) != len(hubs) {
				return fmt.Errorf("%s sees %d members, want %d", ReplicaID(i), len(v.Members), len(hubs))
			}
		}
		return nil
	})
}

// StartReplicas runs bin as n replicas of one set (NewReplicaSetup,
// state and keyring in a temporary directory removed by stop), one after
// the other, waits until each is ready and all see each other, and
// returns them with a function that stops them all (by PID, with a
// deadline) and removes the directory.
func StartReplicas(ctx context.Context, bin, logPath string, n int, extra ...string) ([]*Hub, func(), error) {
	dir, err := os.MkdirTemp("", "nave-load-replicas-")
	if err != nil {
		return nil, nil, err
	}
	s, err := NewReplicaSetup(n, dir, extra...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	var procs []*HubProcess
	stop := func() {
		for _, p := range procs {
			p.Stop(10 * time.Second)
		}
		os.RemoveAll(dir)
	}
	for i, h := range s.Hubs {
		p, err := startProcess(ctx, bin, logPath, s.Args[i])
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("%s: %w", ReplicaID(i), err)
		}
		procs = append(procs, p)
		h.PID = p.PID
	}
	if err := WaitMembers(ctx, s.Hubs, 60*time.Second); err != nil {
		stop()
		return nil, nil, fmt.Errorf("forming the replica set: %w", err)
	}
	return s.Hubs, stop, nil
}
