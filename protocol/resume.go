package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/typeurl"
)

// ResumeTypeURL is the type of the message a sender that can resume sends
// first on a Push stream (docs/protocol.md, Resume on reconnect).
var ResumeTypeURL = typeurl.Of(&protocolv1.Resume{})

// Held is what a receiver holds of one cluster: type URL -> name ->
// content version.
type Held map[string]map[string]string

// Count is how many resources h holds.
func (h Held) Count() int {
	n := 0
	for _, byName := range h {
		n += len(byName)
	}
	return n
}

// HeldAsDigested is the one name of a hint that says the receiver holds
// of the hint's type exactly what the sender's digest of it says: its
// value is that digest.
const HeldAsDigested = "*"

// Digest is the digest of one type's names and versions (SHA-256 of the
// sorted "name NUL version LF" lines, 16 bytes in hex): equal digests,
// equal sets.
func Digest(byName map[string]string) string {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(byName[n]))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ResumeMessage is the Resume message of a sender that holds mine: one
// Resource per non-empty type, named by its type URL, whose version is
// Digest of the type. The receiver then names only the types it holds
// differently (HintMessages). The caller sets the nonce.
func ResumeMessage(mine Held) *discoveryv3.DeltaDiscoveryResponse {
	m := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: ResumeTypeURL, SystemVersionInfo: Version}
	types := make([]string, 0, len(mine))
	for t, byName := range mine {
		if len(byName) > 0 {
			types = append(types, t)
		}
	}
	sort.Strings(types)
	for _, t := range types {
		m.Resources = append(m.Resources, &discoveryv3.Resource{Name: t, Version: Digest(mine[t])})
	}
	return m
}

// Digests reads a Resume message's digests by type URL. An entry that is
// not a type URL with a digest is left out: its type is then hinted in
// full, which is never wrong.
func Digests(m *discoveryv3.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, r := range m.GetResources() {
		if strings.HasPrefix(r.GetName(), typeurl.Prefix) && len(r.GetVersion()) == 32 {
			out[r.GetName()] = r.GetVersion()
		}
	}
	return out
}

// HintMessages splits held into the hint a receiver sends before it ACKs a
// Resume whose sender digested its state as digests (Digests; nil: none):
// per type URL (types in lexical order), one DeltaDiscoveryRequest naming
// only HeldAsDigested when held's digest of the type equals the sender's,
// else the type's names and versions, sorted, split into several messages
// when they would exceed budget bytes (budget <= 0: no split). Empty types
// are left out; an empty held gives no messages.
func HintMessages(held Held, digests map[string]string, budget int) []*discoveryv3.DeltaDiscoveryRequest {
	types := make([]string, 0, len(held))
	for t, byName := range held {
		if len(byName) > 0 {
			types = append(types, t)
		}
	}
	sort.Strings(types)
	var out []*discoveryv3.DeltaDiscoveryRequest
	for _, t := range types {
		if d, ok := digests[t]; ok && d == Digest(held[t]) {
			out = append(out, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, InitialResourceVersions: map[string]string{HeldAsDigested: d}})
			continue
		}
		names := make([]string, 0, len(held[t]))
		for n := range held[t] {
			names = append(names, n)
		}
		sort.Strings(names)
		msg := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, InitialResourceVersions: map[string]string{}}
		size := 0
		for _, n := range names {
			v := held[t][n]
			// A map entry costs its key and value plus a few bytes of
			// framing.
			cost := len(n) + len(v) + 8
			if budget > 0 && size > 0 && size+cost > budget {
				out = append(out, msg)
				msg, size = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, InitialResourceVersions: map[string]string{}}, 0
			}
			msg.InitialResourceVersions[n] = v
			size += cost
		}
		out = append(out, msg)
	}
	return out
}

// MaxVersionLength bounds a version in a resume hint.
const MaxVersionLength = 128

// HintError says why a resume hint was refused.
type HintError struct {
	TypeURL string
	Name    string
	Reason  string
}

func (e *HintError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("resume hint of type %q: %s", e.TypeURL, e.Reason)
	}
	return fmt.Sprintf("resume hint of type %q, resource %q: %s", e.TypeURL, e.Name, e.Reason)
}

// AddHint checks one hint message and adds what it names to held. A hint
// has a type URL, no response nonce and no error, and names resources
// "namespace/name" (at most MaxNameLength bytes) with a non-empty version
// of at most MaxVersionLength bytes; a name given twice must not differ.
// Or it names only HeldAsDigested, with the digest of mine's resources of
// its type (what the sender digested in its Resume): the receiver holds
// exactly those, and they are added to held. On error held is unchanged.
// It never panics on garbled input.
func AddHint(held Held, req *discoveryv3.DeltaDiscoveryRequest, mine Held) error {
	t := req.GetTypeUrl()
	fail := func(name, format string, args ...any) error {
		return &HintError{TypeURL: t, Name: name, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case t == "":
		return fail("", "no type URL")
	case !strings.HasPrefix(t, typeurl.Prefix):
		return fail("", "type URL does not start with %s", typeurl.Prefix)
	case t == SyncedTypeURL || t == ResumeTypeURL:
		return fail("", "not a resource type")
	case req.GetResponseNonce() != "":
		return fail("", "a hint answers no nonce, this one answers %q", req.GetResponseNonce())
	case req.GetErrorDetail() != nil:
		return fail("", "a hint carries no error")
	}
	if d, ok := req.GetInitialResourceVersions()[HeldAsDigested]; ok {
		switch {
		case len(req.GetInitialResourceVersions()) != 1:
			return fail(HeldAsDigested, "names other resources beside %q", HeldAsDigested)
		case len(mine[t]) == 0 || d != Digest(mine[t]):
			return fail(HeldAsDigested, "digest %q is not the digest this sender sent for the type", d)
		case len(held[t]) > 0:
			return fail(HeldAsDigested, "the type was hinted by name too")
		}
		held[t] = make(map[string]string, len(mine[t]))
		for n, v := range mine[t] {
			held[t][n] = v
		}
		return nil
	}
	for n, v := range req.GetInitialResourceVersions() {
		switch {
		case len(n) > MaxNameLength:
			return fail(n[:32]+"...", "name is %d bytes, longer than %d", len(n), MaxNameLength)
		case !validName(n):
			return fail(n, "name is not namespace/name")
		case v == "":
			return fail(n, "no version")
		case len(v) > MaxVersionLength:
			return fail(n, "version is %d bytes, longer than %d", len(v), MaxVersionLength)
		}
		if old, ok := held[t][n]; ok && old != v {
			return fail(n, "named twice with versions %q and %q", old, v)
		}
	}
	if len(req.GetInitialResourceVersions()) == 0 {
		return nil
	}
	if held[t] == nil {
		held[t] = make(map[string]string, len(req.GetInitialResourceVersions()))
	}
	for n, v := range req.GetInitialResourceVersions() {
		held[t][n] = v
	}
	return nil
}

// validName reports whether n is "namespace/name" with both parts set.
func validName(n string) bool {
	ns, name, ok := strings.Cut(n, "/")
	return ok && ns != "" && name != "" && !strings.Contains(name, "/")
}

// ResumeAnswer is the receiver's reply to a Resume message: an ACK of
// nonce, which says resume is in effect (the hints sent before it are all
// the receiver holds), or, with full set, a refusal that asks for the full
// state (the receiver holds no complete state of the cluster).
func ResumeAnswer(nonce string, full string) *discoveryv3.DeltaDiscoveryRequest {
	r := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: ResumeTypeURL, ResponseNonce: nonce}
	if full != "" {
		r.ErrorDetail = resumeRefusal(full)
	}
	return r
}

// ReadResume reads a receiver's answers to the Resume message sent with
// nonce (ResumeMessage of mine; mine is nil when the message carried no
// digests): the hints, then the answer to nonce. It reports what the receiver
// holds and whether resume is in effect; a NACK of nonce (an older
// receiver, or one without a complete state) reports resumed false: send
// the full state. A hint that does not parse is an error: the stream
// cannot go on (the receiver will not prune), the caller ends it.
func ReadResume(recv func() (*discoveryv3.DeltaDiscoveryRequest, error), nonce string, mine Held) (held Held, resumed bool, err error) {
	held = Held{}
	for {
		r, err := recv()
		if err != nil {
			return nil, false, err
		}
		switch {
		case r.GetResponseNonce() == nonce:
			if r.GetErrorDetail() != nil {
				return nil, false, nil
			}
			return held, true, nil
		case r.GetResponseNonce() != "":
			return nil, false, fmt.Errorf("receiver answered nonce %q while resuming (waiting for %q)", r.GetResponseNonce(), nonce)
		}
		if err := AddHint(held, r, mine); err != nil {
			return nil, false, err
		}
	}
}

func resumeRefusal(reason string) *statuspb.Status {
	return &statuspb.Status{Code: int32(codes.FailedPrecondition), Message: reason}
}
