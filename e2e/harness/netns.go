package harness

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

// NetNS is a network namespace the test created, joined to the host by a
// veth pair: processes started in it listen on NSIP, which the host
// reaches through HostIP. It lets a test give a workload a real,
// non-loopback address (Kubernetes refuses loopback endpoints) while all
// traffic stays inside the machine, in a namespace the test owns.
type NetNS struct {
	Name   string
	HostIP string
	NSIP   string
}

var netnsSeq atomic.Uint32

// NewNetNS creates the namespace and the veth pair; both are deleted when
// the test ends. It needs root and iproute2's ip.
func NewNetNS(t testing.TB) *NetNS {
	t.Helper()
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	// A /30 in 10.253.0.0/16, chosen per namespace.
	n := (uint32(b[0])<<8 | uint32(b[1]) + netnsSeq.Add(1)) % (1 << 14)
	host, inner := fmt.Sprintf("10.253.%d.%d", n>>6, (n&63)*4+1), fmt.Sprintf("10.253.%d.%d", n>>6, (n&63)*4+2)
	ns := &NetNS{Name: "nave-" + id, HostIP: host, NSIP: inner}
	hostIf, nsIf := "nv"+id+"h", "nv"+id+"n"
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns.Name).Run()
	})
	for _, args := range [][]string{
		{"netns", "add", ns.Name},
		{"link", "add", hostIf, "type", "veth", "peer", "name", nsIf},
		{"link", "set", nsIf, "netns", ns.Name},
		{"addr", "add", host + "/30", "dev", hostIf},
		{"link", "set", hostIf, "up"},
		{"netns", "exec", ns.Name, "ip", "addr", "add", inner + "/30", "dev", nsIf},
		{"netns", "exec", ns.Name, "ip", "link", "set", nsIf, "up"},
		{"netns", "exec", ns.Name, "ip", "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return ns
}

// Start runs bin inside the namespace (see the package Start).
func (ns *NetNS) Start(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	return Start(t, name, "ip", append([]string{"netns", "exec", ns.Name, bin}, args...)...)
}
