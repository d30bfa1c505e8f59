//go:build unix

package replica_test

import (
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc/mem"

	"github.com/navemesh/nave/hub/replica"
)

// readyReader is the optional interface of a net.Conn that gRPC's server
// transport reads by waiting for data before taking a buffer (grpc's
// internal/transport/readyreader.Reader), as it reads a bare TCP
// connection; without it a tracked connection would cost a 32 KiB read
// buffer of its own for as long as it is open.
type readyReader interface {
	ReadOnReady(bufSize int, pool mem.BufferPool) (*[]byte, int, error)
}

// TestTrackedConnectionIsReadWhenReady: a tracked connection offers gRPC's
// non-pinning read, which returns what the peer wrote in a pooled buffer
// and io.EOF once the peer has closed.
func TestTrackedConnectionIsReadWhenReady(t *testing.T) {
	l := replica.Track(listen(t))
	defer l.Close()
	clients, server := connectTracked(t, l, 1)
	rr, ok := server[0].(readyReader)
	if !ok {
		t.Fatalf("a tracked connection (%T) has no ReadOnReady: gRPC would read it through a buffer of its own", server[0])
	}
	if _, err := clients[0].Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	pool := mem.DefaultBufferPool()
	buf, n, err := rr.ReadOnReady(64, pool)
	if err != nil {
		t.Fatalf("ReadOnReady: %v", err)
	}
	if got := string((*buf)[:n]); got != "hello" {
		t.Fatalf("ReadOnReady read %q, want hello", got)
	}
	pool.Put(buf)
	clients[0].Close()
	if buf, _, err := rr.ReadOnReady(64, pool); !errors.Is(err, io.EOF) || buf != nil {
		t.Fatalf("after the peer closed: ReadOnReady = %v, %v; want no buffer, io.EOF", buf, err)
	}
}
