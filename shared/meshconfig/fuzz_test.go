package meshconfig

import (
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeYAML feeds arbitrary streams to DecodeYAML: it must never
// panic, every object it returns must be valid and versioned, and every
// rejected document must come back as an error naming where it was.
// Seeds live in testdata/fuzz/FuzzDecodeYAML.
func FuzzDecodeYAML(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		const origin = "fuzz.yaml"
		objs, errs := DecodeYAML(data, origin)
		if docs := len(splitDocuments(data)); len(objs)+len(errs) > docs {
			t.Fatalf("%d objects and %d errors from %d documents", len(objs), len(errs), docs)
		}
		for _, o := range objs {
			if o.Kind == nil || o.Kind.Registry {
				t.Fatalf("object %s has kind %v", o.Key(), o.Kind)
			}
			if err := Validate(o); err != nil {
				t.Fatalf("returned object does not validate: %v", err)
			}
			if o.Version != o.ComputeVersion() || !versionRE.MatchString(o.Version) {
				t.Fatalf("object %s has version %q, want %q", o.Key(), o.Version, o.ComputeVersion())
			}
			if !strings.HasPrefix(o.Origin, origin+"#") {
				t.Fatalf("object %s has origin %q", o.Key(), o.Origin)
			}
		}
		for _, e := range errs {
			var oe *ObjectError
			if !errors.As(error(e), &oe) || e.Origin != origin || e.Index < 0 || e.Reason == "" {
				t.Fatalf("malformed error %#v", e)
			}
			if !strings.HasPrefix(e.Error(), origin+"#") {
				t.Fatalf("error %q does not start with its origin", e.Error())
			}
		}
	})
}
