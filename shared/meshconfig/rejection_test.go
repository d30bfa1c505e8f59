package meshconfig

import (
	"encoding/json"
	"testing"
	"time"
)

// TestRejectionJSON: where a rejection was read shows only for a file, and
// when only once set.
func TestRejectionJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		r    Rejection
		want string
	}{
		{Rejection{File: "a.yaml", Index: 0, Kind: "Gateway", Namespace: "ns", Name: "gw", Field: "spec", Reason: "r"},
			`{"file":"a.yaml","index":0,"kind":"Gateway","namespace":"ns","name":"gw","field":"spec","reason":"r"}`},
		{Rejection{File: "b.yaml", Index: -1, Reason: "not YAML"}, `{"file":"b.yaml","index":-1,"reason":"not YAML"}`},
		{Rejection{Kind: "VirtualService", Namespace: "ns", Name: "vs", Reason: "r", At: at},
			`{"kind":"VirtualService","namespace":"ns","name":"vs","reason":"r","at":"2026-11-25T10:00:00Z"}`},
	} {
		b, err := json.Marshal(tc.r)
		if err != nil || string(b) != tc.want {
			t.Errorf("%+v: %s, %v; want %s", tc.r, b, err, tc.want)
		}
	}
}
