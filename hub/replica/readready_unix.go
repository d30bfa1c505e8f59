//go:build unix

package replica

import (
	"io"
	"net"
	"syscall"

	"google.golang.org/grpc/mem"
)

// readyState is what ReadOnReady keeps of a connection across reads: its
// raw descriptor and one read's request and result, so that a read
// allocates nothing but the buffer it returns. Only the connection's
// reader (gRPC's, one goroutine) touches it.
type readyState struct {
	raw     syscall.RawConn
	read    func(fd uintptr) bool
	bufSize int
	pool    mem.BufferPool
	buf     *[]byte
	n       int
	err     error
}

// ReadOnReady waits until the connection has data and only then takes a
// buffer of bufSize from pool and reads into it. gRPC's server transport
// reads a bare TCP connection this way; a net.Conn of another type that
// offers this method (the optional interface of grpc's
// internal/transport/readyreader) is read this way too, and one without it
// through a bufio.Reader of its own: 32 KiB per connection, allocated at
// accept and held while the connection idles, which for a replica's
// hundreds of proxies is most of what it allocates beyond one hub's
// share (decision 051, "Fixed cost per replica"). A connection that is
// not a *net.TCPConn is read with a pooled buffer, as gRPC's blocking
// fallback does.
func (c *trackedConn) ReadOnReady(bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	s := c.ready
	if s == nil {
		tcp, ok := c.Conn.(*net.TCPConn)
		if !ok {
			return blockingRead(c.Conn, bufSize, pool)
		}
		raw, err := tcp.SyscallConn()
		if err != nil {
			return nil, 0, err
		}
		s = &readyState{raw: raw}
		s.read = func(fd uintptr) bool {
			s.buf = s.pool.Get(s.bufSize)
			s.n, s.err = syscall.Read(int(fd), *s.buf)
			if s.err != nil {
				s.pool.Put(s.buf)
				s.buf = nil
			}
			return s.err != syscall.EAGAIN && s.err != syscall.EWOULDBLOCK
		}
		c.ready = s
	}
	s.bufSize, s.pool = bufSize, pool
	err := s.raw.Read(s.read)
	buf, n, readErr := s.buf, s.n, s.err
	s.buf, s.pool, s.err = nil, nil, nil
	switch {
	case err != nil:
		if buf != nil {
			pool.Put(buf)
		}
		return nil, 0, err
	case readErr != nil:
		return nil, 0, readErr
	case n == 0:
		// A read of nothing is the peer's orderly close.
		pool.Put(buf)
		return nil, 0, io.EOF
	}
	return buf, n, nil
}

// blockingRead reads r into a buffer of bufSize from pool, as gRPC reads
// a connection that cannot wait for data before taking a buffer.
func blockingRead(r io.Reader, bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	buf := pool.Get(bufSize)
	n, err := r.Read(*buf)
	if err != nil {
		pool.Put(buf)
		return nil, 0, err
	}
	return buf, n, nil
}
