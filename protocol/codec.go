package protocol

import (
	"errors"
	"fmt"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
)

// Encode wraps an object into the resource that carries it on Push.
func Encode(o *meshconfig.Object) (*discoveryv3.Resource, error) {
	spec, err := anypb.New(o.Spec)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", o.Kind.Kind, o.Key(), err)
	}
	env := &protocolv1.Envelope{
		Name:        o.Name,
		Namespace:   o.Namespace,
		Labels:      o.Labels,
		Annotations: o.Annotations,
		Version:     o.Version,
		Spec:        spec,
		Origin:      o.Origin,
	}
	if !o.CreationTime.IsZero() {
		env.CreationTime = timestamppb.New(o.CreationTime)
	}
	body, err := anypb.New(env)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", o.Kind.Kind, o.Key(), err)
	}
	return &discoveryv3.Resource{
		Name:     o.Key(),
		Version:  o.Version,
		Resource: body,
	}, nil
}

// DecodeError says why a pushed resource was refused.
type DecodeError struct {
	TypeURL string
	Name    string
	Reason  string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("resource %q of type %s: %s", e.Name, e.TypeURL, e.Reason)
}

// Decode unwraps and validates one pushed resource of the given type. Every
// failure is a *DecodeError naming the resource and the reason; a garbled
// or hostile resource never panics.
func Decode(typeURL string, r *discoveryv3.Resource) (*meshconfig.Object, error) {
	kind, ok := meshconfig.KindByTypeURL(typeURL)
	if !ok {
		return nil, &DecodeError{TypeURL: typeURL, Name: r.GetName(), Reason: "unknown type URL"}
	}
	return DecodeKind(kind, r)
}

// DecodeKind is Decode for a kind the caller already resolved from the
// message's type URL (once per message, not per resource).
func DecodeKind(kind *meshconfig.Kind, r *discoveryv3.Resource) (*meshconfig.Object, error) {
	typeURL := kind.TypeURL
	if r == nil {
		return nil, &DecodeError{TypeURL: typeURL, Reason: "resource is empty"}
	}
	fail := func(format string, args ...any) error {
		return &DecodeError{TypeURL: typeURL, Name: r.GetName(), Reason: fmt.Sprintf(format, args...)}
	}
	if len(r.GetName()) > MaxNameLength {
		return nil, fail("name is %d bytes, longer than %d", len(r.GetName()), MaxNameLength)
	}
	if r.GetResource() == nil {
		return nil, fail("no body")
	}
	if r.GetResource().GetTypeUrl() != EnvelopeTypeURL {
		return nil, fail("body is %q, want %s", r.GetResource().GetTypeUrl(), EnvelopeTypeURL)
	}
	var env protocolv1.Envelope
	if err := proto.Unmarshal(r.GetResource().GetValue(), &env); err != nil {
		return nil, fail("envelope does not decode: %v", err)
	}
	if got, want := r.GetName(), meshconfig.Key(env.GetNamespace(), env.GetName()); got != want {
		return nil, fail("name does not match the envelope's %q", want)
	}
	if env.GetSpec() == nil {
		return nil, fail("envelope has no spec")
	}
	if env.GetSpec().GetTypeUrl() != kind.TypeURL {
		return nil, fail("spec is %q, want %s", env.GetSpec().GetTypeUrl(), kind.TypeURL)
	}
	spec := kind.New()
	if err := proto.Unmarshal(env.GetSpec().GetValue(), spec); err != nil {
		return nil, fail("spec does not decode: %v", err)
	}
	o := &meshconfig.Object{
		Kind:        kind,
		Name:        env.GetName(),
		Namespace:   env.GetNamespace(),
		Labels:      env.GetLabels(),
		Annotations: env.GetAnnotations(),
		Spec:        spec,
		Origin:      env.GetOrigin(),
	}
	if env.GetCreationTime() != nil {
		if err := env.GetCreationTime().CheckValid(); err != nil {
			return nil, fail("creation time: %v", err)
		}
		o.CreationTime = env.GetCreationTime().AsTime()
	}
	if err := meshconfig.Validate(o); err != nil {
		var oe *meshconfig.ObjectError
		if errors.As(err, &oe) {
			reason := oe.Reason
			if oe.Field != "" {
				reason = oe.Field + ": " + reason
			}
			return nil, fail("invalid: %s", reason)
		}
		return nil, fail("invalid: %v", err)
	}
	// The version is recomputed from content: a spoke cannot make the hub
	// believe changed content is unchanged.
	o.Version = o.ComputeVersion()
	return o, nil
}

// Rejections extracts the per-resource reasons from a NACK's error detail.
// It returns nil when the detail carries none.
func Rejections(req *discoveryv3.DeltaDiscoveryRequest) []*protocolv1.Rejection {
	var out []*protocolv1.Rejection
	for _, d := range req.GetErrorDetail().GetDetails() {
		if d.GetTypeUrl() != RejectionsTypeURL {
			continue
		}
		var rs protocolv1.Rejections
		if err := proto.Unmarshal(d.GetValue(), &rs); err == nil {
			out = append(out, rs.GetItems()...)
		}
	}
	return out
}
