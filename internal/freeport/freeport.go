// Package freeport hands out loopback TCP ports for what a test starts on
// an address of its choosing (a process's flags, a server's config): a
// port that was free a moment ago, never handed out twice by this
// process, and below the kernel's ephemeral range (32768 and up on
// Linux), so that it is not taken in the meantime by the source port of
// some outgoing connection or by a listener bound to port 0 — in this
// process or in another package's test binary running beside it. Where
// the code under test can take a listener, bind one to port 0 instead.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// The ports handed out: from low up to, not including, high.
const low, high = 20000, 32000

var (
	mu        sync.Mutex
	handedOut = map[int]bool{}
)

// Port returns a loopback TCP port that was free a moment ago and that
// this process has not handed out before. It is safe for concurrent use.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		p := low + rand.IntN(high-low)
		if handedOut[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		handedOut[p] = true
		return p, nil
	}
	return 0, errors.New("no free port between 20000 and 32000")
}

// Addr is Port as a host:port on 127.0.0.1.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}
