package replica

import (
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// countingTransport counts the gossip bytes this replica sends (packets
// and streams).
type countingTransport struct {
	*memberlist.NetTransport
	sent prometheus.Counter
}

func (t *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	t.sent.Add(float64(len(b)))
	return t.NetTransport.WriteTo(b, addr)
}

func (t *countingTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	t.sent.Add(float64(len(b)))
	return t.NetTransport.WriteToAddress(b, a)
}

func (t *countingTransport) DialTimeout(addr string, d time.Duration) (net.Conn, error) {
	c, err := t.NetTransport.DialTimeout(addr, d)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, sent: t.sent}, nil
}

func (t *countingTransport) DialAddressTimeout(a memberlist.Address, d time.Duration) (net.Conn, error) {
	c, err := t.NetTransport.DialAddressTimeout(a, d)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, sent: t.sent}, nil
}

type countingConn struct {
	net.Conn
	sent prometheus.Counter
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent.Add(float64(n))
	return n, err
}
