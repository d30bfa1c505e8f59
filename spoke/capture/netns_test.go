package capture

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/testenv"
	"github.com/navemesh/nave/internal/testwait"
)

// helperEnv makes the test binary a helper process (see TestMain): the
// netns test runs it inside network namespaces with `ip netns exec`.
const helperEnv = "NAVE_CAPTURE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// helper is one of the netns tests' processes:
//   - capture ARGS: Main(ARGS), the capture init container;
//   - serve NAME=PORT...: listens on each port and answers each
//     connection with the NAME of its port, until killed;
//   - dial UID ADDR: as uid and gid UID, connects to ADDR and prints the
//     answer, or "error: ..." when there is none;
//   - dnsserve UID NAME ADDR...: as UID, a DNS server on each ADDR (UDP and
//     TCP) answering every query with a TXT record holding NAME;
//   - dnsquery UID NET ADDR: as UID, asks ADDR over NET (udp, tcp) and
//     prints the TXT answer, or "error: ...".
func helper(mode string, args []string) int {
	switch mode {
	case "capture":
		return Main(args)
	case "serve":
		for _, a := range args {
			name, port, _ := strings.Cut(a, "=")
			lis, err := net.Listen("tcp", ":"+port) // both families
			if err != nil {
				fmt.Println("error:", err)
				return 1
			}
			go func() {
				for {
					c, err := lis.Accept()
					if err != nil {
						return
					}
					fmt.Fprintln(c, name)
					c.Close()
				}
			}()
		}
		fmt.Println("ready")
		select {}
	case "dnsserve":
		return dnsServe(args)
	case "dnsquery":
		return dnsQuery(args)
	case "dial":
		uid, _ := strconv.Atoi(args[0])
		if err := becomeUID(uid); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		// Every dial is answered: the bounds only end a hang, generous for a
		// loaded machine (the first packet over a new veth, a slow helper).
		c, err := net.DialTimeout("tcp", args[1], testwait.Timeout)
		if err != nil {
			fmt.Println("error:", err)
			return 0
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(testwait.Timeout))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			fmt.Println("error:", err)
			return 0
		}
		fmt.Print(line)
		return 0
	}
	fmt.Println("unknown helper mode", mode)
	return 2
}

// becomeUID makes the process uid and gid uid (0: stays root).
func becomeUID(uid int) error {
	if uid == 0 {
		return nil
	}
	if err := syscall.Setresgid(uid, uid, uid); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	return nil
}

// netns is a network namespace the test created.
type netns string

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// helperCmd is the test binary run as helper mode inside ns.
func (ns netns) helperCmd(t *testing.T, mode string, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", string(ns), self}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	return cmd
}

// run runs a helper to its end and returns its output.
func (ns netns) run(t *testing.T, mode string, args ...string) string {
	t.Helper()
	out, err := ns.helperCmd(t, mode, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v: %s", mode, args, ns, err, out)
	}
	return strings.TrimSpace(string(out))
}

// serve starts a serve helper in ns, stopped by PID when the test ends.
func (ns netns) serve(t *testing.T, ports ...string) {
	t.Helper()
	ns.startHelper(t, "serve", ports...)
}

// startHelper starts a helper that prints "ready" once it serves, stopped
// by PID when the test ends.
func (ns netns) startHelper(t *testing.T, mode string, args ...string) {
	t.Helper()
	cmd := ns.helperCmd(t, mode, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("serve helper %d did not exit", cmd.Process.Pid)
		}
	})
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		first <- line
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case line := <-first:
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("serve helper in %s: %q", ns, line)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve helper in %s not ready", ns)
	}
}

// podAndClient skips the test without root, ip or the iptables-restore
// programs; else it creates a pod's and a client's network namespace
// joined by a veth pair whose ends (podIf, clientIf) are in them, loopback
// up, both deleted when the test ends. n is a random byte, for the test's
// addresses.
func podAndClient(t *testing.T, tag string) (pod, client netns, n int, podIf, clientIf string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to create network namespaces")
	}
	for _, prog := range []string{"ip", "iptables-restore", "ip6tables-restore"} {
		if _, err := exec.LookPath(prog); err != nil {
			testenv.Missing(t, "needs %s (apt-get install iproute2 iptables): %v", prog, err)
		}
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	pod, client = netns("nave-"+tag+"-"+id+"-p"), netns("nave-"+tag+"-"+id+"-c")
	if out, err := exec.Command("ip", "netns", "add", string(pod)).CombinedOutput(); err != nil {
		testenv.Missing(t, "cannot create a network namespace here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", string(pod)).Run() })
	ipCmd(t, "netns", "add", string(client))
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", string(client)).Run() })
	podIf, clientIf = "n"+tag[:1]+id+"p", "n"+tag[:1]+id+"c"
	ipCmd(t, "link", "add", podIf, "type", "veth", "peer", "name", clientIf)
	ipCmd(t, "link", "set", podIf, "netns", string(pod))
	ipCmd(t, "link", "set", clientIf, "netns", string(client))
	for _, ns := range []netns{pod, client} {
		ipCmd(t, "-n", string(ns), "link", "set", "lo", "up")
	}
	return pod, client, int(b[0]), podIf, clientIf
}

// TestRulesInNetworkNamespace applies the capture, through Main and the
// real iptables-restore, in a pod's network namespace joined by a veth
// pair to a client's, and checks what each connection reaches: the
// proxy's ports for captured traffic, the real destination for what is
// excluded (uid 1337, loopback, excluded ports). It needs root, ip and
// iptables-restore; without them it is skipped (fails in CI, internal/testenv).
func TestRulesInNetworkNamespace(t *testing.T) {
	pod, client, n, podIf, clientIf := podAndClient(t, "cap")
	podIP, clientIP := fmt.Sprintf("10.252.%d.2", n), fmt.Sprintf("10.252.%d.1", n)
	podIP6, clientIP6 := fmt.Sprintf("fd4e:6176:%x::2", n), fmt.Sprintf("fd4e:6176:%x::1", n)
	for _, c := range [][]string{
		{"-n", string(pod), "addr", "add", podIP + "/24", "dev", podIf},
		{"-n", string(pod), "link", "set", podIf, "up"},
		{"-n", string(pod), "route", "add", "default", "via", clientIP},
		{"-n", string(pod), "addr", "add", podIP6 + "/64", "dev", podIf, "nodad"},
		{"-n", string(pod), "-6", "route", "add", "default", "via", clientIP6},
		{"-n", string(client), "addr", "add", clientIP + "/24", "dev", clientIf},
		{"-n", string(client), "addr", "add", "192.0.2.1/24", "dev", clientIf},
		{"-n", string(client), "addr", "add", clientIP6 + "/64", "dev", clientIf, "nodad"},
		{"-n", string(client), "link", "set", clientIf, "up"},
	} {
		ipCmd(t, c...)
	}

	c := Default()
	c.ExcludeInboundPorts = []int{15021}
	c.ExcludeOutboundPorts = []int{5432}
	c.ExcludeOutboundRanges, _ = ParseRanges("192.0.2.0/24")
	if _, err := exec.LookPath("ip6tables-restore"); err != nil {
		testenv.Missing(t, "needs ip6tables-restore: %v", err)
	}
	// --ipv6=auto: the pod has a global IPv6 address, so both families.
	out := pod.run(t, "capture", c.Args()...)
	if !strings.Contains(out, "ipv4 rules installed") || !strings.Contains(out, "ipv6 rules installed") {
		t.Fatalf("capture: %s", out)
	}
	pod.serve(t, "outbound=15001", "inbound=15006", "app=8080", "status=15021")
	client.serve(t, "client=80", "db=5432")

	for _, tc := range []struct {
		name string
		ns   netns
		uid  int
		addr string
		want string
	}{
		{"the app's outbound call goes to Envoy's outbound port", pod, 0, clientIP + ":80", "outbound"},
		{"another uid's outbound call too", pod, 1000, clientIP + ":80", "outbound"},
		{"the proxy's own call (uid 1337) goes out", pod, 1337, clientIP + ":80", "client"},
		{"an excluded outbound port goes out", pod, 0, clientIP + ":5432", "db"},
		{"an excluded outbound range goes out", pod, 0, "192.0.2.1:80", "client"},
		{"loopback stays local", pod, 0, "127.0.0.1:8080", "app"},
		{"inbound goes to Envoy's inbound port", client, 0, podIP + ":8080", "inbound"},
		{"an excluded inbound port reaches the app", client, 0, podIP + ":15021", "status"},
		{"IPv6: the app's outbound call goes to Envoy's outbound port", pod, 0, "[" + clientIP6 + "]:80", "outbound"},
		{"IPv6: the proxy's own call goes out", pod, 1337, "[" + clientIP6 + "]:80", "client"},
		{"IPv6: an excluded outbound port goes out", pod, 0, "[" + clientIP6 + "]:5432", "db"},
		{"IPv6: loopback stays local", pod, 0, "[::1]:8080", "app"},
		{"IPv6: inbound goes to Envoy's inbound port", client, 0, "[" + podIP6 + "]:8080", "inbound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ns.run(t, "dial", strconv.Itoa(tc.uid), tc.addr); got != tc.want {
				t.Errorf("dial %s as uid %d in %s: %q, want %q", tc.addr, tc.uid, tc.ns, got, tc.want)
			}
		})
	}
}
