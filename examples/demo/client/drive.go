package main

import (
	"context"
	"time"
)

// pacing says how often calls are made and summaries shown.
type pacing struct {
	interval time.Duration // between the starts of two calls
	count    int           // calls to make; 0 means no limit
	report   time.Duration // between two summaries; 0 means none
}

// sink receives the outcome of each call.
type sink interface {
	// record takes one call's outcome.
	record(outcome) error
	// flush shows what was recorded since the last flush, if anything.
	flush() error
}

// drive makes calls one after the other, one per interval, until ctx ends or p.count
// calls are made, hands each outcome to out, and flushes out every report interval and
// at the end. A call that ctx cut short is not recorded.
func drive(ctx context.Context, call func(context.Context, int) outcome, out sink, p pacing) error {
	next := time.NewTicker(p.interval)
	defer next.Stop()
	var report <-chan time.Time
	if p.report > 0 {
		t := time.NewTicker(p.report)
		defer t.Stop()
		report = t.C
	}
	for seq := 1; p.count == 0 || seq <= p.count; seq++ {
		o := call(ctx, seq)
		if ctx.Err() != nil {
			break
		}
		if err := out.record(o); err != nil {
			return err
		}
		if p.count != 0 && seq == p.count {
			break
		}
		if err := wait(ctx, next.C, report, out); err != nil {
			return err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return out.flush()
}

// wait blocks until the next call is due or ctx ends, flushing out on each report tick.
func wait(ctx context.Context, next, report <-chan time.Time, out sink) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-next:
			return nil
		case <-report:
			if err := out.flush(); err != nil {
				return err
			}
		}
	}
}
