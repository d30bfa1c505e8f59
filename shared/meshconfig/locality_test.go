package meshconfig

import (
	"strings"
	"testing"
)

func TestParseLocalityLabel(t *testing.T) {
	for v, want := range map[string][3]string{
		"":            {},
		"us":          {"us"},
		"us.east":     {"us", "east"},
		"us.east.a":   {"us", "east", "a"},
		"us.east.a.b": {"us", "east", "a.b"},
	} {
		r, z, s := ParseLocalityLabel(v)
		if got := [3]string{r, z, s}; got != want {
			t.Errorf("ParseLocalityLabel(%q) = %q, want %q", v, got, want)
		}
	}
}

// FuzzParseLocalityLabel: any label value parses, without panicking, into
// parts that join back to it.
func FuzzParseLocalityLabel(f *testing.F) {
	for _, s := range []string{"", "r", "r.z", "r.z.s", "r.z.s.x", "..", "a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r, z, s := ParseLocalityLabel(v)
		if strings.Contains(r, ".") || strings.Contains(z, ".") {
			t.Fatalf("%q: region %q or zone %q holds a dot", v, r, z)
		}
		joined := strings.TrimRight(r+"."+z+"."+s, ".")
		if joined != strings.TrimRight(v, ".") {
			t.Fatalf("%q parsed as %q %q %q", v, r, z, s)
		}
	})
}
