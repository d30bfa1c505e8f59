package protocol

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// limitReason marks a stream the hub refused because its mesh is at one
// of its limits, apart from a message that exceeds a size limit (gRPC's
// own RESOURCE_EXHAUSTED, raised on either side).
const limitReason = "MESH_LIMIT_EXCEEDED"

// LimitError is the status a hub ends a stream with when the stream's
// mesh is at one of its limits (reason says which).
func LimitError(reason string) error {
	st, err := status.New(codes.ResourceExhausted, reason).WithDetails(&errdetails.ErrorInfo{Reason: limitReason, Domain: "nave.io"})
	if err != nil {
		// Only a detail that does not marshal fails; the code still says it.
		return status.Error(codes.ResourceExhausted, reason)
	}
	return st.Err()
}

// IsLimitError reports whether err is a hub's LimitError.
func IsLimitError(err error) bool {
	st, ok := status.FromError(err) // it unwraps
	if !ok || st.Code() != codes.ResourceExhausted {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == limitReason {
			return true
		}
	}
	return false
}
