package main

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// backendHeader is the response header in which nave-demo-backend names itself.
const backendHeader = "x-nave-backend"

// outcome is what one call came to.
type outcome struct {
	seq     int
	at      time.Time
	backend string // empty when the call failed
	code    codes.Code
	err     string
	latency time.Duration
}

// caller makes health calls on one channel. It is safe for concurrent use: it holds only
// values it does not change.
type caller struct {
	health  healthpb.HealthClient
	timeout time.Duration
	headers metadata.MD
}

func newCaller(conn grpc.ClientConnInterface, timeout time.Duration, headers metadata.MD) *caller {
	return &caller{health: healthpb.NewHealthClient(conn), timeout: timeout, headers: headers}
}

// call makes call number seq: a health Check with the request headers, under the call
// deadline.
func (c *caller) call(ctx context.Context, seq int) outcome {
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, c.headers.Copy()), c.timeout)
	defer cancel()
	var header metadata.MD
	o := outcome{seq: seq, at: time.Now()}
	_, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	o.latency = time.Since(o.at)
	o.code = status.Code(err)
	if err != nil {
		o.err = status.Convert(err).Message()
		return o
	}
	if v := header.Get(backendHeader); len(v) > 0 {
		o.backend = v[0]
	}
	return o
}
