package replica

import (
	"io"

	"google.golang.org/grpc/mem"
)

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
