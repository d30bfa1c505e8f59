package protocol

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestLimitError(t *testing.T) {
	err := LimitError("mesh a holds 3 clusters")
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "mesh a holds 3 clusters" {
		t.Errorf("LimitError = %v, want RESOURCE_EXHAUSTED with the reason", err)
	}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{err, true},
		{fmt.Errorf("stream: %w", err), true},
		// gRPC's own size limit is RESOURCE_EXHAUSTED too, and no limit of the mesh.
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5 vs. 4)"), false},
		{status.Error(codes.FailedPrecondition, "mesh a holds 3 clusters"), false},
		{fmt.Errorf("plain"), false},
		{nil, false},
	} {
		if got := IsLimitError(tt.err); got != tt.want {
			t.Errorf("IsLimitError(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
