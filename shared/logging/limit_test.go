package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestLimitDropsAboveTheRateAndSaysHowMany: a burst passes, the rest are
// dropped until the budget refills; the next line says how many were.
func TestLimitDropsAboveTheRateAndSaysHowMany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(Limit(slog.NewTextHandler(&buf, nil), time.Second, 2)).With("listener", "x")
		for range 5 {
			log.Warn("tls handshake failed")
		}
		if n := strings.Count(buf.String(), "tls handshake failed"); n != 2 {
			t.Fatalf("%d lines of a burst of 5 passed, want 2:\n%s", n, buf.String())
		}
		time.Sleep(time.Second) // fake time: the budget refills one line
		log.Warn("tls handshake failed")
		log.Warn("tls handshake failed")
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 3 || !strings.Contains(lines[2], "suppressed=3") || !strings.Contains(lines[2], "listener=x") {
			t.Fatalf("after a second, want one more line saying suppressed=3:\n%s", buf.String())
		}
	})
}
