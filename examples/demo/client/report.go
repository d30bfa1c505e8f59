package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// callLine is the JSON form of one call's outcome, one line per call with --json.
type callLine struct {
	Seq       int     `json:"seq"`
	Time      string  `json:"time"`
	Backend   string  `json:"backend"`
	Code      string  `json:"code"`
	Error     string  `json:"error"`
	LatencyMS float64 `json:"latency_ms"`
}

// jsonLines writes each outcome as one JSON line. Not safe for concurrent use.
type jsonLines struct {
	enc *json.Encoder
}

func newJSONLines(w io.Writer) *jsonLines { return &jsonLines{enc: json.NewEncoder(w)} }

func (j *jsonLines) record(o outcome) error {
	line := callLine{
		Seq:       o.seq,
		Time:      o.at.Format(time.RFC3339Nano),
		Backend:   o.backend,
		Code:      o.code.String(),
		Error:     o.err,
		LatencyMS: float64(o.latency.Microseconds()) / 1000,
	}
	if err := j.enc.Encode(line); err != nil {
		return fmt.Errorf("write call %d: %w", o.seq, err)
	}
	return nil
}

func (j *jsonLines) flush() error { return nil }

// barWidth is the number of '#' that stand for all the calls of a summary.
const barWidth = 20

// unnamed stands for a backend that answered without naming itself.
const unnamed = "(unnamed)"

// summary counts outcomes and, on each flush, writes one line about the calls since the
// previous flush: how many, how many succeeded, each backend's share with a bar, and the
// failures by code with the last error message. Not safe for concurrent use.
type summary struct {
	w        io.Writer
	now      func() time.Time
	calls    int
	ok       int
	backends map[string]int
	failures map[codes.Code]int
	lastErr  string
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, now: time.Now, backends: map[string]int{}, failures: map[codes.Code]int{}}
}

func (s *summary) record(o outcome) error {
	s.calls++
	if o.code != codes.OK {
		s.failures[o.code]++
		s.lastErr = o.err
		return nil
	}
	s.ok++
	name := o.backend
	if name == "" {
		name = unnamed
	}
	s.backends[name]++
	return nil
}

func (s *summary) flush() error {
	if s.calls == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s calls=%d ok=%d", s.now().Format(time.TimeOnly), s.calls, s.ok)
	for _, name := range slices.Sorted(maps.Keys(s.backends)) {
		n := s.backends[name]
		fmt.Fprintf(&b, "  %s %3d%% %s", name, share(n, s.calls, 100), strings.Repeat("#", share(n, s.calls, barWidth)))
	}
	if len(s.failures) > 0 {
		b.WriteString("  failed:")
		for _, code := range slices.Sorted(maps.Keys(s.failures)) {
			fmt.Fprintf(&b, " %s=%d", code, s.failures[code])
		}
		fmt.Fprintf(&b, " (last: %s)", clip(s.lastErr, 160))
	}
	b.WriteByte('\n')
	s.calls, s.ok, s.lastErr = 0, 0, ""
	clear(s.backends)
	clear(s.failures)
	if _, err := io.WriteString(s.w, b.String()); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// share returns n/total of scale, rounded to the nearest integer.
func share(n, total, scale int) int {
	return (n*scale*2 + total) / (total * 2)
}

// clip shortens s to at most limit bytes, marking the cut.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	return strings.ToValidUTF8(s[:limit], "") + "…"
}
