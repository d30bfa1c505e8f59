package hubconfig

import (
	"net"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/spiffeid"
)

// FuzzPolledSpokes: spokes.poll entries never panic the parser; what it
// accepts is a DNS-label mesh and cluster and a HOST:PORT address that
// print back as the entry, each cluster once.
func FuzzPolledSpokes(f *testing.F) {
	for _, s := range []string{"default/a=127.0.0.1:15026", "default/a=h:1,default/a=h:2", "a=b", "/=:", "m/c=[::1]:15026",
		"m/c=spoke.example:15026,m/d=spoke.example:15027", "M/c=h:1", "m/c/d=h:1", "m/c=h:1=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, entries string) {
		s := Spokes{Poll: strings.Split(entries, ",")}
		got, err := s.PolledSpokes()
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		seen := map[string]bool{}
		for i, p := range got {
			if spiffeid.ValidateName(p.Mesh) != nil || spiffeid.ValidateName(p.Cluster) != nil {
				t.Fatalf("accepted %+v", p)
			}
			if _, _, err := net.SplitHostPort(p.Address); err != nil {
				t.Fatalf("accepted address %q: %v", p.Address, err)
			}
			if p.Mesh+"/"+p.Cluster+"="+p.Address != s.Poll[i] {
				t.Fatalf("%q parsed as %+v", s.Poll[i], p)
			}
			if seen[p.Mesh+"/"+p.Cluster] {
				t.Fatalf("%s/%s accepted twice", p.Mesh, p.Cluster)
			}
			seen[p.Mesh+"/"+p.Cluster] = true
		}
	})
}
