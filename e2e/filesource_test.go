package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
)

// blockServiceEntry is a ServiceEntry for host in block style, one field a
// line as an editor writes it, with an endpoint on 127.0.0.1 at each grpc
// port.
func blockServiceEntry(name, host string, ports ...int) string {
	doc := fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: %s\n  namespace: demo\n"+
		"spec:\n  hosts:\n  - %s\n  ports:\n  - number: 7070\n    name: grpc\n    protocol: GRPC\n  resolution: STATIC\n"+
		"  endpoints:\n", name, host)
	for _, p := range ports {
		doc += fmt.Sprintf("  - address: 127.0.0.1\n    ports: {grpc: %d}\n", p)
	}
	return doc
}

// TestFilesCutSaveNeverShrinksAService saves a file in place as a
// non-atomic editor does, pausing once the spoke has held the removals of
// what it read (the cut file, or the empty one at the save's first event),
// at each cut point a line boundary allows; a poller of the hub's
// /debug/services sees every endpoint throughout.
func TestFilesCutSaveNeverShrinksAService(t *testing.T) {
	h := newHub(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	whole := blockServiceEntry("web", "web.demo.mesh", 1111, 1199) + "---\n" + blockServiceEntry("api", "api.demo.mesh", 2111)
	writeFile(t, path, whole)
	// A long window: the save completes well within it once the spoke has
	// read the cut file.
	sp := newSpoke(t, h, "c1", dir, "--files.debounce", "1s")
	waitEndpoints(t, h, "web.demo.mesh", "c1//1111/healthy//", "c1//1199/healthy//")
	waitEndpoints(t, h, "api.demo.mesh", "c1//2111/healthy//")

	for _, cut := range []struct{ name, at, log string }{
		{"before an endpoint", "  - address: 127.0.0.1\n    ports: {grpc: 1199}\n", "config update that removes content deferred"},
		{"before endpoints", "  endpoints:\n", "config update that removes content deferred"},
		{"at a document boundary", "---\n", "config withdrawal deferred"},
	} {
		t.Run(cut.name, func(t *testing.T) {
			var (
				mu     sync.Mutex
				shrunk []string
			)
			stop := make(chan struct{})
			polled := make(chan struct{})
			go func() {
				defer close(polled)
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					web, errWeb := hubEndpoints(h, "web.demo.mesh")
					api, errAPI := hubEndpoints(h, "api.demo.mesh")
					if errWeb != nil || errAPI != nil || len(web) < 2 || len(api) < 1 {
						mu.Lock()
						shrunk = append(shrunk, fmt.Sprintf("web %v (%v), api %v (%v)", web, errWeb, api, errAPI))
						mu.Unlock()
					}
				}
			}()

			deferred := strings.Count(sp.proc.Log(), cut.log)
			loaded := strings.Count(sp.proc.Log(), "config loaded")
			i := strings.Index(whole, cut.at)
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(whole[:i]); err != nil {
				t.Fatal(err)
			}
			// The spoke reads the file at the save's first event (the
			// leading edge: it may find it empty) and again once the
			// events are quiet (the cut): either read removes content,
			// and the removal is held. Wait for that hold, and for the
			// reload that logged it to end.
			testwait.Until(t, "the spoke to hold the removals of the cut file", func() bool {
				log := sp.proc.Log()
				return strings.Count(log, cut.log) > deferred && strings.Count(log, "config loaded") > loaded
			})
			loaded = strings.Count(sp.proc.Log(), "config loaded")
			if _, err := f.WriteString(whole[i:]); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			// The completed file is the old one: the spoke holds nothing
			// once it has reloaded it.
			testwait.Until(t, "the reload of the completed file", func() bool { return strings.Count(sp.proc.Log(), "config loaded") > loaded })
			close(stop)
			<-polled
			waitEndpoints(t, h, "web.demo.mesh", "c1//1111/healthy//", "c1//1199/healthy//")
			mu.Lock()
			defer mu.Unlock()
			if len(shrunk) > 0 {
				t.Fatalf("the hub served a shrunken service %d times during the save, first: %s", len(shrunk), shrunk[0])
			}
		})
	}
}

// TestFilesDuplicateWinnerSurvivesRestart: of two files holding the same
// object, the first in path order wins, whether it was there first or
// came later, and a restarted spoke serves the same.
func TestFilesDuplicateWinnerSurvivesRestart(t *testing.T) {
	h := newHub(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), serviceEntry("web", "web.demo.mesh", 1001))
	sp := newSpoke(t, h, "c1", dir)
	waitEndpoints(t, h, "web.demo.mesh", "c1//1001/healthy//")

	rejected := func(sp *spoke, want string) {
		t.Helper()
		testwait.For(t, 30*time.Second, func() error {
			var rs []struct {
				File string `json:"file"`
			}
			if err := harness.GetJSON(sp.url("/debug/rejected"), &rs); err != nil {
				return err
			}
			var files []string
			for _, r := range rs {
				files = append(files, r.File)
			}
			if got := strings.Join(files, " "); got != want {
				return fmt.Errorf("spoke rejected [%s], want [%s]", got, want)
			}
			return nil
		})
	}

	// A newcomer that sorts after a.yaml is rejected.
	writeFile(t, filepath.Join(dir, "zz-dup.yaml"), serviceEntry("web", "web.demo.mesh", 1002))
	rejected(sp, "zz-dup.yaml")
	waitEndpoints(t, h, "web.demo.mesh", "c1//1001/healthy//")

	// A newcomer that sorts first takes over, loudly.
	writeFile(t, filepath.Join(dir, "00-dup.yaml"), serviceEntry("web", "web.demo.mesh", 1000))
	waitEndpoints(t, h, "web.demo.mesh", "c1//1000/healthy//")
	rejected(sp, "a.yaml zz-dup.yaml")
	if !strings.Contains(sp.proc.Log(), "duplicate config object takes over") {
		t.Errorf("the takeover was not logged")
	}

	// A restart in the middle changes nothing.
	sp.proc.Stop(5 * time.Second)
	sp = newSpoke(t, h, "c1", dir)
	rejected(sp, "a.yaml zz-dup.yaml")
	waitEndpoints(t, h, "web.demo.mesh", "c1//1000/healthy//")
}
