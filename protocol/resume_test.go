package protocol

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

const (
	vsURL = "type.googleapis.com/istio.networking.v1alpha3.VirtualService"
	drURL = "type.googleapis.com/istio.networking.v1alpha3.DestinationRule"
)

func TestHintMessagesRoundTrip(t *testing.T) {
	held := Held{vsURL: {}, drURL: {}}
	for i := range 1000 {
		held[vsURL][fmt.Sprintf("ns%d/vs-%04d", i%7, i)] = fmt.Sprintf("%016x", i)
	}
	held[drURL]["demo/echo"] = "abc"
	held["type.googleapis.com/empty.Type"] = map[string]string{}

	for _, budget := range []int{0, 1 << 20, 2000} {
		msgs := HintMessages(held, nil, budget)
		if budget == 2000 && len(msgs) < 10 {
			t.Errorf("budget %d: %d messages, want the VirtualServices split", budget, len(msgs))
		}
		if budget != 2000 && len(msgs) != 2 {
			t.Errorf("budget %d: %d messages, want one per non-empty type", budget, len(msgs))
		}
		for i, m := range msgs {
			if budget > 0 && proto.Size(m) > budget+budget/4 {
				t.Errorf("budget %d: message %d is %d bytes", budget, i, proto.Size(m))
			}
			if i > 0 && msgs[i-1].GetTypeUrl() > m.GetTypeUrl() {
				t.Errorf("budget %d: types out of order: %s after %s", budget, m.GetTypeUrl(), msgs[i-1].GetTypeUrl())
			}
		}
		got, resumed, err := ReadResume(replay(append(msgs, ResumeAnswer("1", ""))), "1", nil)
		if err != nil || !resumed {
			t.Fatalf("budget %d: ReadResume = %v, %v", budget, resumed, err)
		}
		if got.Count() != 1001 || !maps.Equal(got[vsURL], held[vsURL]) || !maps.Equal(got[drURL], held[drURL]) {
			t.Errorf("budget %d: read back %d resources, want what was held (1001)", budget, got.Count())
		}
	}
}

// TestHintFitsSixteenThousand: the load benchmark's 1,000 services × 15
// endpoints (16,000 names) fit a default limit's half in a few messages.
func TestHintFitsSixteenThousand(t *testing.T) {
	held := Held{vsURL: {}}
	for i := range 16000 {
		held[vsURL][fmt.Sprintf("namespace-%03d/workload-%05d-abcdefgh", i%100, i)] = fmt.Sprintf("%016x", i)
	}
	msgs := HintMessages(held, nil, 8<<20)
	if len(msgs) != 1 {
		t.Errorf("16,000 names in %d messages, want 1 under 8 MiB", len(msgs))
	}
	total := 0
	for _, m := range msgs {
		total += proto.Size(m)
	}
	if total >= 8<<20 {
		t.Errorf("hint is %d bytes", total)
	}
	t.Logf("16,000 names and versions: %d bytes in %d message(s)", total, len(msgs))
}

func TestReadResumeRefusedMeansFull(t *testing.T) {
	for name, answer := range map[string]*discoveryv3.DeltaDiscoveryRequest{
		"no complete state": ResumeAnswer("1", "no state"),
		"older hub":         NackOf("1"),
	} {
		held, resumed, err := ReadResume(replay([]*discoveryv3.DeltaDiscoveryRequest{answer}), "1", nil)
		if err != nil || resumed || held != nil {
			t.Errorf("%s: ReadResume = %v, %v, %v; want full state", name, held, resumed, err)
		}
	}
}

// NackOf is what an older hub answers to a message of a type it does not
// know.
func NackOf(nonce string) *discoveryv3.DeltaDiscoveryRequest {
	return &discoveryv3.DeltaDiscoveryRequest{TypeUrl: ResumeTypeURL, ResponseNonce: nonce, ErrorDetail: &statusProto{Code: 3, Message: `unknown type URL`}}
}

func TestReadResumeRefusesBadHints(t *testing.T) {
	long := strings.Repeat("a", MaxNameLength)
	for name, h := range map[string]*discoveryv3.DeltaDiscoveryRequest{
		"no type":       {InitialResourceVersions: map[string]string{"a/b": "1"}},
		"foreign type":  {TypeUrl: "example.com/x", InitialResourceVersions: map[string]string{"a/b": "1"}},
		"synced type":   {TypeUrl: SyncedTypeURL, InitialResourceVersions: map[string]string{"a/b": "1"}},
		"other nonce":   {TypeUrl: vsURL, ResponseNonce: "7"},
		"with error":    {TypeUrl: vsURL, ErrorDetail: &statusProto{Code: 3}},
		"no namespace":  {TypeUrl: vsURL, InitialResourceVersions: map[string]string{"b": "1"}},
		"three parts":   {TypeUrl: vsURL, InitialResourceVersions: map[string]string{"a/b/c": "1"}},
		"no version":    {TypeUrl: vsURL, InitialResourceVersions: map[string]string{"a/b": ""}},
		"long name":     {TypeUrl: vsURL, InitialResourceVersions: map[string]string{"a/" + long: "1"}},
		"long version":  {TypeUrl: vsURL, InitialResourceVersions: map[string]string{"a/b": strings.Repeat("v", MaxVersionLength+1)}},
		"empty name ns": {TypeUrl: vsURL, InitialResourceVersions: map[string]string{"/b": "1"}},
	} {
		_, _, err := ReadResume(replay([]*discoveryv3.DeltaDiscoveryRequest{h, ResumeAnswer("1", "")}), "1", nil)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if he := (*HintError)(nil); h.GetResponseNonce() == "" && !errors.As(err, &he) {
			t.Errorf("%s: error %T %v, want a *HintError", name, err, err)
		}
	}
	// A name given twice with two versions is refused; twice the same is fine.
	twice := []*discoveryv3.DeltaDiscoveryRequest{
		{TypeUrl: vsURL, InitialResourceVersions: map[string]string{"a/b": "1"}},
		{TypeUrl: vsURL, InitialResourceVersions: map[string]string{"a/b": "1"}},
	}
	if _, _, err := ReadResume(replay(append(twice, ResumeAnswer("1", ""))), "1", nil); err != nil {
		t.Errorf("a name repeated with one version: %v", err)
	}
	twice[1].InitialResourceVersions["a/b"] = "2"
	if _, _, err := ReadResume(replay(append(twice, ResumeAnswer("1", ""))), "1", nil); err == nil {
		t.Error("a name given with two versions was accepted")
	}
	if _, _, err := ReadResume(replay(nil), "1", nil); !errors.Is(err, io.EOF) {
		t.Errorf("a stream that ends before the answer: %v, want EOF", err)
	}
}

// TestDigestedHints: a type the receiver holds exactly as the sender
// digested it is hinted by its digest alone; one that differs is named in
// full; either way the sender reads back exactly what the receiver holds.
func TestDigestedHints(t *testing.T) {
	held := Held{vsURL: {}, drURL: {"demo/echo": "d1", "demo/gone": "d2"}}
	for i := range 500 {
		held[vsURL][fmt.Sprintf("ns/vs-%03d", i)] = fmt.Sprintf("%016x", i)
	}
	mine := Held{vsURL: maps.Clone(held[vsURL]), drURL: {"demo/echo": "d1-changed"}, "type.googleapis.com/only.Mine": {"a/b": "1"}}
	resume := ResumeMessage(mine)
	if len(resume.GetResources()) != 3 || resume.GetTypeUrl() != ResumeTypeURL {
		t.Fatalf("Resume message %v: want a digest per type", resume)
	}
	msgs := HintMessages(held, Digests(resume), 0)
	if len(msgs) != 2 {
		t.Fatalf("%d hint messages, want 2", len(msgs))
	}
	for _, m := range msgs {
		switch m.GetTypeUrl() {
		case vsURL:
			if len(m.GetInitialResourceVersions()) != 1 || m.GetInitialResourceVersions()[HeldAsDigested] != Digest(mine[vsURL]) {
				t.Errorf("the unchanged type was hinted as %d entries, want its digest alone", len(m.GetInitialResourceVersions()))
			}
		case drURL:
			if !maps.Equal(m.GetInitialResourceVersions(), held[drURL]) {
				t.Errorf("the changed type was hinted as %v, want its names and versions", m.GetInitialResourceVersions())
			}
		}
	}
	if total := proto.Size(msgs[0]) + proto.Size(msgs[1]); total > 300 {
		t.Errorf("hint is %d bytes for 500 unchanged and 2 changed resources", total)
	}
	got, resumed, err := ReadResume(replay(append(msgs, ResumeAnswer("1", ""))), "1", mine)
	if err != nil || !resumed {
		t.Fatalf("ReadResume = %v, %v", resumed, err)
	}
	if got.Count() != 502 || !maps.Equal(got[vsURL], held[vsURL]) || !maps.Equal(got[drURL], held[drURL]) || got["type.googleapis.com/only.Mine"] != nil {
		t.Errorf("read back %v, want what the receiver holds", got)
	}
	// Reading back hands out a copy: the sender's diff may change it.
	got[vsURL]["ns/vs-000"] = "x"
	if mine[vsURL]["ns/vs-000"] == "x" {
		t.Error("the read-back state shares the sender's map")
	}

	for name, h := range map[string]*discoveryv3.DeltaDiscoveryRequest{
		"another digest":   {TypeUrl: vsURL, InitialResourceVersions: map[string]string{HeldAsDigested: Digest(held[drURL])}},
		"digest and names": {TypeUrl: vsURL, InitialResourceVersions: map[string]string{HeldAsDigested: Digest(mine[vsURL]), "a/b": "1"}},
		"a type not mine":  {TypeUrl: "type.googleapis.com/not.Mine", InitialResourceVersions: map[string]string{HeldAsDigested: Digest(nil)}},
	} {
		if _, _, err := ReadResume(replay([]*discoveryv3.DeltaDiscoveryRequest{h, ResumeAnswer("1", "")}), "1", mine); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	twice := []*discoveryv3.DeltaDiscoveryRequest{msgs[1], msgs[1], ResumeAnswer("1", "")}
	if msgs[1].GetTypeUrl() != vsURL {
		twice[0], twice[1] = msgs[0], msgs[0]
	}
	if _, _, err := ReadResume(replay(twice), "1", mine); err == nil {
		t.Error("a type hinted by digest twice was accepted")
	}
	if d := Digests(&discoveryv3.DeltaDiscoveryResponse{Resources: []*discoveryv3.Resource{{Name: "not a type", Version: Digest(nil)}, {Name: vsURL, Version: "short"}}}); len(d) != 0 {
		t.Errorf("Digests kept malformed entries: %v", d)
	}
}

// replay returns a recv func that gives msgs, then io.EOF.
func replay(msgs []*discoveryv3.DeltaDiscoveryRequest) func() (*discoveryv3.DeltaDiscoveryRequest, error) {
	return func() (*discoveryv3.DeltaDiscoveryRequest, error) {
		if len(msgs) == 0 {
			return nil, io.EOF
		}
		m := msgs[0]
		msgs = msgs[1:]
		return m, nil
	}
}

// fuzzMine is what FuzzAddHint's sender digested.
var fuzzMine = Held{drURL: {"demo/echo": "1", "demo/beta": "2"}}

// FuzzAddHint feeds arbitrary bytes as a hub's hint message: parsing never
// panics, an error leaves what is held unchanged, and what is accepted is
// a well-formed name with a version that reads back as sent.
func FuzzAddHint(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var req discoveryv3.DeltaDiscoveryRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		held := Held{vsURL: {"demo/echo": "1"}}
		err := AddHint(held, &req, fuzzMine)
		if err != nil {
			if he := (*HintError)(nil); !errors.As(err, &he) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			if held.Count() != 1 || held[vsURL]["demo/echo"] != "1" {
				t.Fatalf("a refused hint changed what is held: %v", held)
			}
			return
		}
		if _, ok := req.GetInitialResourceVersions()[HeldAsDigested]; ok {
			if !maps.Equal(held[req.GetTypeUrl()], fuzzMine[req.GetTypeUrl()]) {
				t.Fatalf("a digest hint gave %v, want the sender's %v", held[req.GetTypeUrl()], fuzzMine[req.GetTypeUrl()])
			}
			return
		}
		for n, v := range req.GetInitialResourceVersions() {
			if !validName(n) || v == "" || len(n) > MaxNameLength || len(v) > MaxVersionLength {
				t.Fatalf("accepted %q = %q", n, v)
			}
			if held[req.GetTypeUrl()][n] != v {
				t.Fatalf("%q reads back %q, want %q", n, held[req.GetTypeUrl()][n], v)
			}
		}
	})
}

// TestWriteHintFuzzSeeds regenerates the committed seed corpus of
// FuzzAddHint when NAVE_WRITE_SEEDS=1; otherwise it checks it is present.
func TestWriteHintFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzAddHint")
	if os.Getenv("NAVE_WRITE_SEEDS") != "1" {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) < 5 {
			t.Fatalf("seed corpus %s missing or small (%d): run NAVE_WRITE_SEEDS=1 go test -run TestWriteHintFuzzSeeds ./protocol", dir, len(entries))
		}
		return
	}
	msgs := map[string]*discoveryv3.DeltaDiscoveryRequest{
		"valid":      {TypeUrl: vsURL, InitialResourceVersions: map[string]string{"demo/echo": "1", "demo/beta": "0123456789abcdef"}},
		"conflict":   {TypeUrl: vsURL, InitialResourceVersions: map[string]string{"demo/echo": "2"}},
		"badname":    {TypeUrl: drURL, InitialResourceVersions: map[string]string{"echo": "1"}},
		"noversion":  {TypeUrl: drURL, InitialResourceVersions: map[string]string{"demo/echo": ""}},
		"answer":     ResumeAnswer("1", ""),
		"refusal":    ResumeAnswer("1", "no complete state"),
		"synced":     {TypeUrl: SyncedTypeURL, InitialResourceVersions: map[string]string{"a/b": "1"}},
		"emptytype":  {InitialResourceVersions: map[string]string{"a/b": "1"}},
		"emptyhint":  {TypeUrl: drURL},
		"longname":   {TypeUrl: drURL, InitialResourceVersions: map[string]string{"a/" + strings.Repeat("n", 600): "1"}},
		"threeparts": {TypeUrl: drURL, InitialResourceVersions: map[string]string{"a/b/c": "1"}},
		"digested":   {TypeUrl: drURL, InitialResourceVersions: map[string]string{HeldAsDigested: Digest(fuzzMine[drURL])}},
		"baddigest":  {TypeUrl: drURL, InitialResourceVersions: map[string]string{HeldAsDigested: Digest(nil)}},
		"digestmix":  {TypeUrl: drURL, InitialResourceVersions: map[string]string{HeldAsDigested: Digest(fuzzMine[drURL]), "a/b": "1"}},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
