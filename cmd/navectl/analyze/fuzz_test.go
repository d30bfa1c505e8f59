package analyze

import (
	"bytes"
	"os"
	"testing"
)

// FuzzAnalyze runs every check on arbitrary input: none may panic, and
// every finding names its check and says why.
func FuzzAnalyze(f *testing.F) {
	for _, p := range []string{"../testdata/analyze/clean/app.yaml", "../testdata/analyze/problems/routes.yaml", "../testdata/analyze/problems/rules.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a := New()
		c1, c2 := &Cluster{Name: "a"}, &Cluster{Name: "b"}
		a.ReadDocuments(c1, data, "in.yaml", "cluster.local")
		a.ReadDocuments(c2, bytes.ReplaceAll(data, []byte("v1"), []byte("v2")), "in.yaml", "cluster.local")
		a.CrossChecks("m", "cluster.local", []*Cluster{c1, c2})
		for _, f := range a.Findings {
			if f.Check == "" || f.Message == "" || (f.Severity != SevError && f.Severity != SevWarning) {
				t.Fatalf("finding without check, severity or message: %+v", f)
			}
		}
	})
}
