package gen

import (
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// peerAuthn returns the PeerAuthentications of the view's own workload
// (selected once per view).
func (v *View) peerAuthn() policy.PeerAuthentications {
	if !v.paDone {
		v.paDone = true
		v.pa = policy.SelectPeerAuthentications(v.snap, v.key.Namespace, v.labels, v.report)
	}
	return v.pa
}

// mtlsMode is the effective mode of the proxy's workload port (0: the
// workload).
func (v *View) mtlsMode(port uint32) policy.MTLSMode {
	return v.peerAuthn().Mode(port, v.report)
}

// report records a problem found by a helper that takes a callback.
func (v *View) report(p mesh.Problem) {
	v.Problem(p.Resource, p.Field, "%s", p.Reason)
}

// jwtFilter is the workload's JWT authentication filter; nil when no
// RequestAuthentication applies.
func (v *View) jwtFilter() *hcmv3.HttpFilter {
	policies := policy.SelectRequestAuthentications(v.snap, v.key.Namespace, v.labels, v.report)
	if len(policies) == 0 {
		return nil
	}
	cfg := policy.BuildJWTAuthn(policies, v.jwksCluster, v.report)
	if cfg == nil {
		return nil
	}
	return &hcmv3.HttpFilter{Name: policy.JWTAuthnFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: build.Any(cfg)}}
}

// jwksCluster is the outbound cluster of a service port visible to the
// proxy, or "".
func (v *View) jwksCluster(host string, port uint32) string {
	svc := v.Service(host)
	if svc == nil {
		return ""
	}
	if _, ok := svc.Port(port); !ok {
		return ""
	}
	return build.ClusterName(host, port, "")
}
