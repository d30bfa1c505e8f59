package meshconfig

import (
	"fmt"
	"strings"
)

// ObjectError reports one rejected document or object. Index is the
// 0-based document index within Origin, or -1 when Origin already says
// all there is (an object validated after decoding).
type ObjectError struct {
	Origin                string
	Index                 int
	Kind, Namespace, Name string
	Field                 string // a path like spec.http[0].route[1].weight; empty when the whole document is at fault
	Reason                string
	// Foreign is set for a document that is an object of another API (a
	// Deployment, a Kubernetes Service of the core "v1" API), not config
	// gone wrong: a tool reading a directory of manifests may skip it.
	Foreign bool
}

// Error formats the error, e.g.
// `examples/vs.yaml#1 VirtualService default/reviews: spec.http[0].route: weights sum to 90, want 100`.
func (e *ObjectError) Error() string {
	var b strings.Builder
	where := e.Origin
	if e.Index >= 0 {
		where = fmt.Sprintf("%s#%d", e.Origin, e.Index)
	}
	b.WriteString(where)
	if e.Kind != "" {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.Kind)
	}
	if e.Name != "" {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if e.Namespace != "" {
			b.WriteString(e.Namespace + "/")
		}
		b.WriteString(e.Name)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// bound shortens the parts of e that quote user input, so that a hostile
// document cannot make a huge error.
func (e *ObjectError) bound() {
	e.Kind, e.Namespace, e.Name = shorten(e.Kind), shorten(e.Namespace), shorten(e.Name)
	e.Field, e.Reason = shorten(e.Field), shorten(e.Reason)
}
