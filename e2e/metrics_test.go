package e2e

// Harness: what tests read of a process from outside: Prometheus
// metrics (and that each is documented) and resident memory.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/navemesh/nave/e2e/harness"
)

// scrape returns the sum of the samples of metric name at url.
func scrape(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// metric reads one counter or gauge value from a /metrics page.
func metric(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("%s: no metric %s", url, name)
}

// peakRSS is a process's high-water resident set, in MiB.
func peakRSS(pid int) float64 { return statusMiB(pid, "VmHWM:") }

// currentRSS is a process's resident set, in MiB.
func currentRSS(pid int) float64 { return statusMiB(pid, "VmRSS:") }

// statusMiB is a field of /proc/PID/status given in kB, in MiB (0 if
// unknown).
func statusMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field) {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// assertMetricsDocumented checks that every nave_ metric the pages expose
// is listed in docs/metrics.md.
func assertMetricsDocumented(t *testing.T, urls ...string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(harness.ModuleRoot(), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, url := range urls {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "# HELP nave_") {
				continue
			}
			name := strings.Fields(line)[2]
			if !strings.Contains(string(doc), "`"+name+"`") {
				missing = append(missing, name)
			}
		}
		resp.Body.Close()
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("docs/metrics.md does not list: %s", strings.Join(missing, ", "))
	}
}

// pushes sums nave_xds_pushes_total over every label.
func pushes(t *testing.T, h *hub) float64 {
	t.Helper()
	body, err := httpGet(h.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "nave_xds_pushes_total{") {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}
