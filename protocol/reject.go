package protocol

import (
	"fmt"
	"strings"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// Bounds of a RejectionStatus message: the names listed per reason and the
// reasons listed. Every rejection is in the status's details whatever its
// message shows.
const (
	namesPerReason = 3
	reasonsListed  = 10
)

// RejectionStatus is the error detail of a NACK that refuses resources,
// on either side of Push and Watch: InvalidArgument, every rejection in
// its details (a protocolv1.Rejections), and a message for people that
// groups the rejections by reason — "250 resource(s) rejected: mesh
// default has 20000 WorkloadEntry objects, its limit objectsPerKind is
// 20000 (ns-0/a, ns-0/b, ns-0/c and 247 more)" — so that one cause
// refusing many objects is one line, not one per object.
func RejectionStatus(rejections []*protocolv1.Rejection) *statuspb.Status {
	var reasons []string
	names := map[string][]string{}
	for _, r := range rejections {
		reason := r.GetReason()
		if _, ok := names[reason]; !ok {
			reasons = append(reasons, reason)
		}
		names[reason] = append(names[reason], r.GetName())
	}
	parts := make([]string, 0, min(len(reasons), reasonsListed)+1)
	for _, reason := range reasons[:min(len(reasons), reasonsListed)] {
		ns := names[reason]
		list := strings.Join(ns[:min(len(ns), namesPerReason)], ", ")
		if more := len(ns) - namesPerReason; more > 0 {
			list += fmt.Sprintf(" and %d more", more)
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", reason, list))
	}
	if more := len(reasons) - reasonsListed; more > 0 {
		parts = append(parts, fmt.Sprintf("%d more reasons", more))
	}
	st := &statuspb.Status{Code: int32(codes.InvalidArgument),
		Message: fmt.Sprintf("%d resource(s) rejected: %s", len(rejections), strings.Join(parts, "; "))}
	if d, err := anypb.New(&protocolv1.Rejections{Items: rejections}); err == nil {
		st.Details = []*anypb.Any{d}
	}
	return st
}
