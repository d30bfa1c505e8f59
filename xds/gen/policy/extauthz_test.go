package policy_test

import (
	"strings"
	"testing"

	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// TestCustomRefusedForProxyless: grpc-go's xDS server has no ext_authz
// (v1.85: the filter is client-side, behind an experimental flag, and
// cannot build its gRPC service), so a CUSTOM policy selecting a
// proxyless server is reported with that reason and denies what its
// rules match; it is never ignored.
func TestCustomRefusedForProxyless(t *testing.T) {
	snap := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: gentest.Decode(t, `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: foo}
spec:
  action: CUSTOM
  provider: {name: authz}
  rules: [{to: [{operation: {paths: ["/admin*"]}}]}]
`)}})
	var problems []mesh.Problem
	r := policy.BuildRBAC(snap.AuthorizationPolicies, policy.RBACTarget{TrustDomain: "cluster.local", GRPC: true}, func(p mesh.Problem) { problems = append(problems, p) })
	if len(problems) != 1 || problems[0].Field != "spec.action" || !strings.Contains(problems[0].Reason, "gRFC A92") {
		t.Errorf("problems %v; want the CUSTOM action reported for proxyless", problems)
	}
	if r.Custom != nil || r.Deny.GetPolicies()["ns[foo]-policy[ext]-rule[0]"] == nil {
		t.Errorf("rbac %+v; want the CUSTOM rule as a DENY rule (fail closed)", r)
	}
}
