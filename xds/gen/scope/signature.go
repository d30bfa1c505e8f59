package scope

import (
	"fmt"
	"sort"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/patch"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// labelInputs are the places a snapshot's config reads a proxy's labels:
// label selectors (Sidecar workloadSelector, Gateway selector, route
// sourceLabels, the selectors of PeerAuthentication,
// RequestAuthentication, AuthorizationPolicy, Telemetry and EnvoyFilter,
// and the gateway-name label of Telemetry targetRefs) and label names
// whose value the proxy's config reads (DestinationRule failoverPriority
// and the MeshConfig localityLbSetting's; the canonical service labels
// when tracing may be configured).
type labelInputs struct {
	selectors []map[string]string
	names     []string
}

type labelInputsKey struct{}

func inputsOf(s *mesh.Snapshot) *labelInputs {
	return s.Memo(labelInputsKey{}, func() any {
		in := &labelInputs{}
		for _, c := range s.Sidecars {
			if sc, _ := c.Object.Spec.(*networking.Sidecar); len(sc.GetWorkloadSelector().GetLabels()) > 0 {
				in.selectors = append(in.selectors, sc.GetWorkloadSelector().GetLabels())
			}
		}
		for _, c := range s.Gateways {
			if gw, _ := c.Object.Spec.(*networking.Gateway); gw != nil {
				in.selectors = append(in.selectors, gw.GetSelector())
			}
		}
		for _, list := range [][]*mesh.Config{s.PeerAuthentications, s.RequestAuthentications, s.AuthorizationPolicies, s.Telemetries} {
			for _, c := range list {
				var sel map[string]string
				switch spec := c.Object.Spec.(type) {
				case interface {
					GetSelector() *typev1beta1.WorkloadSelector
				}:
					sel = spec.GetSelector().GetMatchLabels()
				}
				if len(sel) > 0 {
					in.selectors = append(in.selectors, sel)
				}
			}
		}
		for _, c := range s.Telemetries {
			// A Telemetry attached to a Gateway selects that Gateway's
			// deployment by its gateway-name label (policy.SelectTelemetries).
			t, _ := c.Object.Spec.(*telemetryv1alpha1.Telemetry)
			for _, r := range append([]*typev1beta1.PolicyTargetReference{t.GetTargetRef()}, t.GetTargetRefs()...) {
				if r.GetKind() == "Gateway" {
					in.selectors = append(in.selectors, map[string]string{meshconfig.GatewayNameLabel: r.GetName()})
				}
			}
		}
		in.selectors = append(in.selectors, patch.Selectors(s)...)
		for _, c := range s.AllVirtualServices {
			vs := c.VirtualService()
			for _, r := range vs.GetHttp() {
				for _, m := range r.GetMatch() {
					if len(m.GetSourceLabels()) > 0 {
						in.selectors = append(in.selectors, m.GetSourceLabels())
					}
				}
			}
			for _, r := range vs.GetTcp() {
				for _, m := range r.GetMatch() {
					if len(m.GetSourceLabels()) > 0 {
						in.selectors = append(in.selectors, m.GetSourceLabels())
					}
				}
			}
			for _, r := range vs.GetTls() {
				for _, m := range r.GetMatch() {
					if len(m.GetSourceLabels()) > 0 {
						in.selectors = append(in.selectors, m.GetSourceLabels())
					}
				}
			}
		}
		seen := map[string]bool{}
		addPolicy := func(p *networking.TrafficPolicy) {
			lbs := []*networking.LoadBalancerSettings{p.GetLoadBalancer()}
			for _, pl := range p.GetPortLevelSettings() {
				lbs = append(lbs, pl.GetLoadBalancer())
			}
			for _, lb := range lbs {
				for _, key := range lb.GetLocalityLbSetting().GetFailoverPriority() {
					if name, _, explicit := strings.Cut(key, "="); !explicit && !seen[name] {
						seen[name] = true
						in.names = append(in.names, name)
					}
				}
			}
		}
		if policy.TracingConfigured(s) {
			// The trace service name is the canonical service's.
			for _, name := range build.CanonicalNameLabels {
				if !seen[name] {
					seen[name] = true
					in.names = append(in.names, name)
				}
			}
		}
		addPolicy(&networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: s.LocalityLbSetting()}})
		for _, list := range s.DestinationRules {
			for _, c := range list {
				dr := c.DestinationRule()
				addPolicy(dr.GetTrafficPolicy())
				for _, ss := range dr.GetSubsets() {
					addPolicy(ss.GetTrafficPolicy())
				}
			}
		}
		sort.Strings(in.names)
		return in
	}).(*labelInputs)
}

// LabelSignature names what a proxy's labels contribute to its config:
// which of the snapshot's label selectors they match, and their values of
// the label names endpoints are prioritized by. Proxies whose keys differ
// only in labels but have equal signatures get equal config, so a cache
// may key on the signature instead of the labels.
func LabelSignature(s *mesh.Snapshot, k proxy.Key) string {
	in := inputsOf(s)
	labels := k.LabelMap()
	var b strings.Builder
	for _, sel := range in.selectors {
		if mesh.Matches(sel, labels) {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	for _, n := range in.names {
		b.WriteString("," + n + "=" + labels[n])
	}
	return b.String()
}

// InboundSignature names what a proxy's IPs contribute to its config: the
// (service, port, target port) triples of InboundPorts. Proxies whose keys
// differ only in IPs but have equal signatures get equal config, so a
// cache may key on the signature instead of the IPs.
func InboundSignature(s *mesh.Snapshot, k proxy.Key) string {
	if k.IPs == "" {
		return ""
	}
	var b strings.Builder
	for _, in := range InboundPortsOf(s, k) {
		fmt.Fprintf(&b, "%s:%d:%d,", in.Service.Hostname, in.Port.Number, in.TargetPort)
	}
	return b.String()
}
