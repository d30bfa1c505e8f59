// Package gentest holds what the generator rooms' tests share: building a
// snapshot from YAML, finding resources in an Output, and checking that
// generated messages validate. It imports no room, so that any room's own
// tests can use it. Its functions are safe for concurrent use (each
// fails only the test it is given).
package gentest

import (
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// Snapshot builds mesh "m" from one YAML document per cluster name, every
// cluster synced and connected.
func Snapshot(t testing.TB, clusters map[string]string) *mesh.Snapshot {
	t.Helper()
	var in []mesh.ClusterInput
	for name, y := range clusters {
		objs, errs := meshconfig.DecodeYAML([]byte(y), name+".yaml")
		if len(errs) > 0 {
			t.Fatalf("decode: %v", errs)
		}
		in = append(in, mesh.ClusterInput{Name: name, Synced: true, Connected: true, Objects: objs})
	}
	return mesh.Build("m", in)
}
