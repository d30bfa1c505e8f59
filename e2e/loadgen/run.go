package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/gen"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/spoke/uplink"
)

// Config sizes a run.
type Config struct {
	HubBinary string
	Workload
	Proxies int
	Delta   bool
	// ChurnFor and ChurnRate shape S3 (endpoint events per second);
	// FlapFor is how long S4 keeps a spoke away.
	ChurnFor  time.Duration
	ChurnRate int
	FlapFor   time.Duration
	// Deadline bounds each wait (a hang, not a performance limit).
	Deadline time.Duration
	Progress io.Writer
}

// Result is one scenario's numbers.
type Result struct {
	Scenario          string
	N                 int // latency samples
	P50, P99, Max     time.Duration
	HubCPU            time.Duration // CPU time the hub used during the scenario
	PeakRSS           int64         // the hub's high-water mark so far, bytes
	Bytes             int64         // resource bytes the proxies received
	Responses         int64         // responses the proxies received
	UnaffectedReplies int64         // S3/S4: responses that carried nothing expected
}

// Run starts a hub, feeds it, connects the proxies and runs S1–S4.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Deadline == 0 {
		cfg.Deadline = 5 * time.Minute
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "[%s] "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
		}
	}
	h, err := startHub(ctx, cfg.HubBinary)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	progress("hub pid %d, xds %s", h.cmd.Process.Pid, h.xds)

	// Spokes: the real uplink code, one per cluster.
	objs := make([][]*meshconfig.Object, len(Clusters))
	for ci := range Clusters {
		if objs[ci], err = cfg.Workload.Objects(ci, nil); err != nil {
			return nil, err
		}
	}
	spokes := make([]*spoke, len(Clusters))
	for ci, name := range Clusters {
		spokes[ci] = startSpoke(ctx, h.spokes, name, objs[ci])
	}
	defer func() {
		for _, s := range spokes {
			s.stop()
		}
	}()
	if err := h.waitSynced(ctx, len(Clusters), cfg.Deadline); err != nil {
		return nil, err
	}
	progress("%d clusters synced: %d services × %d endpoints × %d clusters", len(Clusters), cfg.Services, cfg.Endpoints, len(Clusters))

	conn, err := grpc.NewClient(h.xds, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// Several connections, as proxies would use (one HTTP/2 connection
	// would serialize every stream's flow control).
	conns := []*grpc.ClientConn{conn}
	for range min(cfg.Proxies/50, 15) {
		c, err := grpc.NewClient(h.xds, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		conns = append(conns, c)
	}

	var results []Result
	// S1: every proxy connects at once.
	cpu0 := h.cpu()
	start := time.Now()
	proxies := make([]*Proxy, cfg.Proxies)
	for i := range proxies {
		if proxies[i], err = Connect(ctx, conns[i%len(conns)], i, cfg.Delta); err != nil {
			return nil, err
		}
	}
	var lat []time.Duration
	for _, p := range proxies {
		if err := wait(ctx, p.Ready, cfg.Deadline); err != nil {
			return nil, fmt.Errorf("S1: proxy %s never held every type: %w", p.ID, err)
		}
		lat = append(lat, p.ReadyAt().Sub(start))
	}
	results = append(results, summarize("S1 cold connect", lat, h, cpu0, proxies, 0))
	progress("S1 done: %d proxies ready, max %s", len(proxies), results[0].Max.Round(time.Millisecond))
	time.Sleep(time.Second) // settle

	// S2: one edit every proxy receives.
	rule, err := FanOutRule(1000)
	if err != nil {
		return nil, err
	}
	res, err := fanOut(ctx, cfg, h, spokes[0], objs[0], rule, proxies)
	if err != nil {
		return nil, err
	}
	results = append(results, res)
	progress("S2 done: p99 %s", res.P99.Round(time.Millisecond))
	objs[0] = append(slices.Clone(objs[0]), rule...)

	// S3: endpoint churn.
	res, err = churn(ctx, cfg, h, spokes, objs, proxies)
	if err != nil {
		return nil, err
	}
	results = append(results, res)
	progress("S3 done: p99 %s over %d samples", res.P99.Round(time.Millisecond), res.N)

	// S4: one spoke away and back with the same state.
	res, err = flap(ctx, cfg, h, spokes, objs, proxies)
	if err != nil {
		return nil, err
	}
	results = append(results, res)
	progress("S4 done: %d responses", res.Responses)
	return results, nil
}

func wait(ctx context.Context, ch <-chan struct{}, d time.Duration) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return errors.New("timed out")
	}
}

func counters(proxies []*Proxy) (bytes, responses int64) {
	for _, p := range proxies {
		bytes += p.Bytes.Load()
		responses += p.Responses.Load()
	}
	return bytes, responses
}

// summarize turns latencies and the hub's and proxies' counters into a
// Result; the counters are reset.
func summarize(name string, lat []time.Duration, h *hubProc, cpu0 time.Duration, proxies []*Proxy, unaffected int64) Result {
	slices.Sort(lat)
	r := Result{Scenario: name, N: len(lat), HubCPU: h.cpu() - cpu0, PeakRSS: h.peakRSS(), UnaffectedReplies: unaffected}
	if len(lat) > 0 {
		r.P50, r.P99, r.Max = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	}
	r.Bytes, r.Responses = counters(proxies)
	for _, p := range proxies {
		p.Bytes.Store(0)
		p.Responses.Store(0)
	}
	return r
}

// fanOut applies rule in cluster c1 and times each proxy's first cluster
// response after it.
func fanOut(ctx context.Context, cfg Config, h *hubProc, sp *spoke, base, rule []*meshconfig.Object, proxies []*Proxy) (Result, error) {
	summarize("", nil, h, 0, proxies, 0) // reset counters
	var mu sync.Mutex
	got := map[*Proxy]time.Duration{}
	done := make(chan struct{})
	var start time.Time
	for _, p := range proxies {
		p.Watch(func(p *Proxy, typeURL string, _ []*anypb.Any, at time.Time) {
			if typeURL != gen.ClusterType {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if _, ok := got[p]; !ok && !start.IsZero() {
				got[p] = at.Sub(start)
				if len(got) == len(proxies) {
					close(done)
				}
			}
		})
	}
	cpu0 := h.cpu()
	mu.Lock()
	start = time.Now()
	mu.Unlock()
	sp.up.Update(append(slices.Clone(base), rule...))
	if err := wait(ctx, done, cfg.Deadline); err != nil {
		return Result{}, fmt.Errorf("S2: %d of %d proxies got the edit: %w", len(got), len(proxies), err)
	}
	time.Sleep(500 * time.Millisecond) // let ACKs and any extra responses land
	for _, p := range proxies {
		p.Watch(nil)
	}
	lat := make([]time.Duration, 0, len(got))
	for _, d := range got {
		lat = append(lat, d)
	}
	return summarize("S2 fan-out", lat, h, cpu0, proxies, 0), nil
}

// churn moves endpoints to new addresses at cfg.ChurnRate per second,
// round robin over the clusters, and times each move to each proxy's
// endpoint response carrying it.
func churn(ctx context.Context, cfg Config, h *hubProc, spokes []*spoke, objs [][]*meshconfig.Object, proxies []*Proxy) (Result, error) {
	summarize("", nil, h, 0, proxies, 0)
	type event struct {
		cluster, address string
		at               time.Time
	}
	var mu sync.Mutex
	var pending []*event
	seen := map[*event]map[*Proxy]bool{} // each (event, proxy) counts once: its first response
	var lat []time.Duration
	var unaffected atomic.Int64
	for _, p := range proxies {
		p.Watch(func(p *Proxy, typeURL string, resources []*anypb.Any, at time.Time) {
			if typeURL != gen.EndpointType {
				unaffected.Add(1)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			hit := false
			for _, ev := range pending {
				if seen[ev][p] || !assignmentHas(resources, ev.cluster, ev.address) {
					continue
				}
				if seen[ev] == nil {
					seen[ev] = map[*Proxy]bool{}
				}
				seen[ev][p] = true
				lat = append(lat, at.Sub(ev.at))
				hit = true
			}
			if !hit {
				unaffected.Add(1)
			}
		})
	}
	moved := map[[2]int]int{}
	cpu0 := h.cpu()
	tick := time.NewTicker(time.Second / time.Duration(max(1, cfg.ChurnRate)))
	defer tick.Stop()
	end := time.Now().Add(cfg.ChurnFor)
	n := 0
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-tick.C:
		}
		ci := n % len(Clusters)
		i, j := (n/len(Clusters))%cfg.Services, (n/len(Clusters)/cfg.Services)%cfg.Endpoints
		k := [2]int{i, j*len(Clusters) + ci}
		moved[k]++
		next, err := cfg.Workload.objectsMoved(ci, moved, objs[ci], i, j)
		if err != nil {
			return Result{}, err
		}
		objs[ci] = next
		ev := &event{cluster: ClusterName(i), address: endpointAddress(i, ci, j, moved[k])}
		mu.Lock()
		ev.at = time.Now()
		pending = append(pending, ev)
		if len(pending) > 64 {
			pending = pending[1:]
		}
		mu.Unlock()
		spokes[ci].up.Update(next)
		n++
	}
	time.Sleep(2 * time.Second)
	for _, p := range proxies {
		p.Watch(nil)
	}
	mu.Lock()
	missed := 0
	for _, ps := range seen {
		missed += len(proxies) - len(ps)
	}
	missed += (n - len(seen)) * len(proxies)
	samples := slices.Clone(lat)
	mu.Unlock()
	r := summarize("S3 endpoint churn", samples, h, cpu0, proxies, unaffected.Load())
	if missed > 0 {
		// An event superseded by a later move of the same endpoint before
		// a proxy saw it is legitimately never seen; report, do not fail.
		fmt.Fprintf(progressOr(cfg.Progress), "S3: %d of %d (event, proxy) pairs were not observed\n", missed, n*len(proxies))
	}
	return r, nil
}

func progressOr(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// objectsMoved is objs with service i's endpoint j (in cluster ci) at its
// new address; the other objects keep their identity.
func (w Workload) objectsMoved(ci int, moved map[[2]int]int, objs []*meshconfig.Object, i, j int) ([]*meshconfig.Object, error) {
	name := fmt.Sprintf("svc-%d-%s-%d", i, Clusters[ci], j)
	y := fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: %s, namespace: %s}\n"+
		"spec: {address: %s, labels: {app: svc-%d}, locality: region-1/zone-%s}\n",
		name, serviceNS(i), endpointAddress(i, ci, j, moved[[2]int{i, j*len(Clusters) + ci}]), i, Clusters[ci])
	fresh, errs := meshconfig.DecodeYAML([]byte(y), "move.yaml")
	if len(errs) > 0 {
		return nil, errs[0]
	}
	out := slices.Clone(objs)
	for k, o := range out {
		if o.Kind.Kind == "WorkloadEntry" && o.Name == name && o.Namespace == serviceNS(i) {
			out[k] = fresh[0]
			return out, nil
		}
	}
	return nil, fmt.Errorf("no WorkloadEntry %s", name)
}

// flap stops cluster c2's spoke for cfg.FlapFor and starts it again with
// the same objects; proxies should receive nothing.
func flap(ctx context.Context, cfg Config, h *hubProc, spokes []*spoke, objs [][]*meshconfig.Object, proxies []*Proxy) (Result, error) {
	summarize("", nil, h, 0, proxies, 0)
	cpu0 := h.cpu()
	spokes[1].stop()
	time.Sleep(cfg.FlapFor)
	spokes[1] = startSpoke(ctx, h.spokes, Clusters[1], objs[1])
	if err := h.waitSynced(ctx, len(Clusters), cfg.Deadline); err != nil {
		return Result{}, err
	}
	time.Sleep(2 * time.Second)
	_, responses := counters(proxies)
	return summarize("S4 spoke flap", nil, h, cpu0, proxies, responses), nil
}

// spoke is one cluster's uplink, in process.
type spoke struct {
	up     *uplink.Uplink
	cancel context.CancelFunc
	done   chan struct{}
}

func startSpoke(ctx context.Context, addr, cluster string, objs []*meshconfig.Object) *spoke {
	ctx, cancel := context.WithCancel(ctx)
	up := uplink.New(uplink.Options{Address: addr, Mesh: "default", Cluster: cluster, BackoffInitial: 100 * time.Millisecond,
		BackoffMax: time.Second, MaxMessageBytes: 64 << 20, Logger: slog.New(slog.DiscardHandler)})
	up.Update(objs)
	s := &spoke{up: up, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = up.Run(ctx)
	}()
	return s
}

func (s *spoke) stop() {
	s.cancel()
	<-s.done
}

// hubProc is a nave-hub child process on loopback ports.
type hubProc struct {
	cmd                *exec.Cmd
	admin, spokes, xds string
	exited             chan struct{}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startHub(ctx context.Context, binary string) (*hubProc, error) {
	h := &hubProc{exited: make(chan struct{})}
	for _, a := range []*string{&h.admin, &h.spokes, &h.xds} {
		var err error
		if *a, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	h.cmd = exec.Command(binary, "--admin.listen", h.admin, "--spokes.listen", h.spokes, "--xds.listen", h.xds,
		"--log.level", "warn", "--spokes.max-message-bytes", strconv.Itoa(64<<20), "--xds.admission-rate", "0")
	h.cmd.Stdout, h.cmd.Stderr = os.Stderr, os.Stderr
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := h.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = h.cmd.Wait(); close(h.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + h.admin + "/healthz/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return h, nil
			}
		}
		select {
		case <-h.exited:
			return nil, fmt.Errorf("the hub exited at start: %v", h.cmd.ProcessState)
		case <-ctx.Done():
			h.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.stop()
			return nil, errors.New("the hub was not ready within 30 s")
		}
	}
}

// stop ends the hub (SIGTERM, then SIGKILL after 5 s) and waits for it.
func (h *hubProc) stop() {
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		<-h.exited
	}
}

// cpu is the hub's user+system CPU time so far (/proc/PID/stat).
func (h *hubProc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// peakRSS is the hub's VmHWM in bytes.
func (h *hubProc) peakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// waitSynced waits until n clusters are connected and synced at the hub.
func (h *hubProc) waitSynced(ctx context.Context, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get("http://" + h.admin + "/debug/spokes")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Count(string(body), `"synced": true`) >= n && !strings.Contains(string(body), `"connected": false`) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d clusters not synced within %s", n, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
