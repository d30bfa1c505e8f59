package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// recorder is a sink that remembers what it was given.
type recorder struct {
	seqs    []int
	flushes int
}

func (l *recorder) record(o outcome) error { l.seqs = append(l.seqs, o.seq); return nil }
func (l *recorder) flush() error           { l.flushes++; return nil }

func okCall(_ context.Context, seq int) outcome { return outcome{seq: seq, code: codes.OK} }

func TestDriveStopsAfterCount(t *testing.T) {
	var l recorder
	if err := drive(context.Background(), okCall, &l, pacing{interval: time.Millisecond, count: 5}); err != nil {
		t.Fatal(err)
	}
	if len(l.seqs) != 5 || l.seqs[0] != 1 || l.seqs[4] != 5 {
		t.Errorf("recorded calls %v, want 1..5", l.seqs)
	}
	if l.flushes != 1 {
		t.Errorf("%d flushes, want the final one", l.flushes)
	}
}

func TestDriveStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var l recorder
	call := func(ctx context.Context, seq int) outcome {
		if seq == 3 {
			cancel() // a call cut short by the shutdown is not recorded
		}
		return okCall(ctx, seq)
	}
	done := make(chan error, 1)
	go func() { done <- drive(ctx, call, &l, pacing{interval: time.Millisecond, report: time.Hour}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drive did not return after its context ended")
	}
	if len(l.seqs) != 2 {
		t.Errorf("recorded calls %v, want [1 2]", l.seqs)
	}
	if l.flushes != 1 {
		t.Errorf("%d flushes, want the final one", l.flushes)
	}
}

func TestDriveFlushesEveryReport(t *testing.T) {
	var l recorder
	// Calls every 20ms for 30 calls (at least 580ms), a report every 50ms: several flushes.
	if err := drive(context.Background(), okCall, &l, pacing{interval: 20 * time.Millisecond, count: 30, report: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if l.flushes < 3 {
		t.Errorf("%d flushes over at least 580ms with a 50ms report interval, want several", l.flushes)
	}
}
