package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// probe is one readiness endpoint to poll.
type probe struct {
	name  string // the child it belongs to
	url   string
	where string // where the child's output is, for the error message
}

// pollInterval is the time between two rounds of readiness requests.
const pollInterval = 100 * time.Millisecond

// waitReady polls every probe until each has answered 200, and fails when timeout passes
// first, naming each probe that was not ready and its last answer. It returns ctx's error
// if ctx ends first.
func waitReady(ctx context.Context, probes []probe, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	client := &http.Client{Timeout: time.Second}
	last := map[string]error{}
	pending := slices.Clone(probes)
	for {
		pending = slices.DeleteFunc(pending, func(p probe) bool {
			last[p.name] = get(ctx, client, p.url)
			return last[p.name] == nil
		})
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			var b strings.Builder
			for i, p := range pending {
				if i > 0 {
					b.WriteString("; ")
				}
				fmt.Fprintf(&b, "%s (GET %s: %v; %s)", p.name, p.url, last[p.name], p.where)
			}
			return fmt.Errorf("not ready after %v: %s", timeout, b.String())
		case <-tick.C:
		}
	}
}

// get returns nil when url answers 200 OK.
func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}
