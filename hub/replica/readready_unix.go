//go:build unix

package replica

import (
	"io"
	"net"
	"syscall"

	"google.golang.org/grpc/mem"
)

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
	tcp, ok := c.Conn.(*net.TCPConn)
	if !ok {
		return blockingRead(c.Conn, bufSize, pool)
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return nil, 0, err
	}
	var (
		buf     *[]byte
		n       int
		readErr error
	)
	err = raw.Read(func(fd uintptr) bool {
		buf = pool.Get(bufSize)
		n, readErr = syscall.Read(int(fd), *buf)
		if readErr != nil {
			pool.Put(buf)
			buf = nil
		}
		return readErr != syscall.EAGAIN && readErr != syscall.EWOULDBLOCK
	})
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
