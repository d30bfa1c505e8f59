package meshconfig

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/shared/typeurl"
)

// DefaultNamespace is the namespace of an object whose metadata names none.
const DefaultNamespace = "default"

// Object is one config object: metadata around a spec. It is a plain value
// with no locking: share it read-only, or copy it before changing it.
type Object struct {
	Kind                *Kind
	Name, Namespace     string
	Labels, Annotations map[string]string
	CreationTime        time.Time
	Spec                proto.Message
	// Version is the content hash (ComputeVersion): equal content, equal version.
	Version string
	// Origin says where the object came from ("path/to/file.yaml#2", the
	// 0-based document index after '#'). For diagnostics only.
	Origin string
}

// Key returns the object's key, "namespace/name": how one object of a
// kind is named everywhere, the wire included.
func (o *Object) Key() string { return Key(o.Namespace, o.Name) }

// Ref returns the object's reference: its kind and key.
func (o *Object) Ref() Ref { return Ref{Kind: o.Kind.Kind, Namespace: o.Namespace, Name: o.Name} }

// Key is the key of the object name in namespace: "namespace/name".
func Key(namespace, name string) string { return namespace + "/" + name }

// Ref names one object of any kind: comparable, a map key, and printed
// "Kind namespace/name" in logs and messages. A plain value.
type Ref struct{ Kind, Namespace, Name string }

func (r Ref) String() string { return r.Kind + " " + Key(r.Namespace, r.Name) }

// ComputeVersion hashes the object's content: a deterministic proto
// marshal of its spec, labels and annotations, SHA-256, the first 16 hex
// characters. Name, namespace, creation time and origin are not content.
func (o *Object) ComputeVersion() string {
	det := proto.MarshalOptions{Deterministic: true}
	env := &meshconfigv1.Content{Labels: o.Labels, Annotations: o.Annotations}
	var err error
	if o.Spec != nil {
		spec := &anypb.Any{TypeUrl: typeurl.Of(o.Spec)}
		spec.Value, err = det.Marshal(o.Spec)
		env.Spec = spec
	}
	var body []byte
	if err == nil {
		body, err = det.Marshal(env)
	}
	if err != nil {
		// Only a spec or label holding invalid UTF-8 fails to marshal, and
		// neither decoding path lets one through; hash the reason so the
		// version is still stable for the same content.
		body = []byte("unmarshalable: " + err.Error())
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:8])
}

// CompareObjects orders objects by kind, namespace and name: the order in
// which a cluster's objects are handed to the snapshot builder, on the hub
// and on a spoke in fallback alike.
func CompareObjects(a, b *Object) int {
	return cmp.Or(cmp.Compare(a.Kind.Kind, b.Kind.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
