package policy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/navemesh/nave/xds/gen/gentest"
)

// pa renders a PeerAuthentication. selector "" means none; mode "" leaves
// mtls out; ports maps a workload port to a mode; created is a
// creationTimestamp ("" for none).
func pa(ns, name, selector, mode string, ports map[uint32]string, created string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: %s, namespace: %s", name, ns)
	if created != "" {
		fmt.Fprintf(&b, ", creationTimestamp: %q", created)
	}
	b.WriteString("}\nspec:\n")
	if selector != "" {
		k, v, _ := strings.Cut(selector, "=")
		fmt.Fprintf(&b, "  selector: {matchLabels: {%s: %s}}\n", k, v)
	}
	if mode != "" {
		fmt.Fprintf(&b, "  mtls: {mode: %s}\n", mode)
	}
	if len(ports) > 0 {
		b.WriteString("  portLevelMtls:\n")
		for p, m := range ports {
			fmt.Fprintf(&b, "    %d: {mode: %s}\n", p, m)
		}
	}
	return b.String()
}

// TestPeerAuthenticationPrecedence: the effective mode of a workload port
// follows Istio's precedence — workload (selector, own namespace) over
// namespace over mesh (root namespace) over PERMISSIVE; UNSET inherits;
// port-level settings only with a selector; the oldest of same-level
// policies wins and the others are reported.
func TestPeerAuthenticationPrecedence(t *testing.T) {
	const old, newer = "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"
	app := map[string]string{"app": "x"}
	for _, tc := range []struct {
		name     string
		config   string
		ns       string
		labels   map[string]string
		port     uint32
		want     MTLSMode
		problems []string // substrings of the problems' "resource field: reason", in any order
	}{
		{name: "nothing set: PERMISSIVE", ns: "demo", labels: app, port: 80, want: MTLSPermissive},
		{name: "mesh-wide STRICT", config: pa("istio-system", "default", "", "STRICT", nil, ""), ns: "demo", port: 80, want: MTLSStrict},
		{name: "mesh-wide policy in another namespace is a namespace policy there",
			config: pa("other", "default", "", "STRICT", nil, ""), ns: "demo", port: 80, want: MTLSPermissive},
		{name: "namespace over mesh",
			config: pa("istio-system", "default", "", "STRICT", nil, "") + pa("demo", "default", "", "DISABLE", nil, ""),
			ns:     "demo", port: 80, want: MTLSDisable},
		{name: "namespace UNSET inherits the mesh's",
			config: pa("istio-system", "default", "", "STRICT", nil, "") + pa("demo", "default", "", "UNSET", nil, ""),
			ns:     "demo", port: 80, want: MTLSStrict},
		{name: "namespace without mtls inherits the mesh's",
			config: pa("istio-system", "default", "", "DISABLE", nil, "") + pa("demo", "default", "", "", nil, ""),
			ns:     "demo", port: 80, want: MTLSDisable},
		{name: "workload over namespace",
			config: pa("demo", "default", "", "STRICT", nil, "") + pa("demo", "x", "app=x", "PERMISSIVE", nil, ""),
			ns:     "demo", labels: app, port: 80, want: MTLSPermissive},
		{name: "workload selector not matching",
			config: pa("demo", "default", "", "STRICT", nil, "") + pa("demo", "z", "app=z", "DISABLE", nil, ""),
			ns:     "demo", labels: app, port: 80, want: MTLSStrict},
		{name: "workload selector in another namespace does not apply",
			config: pa("other", "x", "app=x", "STRICT", nil, ""), ns: "demo", labels: app, port: 80, want: MTLSPermissive},
		{name: "root-namespace selector selects root-namespace workloads only",
			config: pa("istio-system", "x", "app=x", "STRICT", nil, ""), ns: "demo", labels: app, port: 80, want: MTLSPermissive},
		{name: "root-namespace selector, root-namespace workload",
			config: pa("istio-system", "x", "app=x", "STRICT", nil, ""), ns: "istio-system", labels: app, port: 80, want: MTLSStrict},
		{name: "workload UNSET inherits the namespace's",
			config: pa("demo", "default", "", "DISABLE", nil, "") + pa("demo", "x", "app=x", "UNSET", nil, ""),
			ns:     "demo", labels: app, port: 80, want: MTLSDisable},
		{name: "port level over workload level",
			config: pa("demo", "x", "app=x", "STRICT", map[uint32]string{8080: "DISABLE"}, ""),
			ns:     "demo", labels: app, port: 8080, want: MTLSDisable},
		{name: "port level for another port",
			config: pa("demo", "x", "app=x", "STRICT", map[uint32]string{8080: "DISABLE"}, ""),
			ns:     "demo", labels: app, port: 9090, want: MTLSStrict},
		{name: "port level for the whole workload (passthrough) does not apply",
			config: pa("demo", "x", "app=x", "STRICT", map[uint32]string{8080: "DISABLE"}, ""),
			ns:     "demo", labels: app, port: 0, want: MTLSStrict},
		{name: "port level UNSET inherits the workload's mode, itself inherited",
			config: pa("istio-system", "default", "", "STRICT", nil, "") + pa("demo", "x", "app=x", "", map[uint32]string{8080: "UNSET"}, ""),
			ns:     "demo", labels: app, port: 8080, want: MTLSStrict},
		{name: "port level without a selector is ignored and reported",
			config: pa("demo", "default", "", "STRICT", map[uint32]string{8080: "DISABLE"}, ""),
			ns:     "demo", labels: app, port: 8080, want: MTLSStrict,
			problems: []string{"c1:PeerAuthentication demo/default spec.portLevelMtls: port-level mTLS applies only to a policy with a selector"}},
		{name: "two namespace policies: the oldest applies",
			config: pa("demo", "a", "", "STRICT", nil, newer) + pa("demo", "b", "", "DISABLE", nil, old),
			ns:     "demo", port: 80, want: MTLSDisable,
			problems: []string{"c1:PeerAuthentication demo/a metadata.name: namespace demo has several PeerAuthentications without a selector; c1:PeerAuthentication demo/b (the oldest) applies"}},
		{name: "two workload policies with equal creation times: the first by name applies",
			config: pa("demo", "b", "app=x", "DISABLE", nil, old) + pa("demo", "a", "app=x", "STRICT", nil, old),
			ns:     "demo", labels: app, port: 80, want: MTLSStrict,
			problems: []string{"c1:PeerAuthentication demo/b spec.selector: several PeerAuthentications select the same workload; c1:PeerAuthentication demo/a (the oldest)"}},
		{name: "a policy without a creation time counts as newest",
			config: pa("istio-system", "a", "", "DISABLE", nil, "") + pa("istio-system", "b", "", "STRICT", nil, old),
			ns:     "demo", port: 80, want: MTLSStrict,
			problems: []string{"c1:PeerAuthentication istio-system/a metadata.name: the root namespace (istio-system) has several mesh-wide PeerAuthentications"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := gentest.Snapshot(t, map[string]string{"c1": tc.config})
			got, problems := EffectiveMTLS(s, tc.ns, tc.labels, tc.port)
			if got != tc.want {
				t.Errorf("mode %s, want %s", got, tc.want)
			}
			var have []string
			for _, p := range problems {
				have = append(have, p.Resource+" "+p.Field+": "+p.Reason)
			}
			if len(have) != len(tc.problems) {
				t.Errorf("problems %q, want %d like %q", have, len(tc.problems), tc.problems)
			}
			for _, want := range tc.problems {
				found := false
				for _, h := range have {
					found = found || strings.Contains(h, want)
				}
				if !found {
					t.Errorf("no problem like %q in %q", want, have)
				}
			}
		})
	}
}
