package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func TestJSONLinePerCall(t *testing.T) {
	var buf bytes.Buffer
	j := newJSONLines(&buf)
	at := time.Date(2026, 5, 4, 3, 2, 1, 123456789, time.UTC)
	if err := j.record(outcome{seq: 7, at: at, backend: "echo-v1", code: codes.OK, latency: 1234567 * time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	if err := j.record(outcome{seq: 8, at: at, code: codes.Unavailable, err: "no healthy upstream", latency: 2 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	want := `{"seq":7,"time":"2026-05-04T03:02:01.123456789Z","backend":"echo-v1","code":"OK","error":"","latency_ms":1.234}
{"seq":8,"time":"2026-05-04T03:02:01.123456789Z","backend":"","code":"Unavailable","error":"no healthy upstream","latency_ms":2}
`
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
	for line := range strings.Lines(buf.String()) {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("line %q is not JSON: %v", line, err)
		}
	}
}

func TestSummaryOfCallsSinceLastFlush(t *testing.T) {
	var buf bytes.Buffer
	s := newSummary(&buf)
	s.now = func() time.Time { return time.Date(2026, 1, 1, 12, 30, 45, 0, time.UTC) }

	for i := range 20 {
		name := "echo-v1"
		if i%5 == 0 {
			name = "echo-v2"
		}
		s.record(outcome{backend: name, code: codes.OK})
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.record(outcome{backend: "echo-v3", code: codes.OK})
	}
	s.record(outcome{code: codes.DeadlineExceeded, err: "context deadline exceeded"})
	s.record(outcome{code: codes.Unavailable, err: "echo-v1: injected failure"})
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	// Nothing since the last flush: nothing written.
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}

	want := "12:30:45 calls=20 ok=20  echo-v1  80% ################  echo-v2  20% ####\n" +
		"12:30:45 calls=5 ok=3  echo-v3  60% ############  failed: DeadlineExceeded=1 Unavailable=1 (last: echo-v1: injected failure)\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestShareRounds(t *testing.T) {
	for _, tc := range []struct{ n, total, scale, want int }{
		{1, 3, 100, 33}, {2, 3, 100, 67}, {1, 2, 20, 10}, {1, 40, 20, 1}, {1, 41, 20, 0}, {7, 7, 20, 20},
	} {
		if got := share(tc.n, tc.total, tc.scale); got != tc.want {
			t.Errorf("share(%d, %d, %d) = %d, want %d", tc.n, tc.total, tc.scale, got, tc.want)
		}
	}
}
