package protocol

import (
	"fmt"
	"testing"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

func TestRejectionStatusGroupsByReason(t *testing.T) {
	var rs []*protocolv1.Rejection
	for i := range 250 {
		rs = append(rs, &protocolv1.Rejection{Name: fmt.Sprintf("ns-0/e-%d", i), Reason: "mesh m has 20000 WorkloadEntry objects, its limit objectsPerKind is 20000"})
	}
	rs = append(rs, &protocolv1.Rejection{Name: "ns-1/vs", Reason: "spec.http[0]: route required"})
	st := RejectionStatus(rs)
	want := "251 resource(s) rejected: mesh m has 20000 WorkloadEntry objects, its limit objectsPerKind is 20000 " +
		"(ns-0/e-0, ns-0/e-1, ns-0/e-2 and 247 more); spec.http[0]: route required (ns-1/vs)"
	if st.GetMessage() != want {
		t.Errorf("message\n got %q\nwant %q", st.GetMessage(), want)
	}
	var detail protocolv1.Rejections
	if len(st.GetDetails()) != 1 || st.GetDetails()[0].UnmarshalTo(&detail) != nil || len(detail.GetItems()) != 251 {
		t.Errorf("details do not hold every rejection: %v", st.GetDetails())
	}

	var many []*protocolv1.Rejection
	for i := range 12 {
		many = append(many, &protocolv1.Rejection{Name: fmt.Sprintf("o-%d", i), Reason: fmt.Sprintf("reason %d", i)})
	}
	if got, want := RejectionStatus(many).GetMessage(), "(o-9); 2 more reasons"; len(got) < len(want) || got[len(got)-len(want):] != want {
		t.Errorf("12 reasons: message %q does not end with %q", got, want)
	}
}
