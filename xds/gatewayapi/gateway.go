package gatewayapi

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/navemesh/nave/shared/meshconfig"
)

// gateway is a Gateway of nave's class being translated.
type gateway struct {
	obj       *object
	spec      *gatewayv1.GatewaySpec
	listeners []*listener
	accepted  metav1.Condition
}

// listener is one of its listeners.
type listener struct {
	gw       *gateway
	index    int
	l        gatewayv1.Listener
	hostname string // "" for any
	kinds    []gatewayv1.RouteGroupKind
	server   *networking.Server // nil when the listener is not programmed
	// accepted: routes may attach (counted in attachedRoutes) even when
	// the listener is not programmed for unresolved references.
	accepted bool
	attached int32
	conds    []metav1.Condition
}

// istioName is the name of the Istio Gateway made of the listener.
func (l *listener) istioName() string { return l.gw.obj.def.Object.Name + "-gwapi-" + string(l.l.Name) }

// istioRef is how a VirtualService names it: "namespace/name".
func (l *listener) istioRef() string { return l.gw.obj.def.Object.Namespace + "/" + l.istioName() }

const (
	groupGateway = gatewayv1.GroupName
	kindService  = "Service"
)

// routeKinds are the route kinds a listener protocol carries.
func routeKinds(p gatewayv1.ProtocolType, mode gatewayv1.TLSModeType) []string {
	switch p {
	case gatewayv1.HTTPProtocolType, gatewayv1.HTTPSProtocolType:
		return []string{"HTTPRoute", "GRPCRoute"}
	case gatewayv1.TLSProtocolType:
		if mode == gatewayv1.TLSModeTerminate {
			return []string{"TCPRoute"}
		}
		return []string{"TLSRoute"}
	case gatewayv1.TCPProtocolType:
		return []string{"TCPRoute"}
	}
	return nil
}

func (tr *translation) newGateway(o *object, spec *gatewayv1.GatewaySpec) *gateway {
	gw := &gateway{obj: o, spec: spec}
	ns := o.def.Object.Namespace
	valid := 0
	for i, l := range spec.Listeners {
		ls := &listener{gw: gw, index: i, l: l, hostname: string(deref(l.Hostname, ""))}
		gw.listeners = append(gw.listeners, ls)
		field := fmt.Sprintf("spec.listeners[%d]", i)
		mode := gatewayv1.TLSModeTerminate
		if l.TLS != nil && l.TLS.Mode != nil {
			mode = *l.TLS.Mode
		}
		supported := routeKinds(l.Protocol, mode)
		accepted := condition("Accepted", true, "Accepted", "")
		resolved := condition("ResolvedRefs", true, "ResolvedRefs", "")
		if supported == nil {
			accepted = condition("Accepted", false, "UnsupportedProtocol", fmt.Sprintf("protocol %s is not supported", l.Protocol))
			tr.problem(o, field+".protocol", "protocol %s is not supported; listener not programmed", l.Protocol)
		}
		// Allowed route kinds: the listener's, among those its protocol carries.
		if l.AllowedRoutes != nil && len(l.AllowedRoutes.Kinds) > 0 {
			var bad []string
			for _, k := range l.AllowedRoutes.Kinds {
				g := string(deref(k.Group, groupGateway))
				if g == groupGateway && contains(supported, string(k.Kind)) {
					ls.kinds = append(ls.kinds, gatewayv1.RouteGroupKind{Group: ptr(gatewayv1.Group(groupGateway)), Kind: k.Kind})
				} else {
					bad = append(bad, g+"/"+string(k.Kind))
				}
			}
			if len(bad) > 0 {
				resolved = condition("ResolvedRefs", false, "InvalidRouteKinds", "route kinds not supported on this listener: "+strings.Join(bad, ", "))
			}
		} else {
			for _, k := range supported {
				ls.kinds = append(ls.kinds, gatewayv1.RouteGroupKind{Group: ptr(gatewayv1.Group(groupGateway)), Kind: gatewayv1.Kind(k)})
			}
		}
		server := &networking.Server{
			Port:  &networking.Port{Number: uint32(l.Port), Protocol: string(l.Protocol), Name: string(l.Name)},
			Hosts: []string{"*/" + cmpOr(ls.hostname, "*")},
		}
		switch {
		case l.Protocol == gatewayv1.TLSProtocolType && mode == gatewayv1.TLSModePassthrough:
			server.Tls = &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_PASSTHROUGH}
		case l.Protocol == gatewayv1.HTTPSProtocolType || l.Protocol == gatewayv1.TLSProtocolType:
			if l.Protocol == gatewayv1.HTTPSProtocolType && mode != gatewayv1.TLSModeTerminate {
				accepted = condition("Accepted", false, "UnsupportedProtocol", "an HTTPS listener terminates TLS (mode Terminate)")
				break
			}
			cred, cond := tr.certificate(o, ns, field, l.TLS)
			if cond != nil {
				resolved = *cond
			}
			server.Tls = &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: cred}
		}
		if l.TLS != nil && len(l.TLS.Options) > 0 {
			tr.problem(o, field+".tls.options", "TLS options are not supported; ignored")
		}
		ls.accepted = accepted.Status == metav1.ConditionTrue
		programmed := ls.accepted && resolved.Status == metav1.ConditionTrue
		if programmed {
			ls.server = server
			valid++
		}
		ls.conds = []metav1.Condition{accepted, resolved, condition("Conflicted", false, "NoConflicts", "")}
		if programmed {
			ls.conds = append(ls.conds, condition("Programmed", true, "Programmed", ""))
		} else {
			ls.conds = append(ls.conds, condition("Programmed", false, "Invalid", "the listener is not valid"))
		}
	}
	tr.conflicts(gw)
	switch {
	case len(spec.Addresses) > 0:
		gw.accepted = condition("Accepted", false, "UnsupportedAddress", "spec.addresses is not supported: the gateway's Service decides its addresses")
		tr.problem(o, "spec.addresses", "not supported; the Gateway is not programmed")
		for _, l := range gw.listeners {
			l.server, l.accepted = nil, false
		}
	case valid < len(spec.Listeners):
		gw.accepted = condition("Accepted", true, "ListenersNotValid", "some listeners are not valid")
	default:
		gw.accepted = condition("Accepted", true, "Accepted", "")
	}
	return gw
}

// conflicts marks listeners that share a port with a different protocol,
// or a port, protocol and hostname.
func (tr *translation) conflicts(gw *gateway) {
	for i, a := range gw.listeners {
		for j, b := range gw.listeners {
			if i == j || a.l.Port != b.l.Port {
				continue
			}
			reason := ""
			switch {
			case a.l.Protocol != b.l.Protocol:
				reason = "ProtocolConflict"
			case a.hostname == b.hostname:
				reason = "HostnameConflict"
			}
			if reason == "" {
				continue
			}
			a.server, a.accepted = nil, false
			a.conds[2] = condition("Conflicted", true, reason, fmt.Sprintf("listener %s uses port %d too", b.l.Name, b.l.Port))
			a.conds[3] = condition("Programmed", false, "Invalid", "the listener conflicts with another")
			break
		}
	}
}

// certificate resolves a listener's certificateRefs into the
// credentialName the gateway's agent serves (kubernetes-gateway://NS/NAME).
func (tr *translation) certificate(o *object, ns, field string, tls *gatewayv1.ListenerTLSConfig) (string, *metav1.Condition) {
	if tls == nil || len(tls.CertificateRefs) == 0 {
		c := condition("ResolvedRefs", false, "InvalidCertificateRef", "a listener terminating TLS needs a certificateRef")
		tr.problem(o, field+".tls.certificateRefs", "missing; listener not programmed")
		return "", &c
	}
	if len(tls.CertificateRefs) > 1 {
		tr.problem(o, field+".tls.certificateRefs", "only the first certificate is served; the others are ignored")
	}
	ref := tls.CertificateRefs[0]
	group, kind := string(deref(ref.Group, "")), string(deref(ref.Kind, "Secret"))
	refNS := string(deref(ref.Namespace, gatewayv1.Namespace(ns)))
	if group != "" || kind != "Secret" {
		c := condition("ResolvedRefs", false, "InvalidCertificateRef", fmt.Sprintf("certificateRef %s/%s is not a Secret", group, kind))
		tr.problem(o, field+".tls.certificateRefs[0]", "not a Secret; listener not programmed")
		return "", &c
	}
	if refNS != ns && !tr.granted(groupGateway, "Gateway", ns, "", "Secret", refNS, string(ref.Name)) {
		c := condition("ResolvedRefs", false, "RefNotPermitted",
			fmt.Sprintf("Secret %s/%s is in another namespace and no ReferenceGrant there allows it", refNS, ref.Name))
		tr.problem(o, field+".tls.certificateRefs[0]", "Secret %s/%s: no ReferenceGrant in %s allows Gateways of %s to refer to it; listener not programmed", refNS, ref.Name, refNS, ns)
		return "", &c
	}
	return "kubernetes-gateway://" + refNS + "/" + string(ref.Name), nil
}

// emitGateway makes the Istio Gateways of gw's programmed listeners and
// records its status.
func (tr *translation) emitGateway(gw *gateway) {
	o := gw.obj
	st := &gatewayv1.GatewayStatus{Conditions: []metav1.Condition{gw.accepted}}
	programmed := 0
	for _, l := range gw.listeners {
		st.Listeners = append(st.Listeners, gatewayv1.ListenerStatus{Name: l.l.Name, SupportedKinds: nonNil(l.kinds), AttachedRoutes: l.attached, Conditions: l.conds})
		if l.server == nil {
			continue
		}
		programmed++
		spec := &networking.Gateway{Selector: map[string]string{meshconfig.GatewayNameLabel: o.def.Object.Name}, Servers: []*networking.Server{l.server}}
		tr.res.Gateways = append(tr.res.Gateways, Generated{Cluster: o.def.Cluster, Object: tr.generated(gatewayKind, o, o.def.Object.Namespace, l.istioName(), spec)})
	}
	if programmed > 0 {
		st.Conditions = append(st.Conditions, condition("Programmed", true, "Programmed", ""))
	} else {
		st.Conditions = append(st.Conditions, condition("Programmed", false, "Invalid", "no listener is programmed"))
	}
	tr.status(o, st, nil)
}

func nonNil(k []gatewayv1.RouteGroupKind) []gatewayv1.RouteGroupKind {
	if k == nil {
		return []gatewayv1.RouteGroupKind{}
	}
	return k
}

var (
	gatewayKind        = mustKind("Gateway")
	virtualServiceKind = mustKind("VirtualService")
)

func mustKind(name string) *meshconfig.Kind {
	k, err := meshconfig.KindFor(meshconfig.GroupNetworking+"/v1", name)
	if err != nil {
		panic(err)
	}
	return k
}

// generated is a new Istio object made of o.
func (tr *translation) generated(kind *meshconfig.Kind, o *object, ns, name string, spec proto.Message) *meshconfig.Object {
	return &meshconfig.Object{Kind: kind, Namespace: ns, Name: name, Spec: spec,
		Annotations: map[string]string{SourceAnnotation: o.def.Object.Ref().String()}, Origin: "translated from " + o.ref()}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
