package meshconfig

import (
	"encoding/json"
	"strings"
	"time"
)

// Rejection is one object (or file) refused as invalid, and why: the form
// in which the sources and the hub report what they skipped (debug
// endpoints, logs). File and Index say where a file source read it (Index
// is the 0-based document, -1 for the whole file) and appear in JSON only
// with a file; At is when the hub refused it. The wire form of a hub's
// refusal, in a NACK, is protocol/v1's Rejection. A plain value.
type Rejection struct {
	File      string
	Index     int
	Kind      string
	Namespace string
	Name      string
	Field     string
	Reason    string
	At        time.Time
}

// Rejection is the report of e.
func (e *ObjectError) Rejection() Rejection {
	return Rejection{File: e.Origin, Index: e.Index, Kind: e.Kind, Namespace: e.Namespace, Name: e.Name, Field: e.Field, Reason: e.Reason}
}

// MarshalJSON writes file and index only for a rejection read from a file,
// and at only when set.
func (r Rejection) MarshalJSON() ([]byte, error) {
	type where struct {
		File  string `json:"file"`
		Index int    `json:"index"`
	}
	type what struct {
		*where
		Kind      string     `json:"kind,omitempty"`
		Namespace string     `json:"namespace,omitempty"`
		Name      string     `json:"name,omitempty"`
		Field     string     `json:"field,omitempty"`
		Reason    string     `json:"reason"`
		At        *time.Time `json:"at,omitempty"`
	}
	w := what{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, Field: r.Field, Reason: r.Reason}
	if r.File != "" {
		w.where = &where{File: r.File, Index: r.Index}
	}
	if !r.At.IsZero() {
		w.At = &r.At
	}
	return json.Marshal(w)
}

// SplitKey splits an object key, "namespace/name"; ok is false when key
// is not of that form.
func SplitKey(key string) (namespace, name string, ok bool) {
	namespace, name, ok = strings.Cut(key, "/")
	return namespace, name, ok && namespace != "" && name != ""
}
