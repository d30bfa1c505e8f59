package load

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Stats summarizes latencies, in seconds.
type Stats struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// newStats computes Stats of samples (in seconds; sorted in place).
// Percentiles are nearest-rank.
func newStats(samples []float64) Stats {
	if len(samples) == 0 {
		return Stats{}
	}
	sort.Float64s(samples)
	sum := 0.0
	for _, s := range samples {
		sum += s
	}
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(samples)))) - 1
		return samples[max(0, min(i, len(samples)-1))]
	}
	return Stats{N: len(samples), P50: rank(0.50), P99: rank(0.99), Max: samples[len(samples)-1], Mean: sum / float64(len(samples))}
}

// TypeCounts is what the proxies received of one type in a scenario.
type TypeCounts struct {
	Responses float64 `json:"responses"`
	Resources float64 `json:"resources"`
	Removed   float64 `json:"removed"`
	Bytes     float64 `json:"bytes"`
}

// Result is one scenario's measurement (or the median of several runs').
type Result struct {
	Scenario string `json:"scenario"` // S1..S4
	Mode     string `json:"mode"`     // sotw or delta
	Proxies  int    `json:"proxies"`
	Services int    `json:"services,omitempty"` // the workload's services
	Runs     int    `json:"runs"`
	// Latency: S1 per proxy from the start of the storm to fully ACKed; S2
	// from the spoke update to the ACK of the response carrying the edit;
	// S3 from the spoke update to the ACK of the EDS response carrying the
	// new address, per affected proxy and move. S4 has none.
	Latency Stats `json:"latency"`
	// HubCPU is the hub's CPU-seconds (user+system) during the scenario,
	// PeakRSS its peak resident memory (MB) during it.
	HubCPU  float64 `json:"hubCPUSeconds"`
	PeakRSS float64 `json:"peakRSSMB"`
	// Bytes is every response byte the proxies received; ByType splits it.
	Bytes  float64               `json:"bytes"`
	ByType map[string]TypeCounts `json:"byType"`
	// Extra holds scenario-specific numbers (see Notes).
	Extra map[string]float64 `json:"extra"`
	// Hub is the change of every hub nave_ metric series during the scenario.
	Hub map[string]float64 `json:"hubMetrics,omitempty"`
	// ToolCPU is the load tool's own CPU-seconds (clients and spokes) on
	// the same machine.
	ToolCPU float64 `json:"toolCPUSeconds"`
	Wall    float64 `json:"wallSeconds"`
	// ClientErrors counts proxy streams that failed.
	ClientErrors float64 `json:"clientErrors"`
}

// Titles name the scenarios.
var Titles = map[string]string{"S1": "cold connect", "S2": "fan-out", "S3": "endpoint churn", "S4": "spoke flap", "F1": "replica failover"}

// Median combines the results of several runs of the same scenario: every
// number is the median of the runs' (for an even count, the mean of the
// middle two).
func Median(runs []Result) Result {
	if len(runs) == 1 {
		r := runs[0]
		r.Runs = 1
		return r
	}
	med := func(get func(Result) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		sort.Float64s(v)
		if n := len(v); n%2 == 0 {
			return (v[n/2-1] + v[n/2]) / 2
		}
		return v[len(v)/2]
	}
	out := Result{Scenario: runs[0].Scenario, Mode: runs[0].Mode, Proxies: runs[0].Proxies, Services: runs[0].Services, Runs: len(runs),
		ByType: map[string]TypeCounts{}, Extra: map[string]float64{}, Hub: map[string]float64{}}
	out.Latency = Stats{
		N:    int(med(func(r Result) float64 { return float64(r.Latency.N) })),
		P50:  med(func(r Result) float64 { return r.Latency.P50 }),
		P99:  med(func(r Result) float64 { return r.Latency.P99 }),
		Max:  med(func(r Result) float64 { return r.Latency.Max }),
		Mean: med(func(r Result) float64 { return r.Latency.Mean }),
	}
	out.HubCPU = med(func(r Result) float64 { return r.HubCPU })
	out.PeakRSS = med(func(r Result) float64 { return r.PeakRSS })
	out.Bytes = med(func(r Result) float64 { return r.Bytes })
	out.ToolCPU = med(func(r Result) float64 { return r.ToolCPU })
	out.Wall = med(func(r Result) float64 { return r.Wall })
	out.ClientErrors = med(func(r Result) float64 { return r.ClientErrors })
	for _, r := range runs {
		for t := range r.ByType {
			out.ByType[t] = TypeCounts{
				Responses: med(func(r Result) float64 { return r.ByType[t].Responses }),
				Resources: med(func(r Result) float64 { return r.ByType[t].Resources }),
				Removed:   med(func(r Result) float64 { return r.ByType[t].Removed }),
				Bytes:     med(func(r Result) float64 { return r.ByType[t].Bytes }),
			}
		}
		for k := range r.Extra {
			out.Extra[k] = med(func(r Result) float64 { return r.Extra[k] })
		}
		for k := range r.Hub {
			out.Hub[k] = med(func(r Result) float64 { return r.Hub[k] })
		}
	}
	return out
}

// Notes describes the scenario-specific numbers in words.
func (r Result) Notes() string {
	e := r.Extra
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	switch r.Scenario {
	case "S1":
		add("fully ACKed %.0f/%d (the hub agrees for %.0f)", e["complete"], r.Proxies, e["hub_acked"])
		if e["load_seconds"] > 0 {
			add("before the proxies: every cluster synced and the mesh built %s after the spokes started", secs(e["load_seconds"]))
		}
		if e["sidecars"] > 0 {
			add("per sidecar %s (CDS %s/%.0f, EDS %s/%.0f, LDS %s/%.0f, RDS %s/%.0f)", mb(e["sidecar_bytes"]),
				mb(e["sidecar_CDS_bytes"]), e["sidecar_CDS_resources"], mb(e["sidecar_EDS_bytes"]), e["sidecar_EDS_resources"],
				mb(e["sidecar_LDS_bytes"]), e["sidecar_LDS_resources"], mb(e["sidecar_RDS_bytes"]), e["sidecar_RDS_resources"])
		}
	case "S2":
		add("%.0f edit(s); reached %.0f of %.0f holders; %.0f proxies received anything", e["edits"], e["reached"], e["holders"], e["proxies_received"])
		add("per proxy and edit: %.1f responses, %.1f resources (CDS %.1f, EDS %.1f, LDS %.1f, RDS %.1f), %s",
			e["responses_per_proxy"], e["resources_per_proxy"], e["CDS_resources_per_proxy"], e["EDS_resources_per_proxy"],
			e["LDS_resources_per_proxy"], e["RDS_resources_per_proxy"], mb(e["bytes_per_proxy"]))
	case "S3":
		add("%.0f moves at %.1f/s; seen %.0f of %.0f (missed %.0f)", e["moves"], e["rate"], e["observed"], e["expected"], e["missed"])
		add("EDS responses %.0f (%.0f without a new address, %.1f resources each)", e["eds_responses"], e["eds_responses_unneeded"], e["eds_resources_per_response"])
		add("other types %.0f responses", e["other_responses"])
		if e["unaffected_proxies"] > 0 {
			add("%.0f responses to %.0f unaffected proxies", e["unaffected_responses"], e["unaffected_proxies"])
		}
	case "S4":
		add("pushed %.0f responses, %.0f resources, %.0f removals", e["responses"], e["resources"], e["removals"])
		seen := "no"
		if e["hub_saw_disconnect"] > 0 {
			seen = "yes"
		}
		add("%.0f cluster(s) away; hub saw the outage: %s; resynced in %s", max(e["flapped"], 1), seen, secs(e["resync_seconds"]))
	case "F1":
		add("SIGKILL of %s: %s's membership dropped it after %s; its spoke synced on another replica after %s; its %.0f proxies reconnected %s after the kill to the others (latency: kill to fully ACKed)",
			ReplicaID(int(e["victim"])), ReplicaID(0), secs(e["detect_seconds"]), secs(e["rehome_seconds"]), e["reconnected"], secs(ReconnectDelay.Seconds()))
		add("the other proxies received %.0f responses, %.0f resources, %.0f removals", e["others_responses"], e["others_resources"], e["others_removals"])
	}
	if v, ok := e["hub_rss_start_mb"]; ok {
		add("hub RSS at start %.0f MB", v)
	}
	if v, ok := e["hub_alloc_mb"]; ok {
		add("hub allocated %.0f MB, %.0f collections (idle heap returned %.0f times before)", v, e["hub_gc_cycles"], e["hub_idle_releases_before"])
	}
	if v, ok := e["steady_idle_seconds"]; ok && e["replicas"] <= 1 {
		add("holding the workload took %.0f builds, %.2f CPU-s since the start; then idle for %s: CPU-s %.2f",
			e["steady_r0_load_builds"], e["steady_r0_load_cpu_s"], secs(v), e["steady_r0_idle_cpu_s"])
	}
	if n := int(e["replicas"]); n > 1 {
		add("%s", replicaNotes(e, n))
	}
	var gens []string
	for _, mode := range []string{"full", "endpoints", "reused", "rules"} {
		if v := r.Hub[`nave_proxy_generations_total{mode="`+mode+`"}`]; v > 0 {
			gens = append(gens, fmt.Sprintf("%s %.0f", mode, v))
		}
	}
	if len(gens) > 0 {
		add("hub generations: %s", strings.Join(gens, ", "))
	}
	if r.ClientErrors > 0 {
		add("%.0f PROXY STREAMS FAILED", r.ClientErrors)
	}
	return strings.Join(parts, "; ")
}

// replicaNotes describes each replica's share of a scenario (Extra
// "rK_…", "steady_rK_…"): proxies, CPU, peak RSS, relay and gossip rates,
// and on S1 the set's steady state before the proxies connected.
func replicaNotes(e map[string]float64, n int) string {
	// per lists replica 0..n-1's value of key (a format with the replica
	// number), scaled and formatted, separated by slashes.
	per := func(key, format string, scale float64) string {
		var v []string
		for i := range n {
			v = append(v, fmt.Sprintf(format, e[fmt.Sprintf(key, i)]*scale))
		}
		return strings.Join(v, "/")
	}
	s := fmt.Sprintf("%d replicas: proxies %s, CPU-s %s, allocated %s MB, %s collections (idle heap returned %s times before), peak RSS %s MB, relay sent %s KB/s, gossip sent %s KB/s", n,
		per("r%d_proxies", "%.0f", 1), per("r%d_cpu_s", "%.2f", 1), per("r%d_alloc_mb", "%.0f", 1), per("r%d_gc_cycles", "%.0f", 1),
		per("r%d_idle_releases_before", "%.0f", 1), per("r%d_peak_rss_mb", "%.0f", 1),
		per("r%d_relay_bytes_per_s", "%.1f", 1.0/1024), per("r%d_gossip_bytes_per_s", "%.2f", 1.0/1024))
	if _, ok := e["steady_initial_relay_bytes"]; ok {
		s += fmt.Sprintf("; before the proxies: workload held by every replica %s after the spokes started, "+
			"relay sent %s (%s KB per replica); then idle for %s: gossip sent %s KB/s, relay sent %s B/s, CPU-s %s",
			secs(e["steady_load_seconds"]), mb(e["steady_initial_relay_bytes"]), per("steady_r%d_initial_relay_bytes", "%.0f", 1.0/1024),
			secs(e["steady_idle_seconds"]), per("steady_r%d_idle_gossip_bytes_per_s", "%.2f", 1.0/1024),
			per("steady_r%d_idle_relay_bytes_per_s", "%.0f", 1), per("steady_r%d_idle_cpu_s", "%.2f", 1))
		if _, ok := e["steady_r0_load_builds"]; ok {
			s += fmt.Sprintf("; holding the workload took %s builds, %s CPU-s since the start",
				per("steady_r%d_load_builds", "%.0f", 1), per("steady_r%d_load_cpu_s", "%.2f", 1))
		}
	}
	return s
}

func mb(bytes float64) string {
	switch {
	case bytes >= 1<<20:
		return fmt.Sprintf("%.2f MB", bytes/(1<<20))
	case bytes >= 1<<10:
		return fmt.Sprintf("%.1f KB", bytes/(1<<10))
	}
	return fmt.Sprintf("%.0f B", bytes)
}

func secs(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d == 0:
		return "0"
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", s)
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", s)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", s*1e3)
	}
	return fmt.Sprintf("%.0fµs", s*1e6)
}

// WriteTable prints results as the table: one row per scenario,
// mode, service count and proxy count.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmode\tservices\tproxies\truns\tp50\tp99\tmax\thub CPU-s\thub peak RSS\tto proxies\tload tool CPU-s\tnotes")
	for _, r := range results {
		lat := [3]string{"-", "-", "-"}
		if r.Latency.N > 0 {
			lat = [3]string{secs(r.Latency.P50), secs(r.Latency.P99), secs(r.Latency.Max)}
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%.1f\t%.0f MB\t%s\t%.1f\t%s\n", r.Scenario, Titles[r.Scenario], r.Mode, r.Services, r.Proxies, r.Runs,
			lat[0], lat[1], lat[2], r.HubCPU, r.PeakRSS, mb(r.Bytes), r.ToolCPU, r.Notes())
	}
	return tw.Flush()
}
