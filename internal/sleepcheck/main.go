// Command sleepcheck fails when a test sleeps where it should wait: a
// _test.go file may call time.Sleep only inside a testing/synctest bubble
// (a function literal passed to synctest.Test, where a sleep advances the
// fake clock), or as often as the allowlist names it, each line saying why
// that sleep is not a wait (a sampling rate, a measurement window, a
// real-world duration that is the scenario). Everything else waits on the
// event: internal/testwait. `make lint` runs it:
//
//	go run ./internal/sleepcheck [-allow internal/sleepcheck/allowlist.txt]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	allowFile := flag.String("allow", "internal/sleepcheck/allowlist.txt", "the allowlist")
	dir := flag.String("C", ".", "the repository to check")
	flag.Parse()
	if err := run(*dir, *allowFile); err != nil {
		fmt.Fprintln(os.Stderr, "sleepcheck:", err)
		os.Exit(1)
	}
}

func run(dir, allowFile string) error {
	text, err := os.ReadFile(filepath.Join(dir, allowFile))
	if err != nil {
		return err
	}
	allowed, err := parseAllowlist(string(text))
	if err != nil {
		return fmt.Errorf("%s: %w", allowFile, err)
	}
	out, err := exec.Command("git", "-C", dir, "ls-files", "*_test.go").Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	found := map[string][]int{}
	for _, path := range strings.Fields(string(out)) {
		src, err := os.ReadFile(filepath.Join(dir, path))
		if err != nil {
			return err
		}
		lines, err := sleeps(path, src)
		if err != nil {
			return err
		}
		if len(lines) > 0 {
			found[path] = lines
		}
	}
	bad, stale := compare(found, allowed, allowFile)
	for _, s := range stale {
		fmt.Fprintln(os.Stderr, "note:", s)
	}
	for _, b := range bad {
		fmt.Fprintln(os.Stderr, b)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d files sleep where they should wait on the event (internal/testwait)", len(bad))
	}
	return nil
}

// parseAllowlist reads "path: why" lines (# comments, blank lines) into
// how many sleeps each path may hold.
func parseAllowlist(text string) (map[string]int, error) {
	out := map[string]int{}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		path, why, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(why) == "" {
			return nil, fmt.Errorf("line %d: want \"path: why it is not a wait\", got %q", n+1, line)
		}
		out[strings.TrimSpace(path)]++
	}
	return out, nil
}

// compare lists the files with more sleeps than allowed (bad), and the
// allowlist lines that no longer have a sleep to stand for (stale: a note,
// not a failure, so that a sleep removed on one branch does not fail
// another's lint until the line goes).
func compare(found map[string][]int, allowed map[string]int, allowFile string) (bad, stale []string) {
	for path, lines := range found {
		if len(lines) > allowed[path] {
			var at []string
			for _, l := range lines {
				at = append(at, fmt.Sprintf("%s:%d", path, l))
			}
			bad = append(bad, fmt.Sprintf("%s: time.Sleep outside a synctest bubble (%s); %s allows %d: wait on the event (internal/testwait)",
				path, strings.Join(at, ", "), allowFile, allowed[path]))
		}
	}
	for path, n := range allowed {
		if len(found[path]) < n {
			stale = append(stale, fmt.Sprintf("%s: %s allows %d time.Sleep, the file has %d: drop the extra lines", path, allowFile, n, len(found[path])))
		}
	}
	sort.Strings(bad)
	sort.Strings(stale)
	return bad, stale
}
