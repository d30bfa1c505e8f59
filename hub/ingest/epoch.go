package ingest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Epoch orders the streams that have owned a cluster, across hub
// replicas: the time the owning replica opened the spoke's stream, then
// the replica's id to break ties. A stream (a spoke's, or a relay of one
// by a peer replica) whose epoch is before the cluster's current one is
// refused, so that a late relay from an old owner changes nothing after a
// failover (docs/decisions/015-replica-relay.md). A plain value.
type Epoch struct {
	// At is the owner's stream start, Unix nanoseconds; kept above the
	// previous epoch of the cluster on the replica that made it.
	At int64 `json:"at"`
	// Replica is the owner's replica id; "" for a single hub.
	Replica string `json:"replica,omitempty"`
}

// Before reports whether e is older than o.
func (e Epoch) Before(o Epoch) bool {
	if e.At != o.At {
		return e.At < o.At
	}
	return e.Replica < o.Replica
}

// IsZero reports whether e is the zero Epoch (no stream yet).
func (e Epoch) IsZero() bool { return e == Epoch{} }

// String is e's wire form, "AT@REPLICA".
func (e Epoch) String() string { return strconv.FormatInt(e.At, 10) + "@" + e.Replica }

// Time is e.At as a time.
func (e Epoch) Time() time.Time { return time.Unix(0, e.At) }

// ParseEpoch parses Epoch.String's form.
func ParseEpoch(s string) (Epoch, error) {
	at, replica, ok := strings.Cut(s, "@")
	if !ok {
		return Epoch{}, fmt.Errorf("epoch %q: want AT@REPLICA", s)
	}
	n, err := strconv.ParseInt(at, 10, 64)
	if err != nil || n <= 0 {
		return Epoch{}, fmt.Errorf("epoch %q: AT must be a positive integer (Unix nanoseconds)", s)
	}
	if replica != "" && !labelRE.MatchString(replica) {
		return Epoch{}, fmt.Errorf("epoch %q: replica %q is not a DNS label", s, replica)
	}
	return Epoch{At: n, Replica: replica}, nil
}
