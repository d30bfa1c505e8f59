package meshconfig

import (
	"strings"
	"testing"
)

const gw = "gateway.networking.k8s.io/v1"

func gwObj(kind, spec string) string { return object(gw, kind, spec) }

// route is an HTTPRoute with one rule.
func route(rule string) string { return gwObj("HTTPRoute", "parentRefs: [{name: g}]\nrules:\n- "+rule) }

func gateway(listeners string) string {
	return gwObj("Gateway", "gatewayClassName: nave\nlisteners:\n"+listeners)
}

// TestValidateGatewayAPIRejects: what the Gateway API's CRD schema and
// CEL rules refuse, the files path refuses, naming the field.
func TestValidateGatewayAPIRejects(t *testing.T) {
	tests := []struct {
		name, doc, field, reason string
	}{
		// GatewayClass
		{"class no controller", gwObj("GatewayClass", "description: x"), "spec.controllerName", "is required"},
		{"class controller not a path", gwObj("GatewayClass", "controllerName: nave"), "spec.controllerName", "must match"},
		{"class description too long", gwObj("GatewayClass", "controllerName: a.io/b\ndescription: "+strings.Repeat("d", 65)), "spec.description", "at most 64"},

		// Gateway
		{"gateway no class", gwObj("Gateway", "listeners: [{name: a, port: 80, protocol: HTTP}]"), "spec.gatewayClassName", "is required"},
		{"gateway no listeners", gwObj("Gateway", "gatewayClassName: nave"), "spec.listeners", "at least 1"},
		{"listener port 0", gateway("- {name: a, port: 0, protocol: HTTP}"), "spec.listeners[0].port", "between 1 and 65535"},
		{"listener port 65536", gateway("- {name: a, port: 65536, protocol: HTTP}"), "spec.listeners[0].port", "between 1 and 65535"},
		{"listener name", gateway("- {name: A_b, port: 80, protocol: HTTP}"), "spec.listeners[0].name", "must match"},
		{"listener names unique", gateway("- {name: a, port: 80, protocol: HTTP}\n- {name: a, port: 81, protocol: HTTP}"), "spec.listeners[1].name", "must be unique"},
		{"listeners port/protocol/hostname unique", gateway("- {name: a, port: 80, protocol: HTTP, hostname: x.com}\n- {name: b, port: 80, protocol: HTTP, hostname: x.com}"), "spec.listeners[1]", "must be unique"},
		{"listener hostname", gateway("- {name: a, port: 80, protocol: HTTP, hostname: 'X.com'}"), "spec.listeners[0].hostname", "must match"},
		{"listener no protocol", gateway("- {name: a, port: 80}"), "spec.listeners[0].protocol", "is required"},
		{"tls on HTTP", gateway("- {name: a, port: 80, protocol: HTTP, tls: {certificateRefs: [{name: c}]}}"), "spec.listeners[0].tls", "must not be specified"},
		{"hostname on TCP", gateway("- {name: a, port: 80, protocol: TCP, hostname: x.com}"), "spec.listeners[0].hostname", "must not be specified"},
		{"TLS without mode", gateway("- {name: a, port: 443, protocol: TLS}"), "spec.listeners[0].tls.mode", "must be set"},
		{"HTTPS passthrough", gateway("- {name: a, port: 443, protocol: HTTPS, tls: {mode: Passthrough}}"), "spec.listeners[0].tls.mode", "must be Terminate"},
		{"terminate without certificates", gateway("- {name: a, port: 443, protocol: HTTPS, tls: {mode: Terminate}}"), "spec.listeners[0].tls.certificateRefs", "certificateRefs or options"},
		{"tls mode enum", gateway("- {name: a, port: 443, protocol: TLS, tls: {mode: Reencrypt}}"), "spec.listeners[0].tls.mode", "is not one of"},
		{"allowedRoutes from enum", gateway("- {name: a, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Some}}}"), "spec.listeners[0].allowedRoutes.namespaces.from", "is not one of"},
		{"allowedRoutes selector missing", gateway("- {name: a, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector}}}"), "spec.listeners[0].allowedRoutes.namespaces.selector", "must be specified"},
		{"address not an IP", gwObj("Gateway", "gatewayClassName: nave\nlisteners: [{name: a, port: 80, protocol: HTTP}]\naddresses: [{value: not-an-ip}]"), "spec.addresses[0].value", "valid IP"},
		{"addresses unique", gwObj("Gateway", "gatewayClassName: nave\nlisteners: [{name: a, port: 80, protocol: HTTP}]\naddresses: [{value: 10.0.0.1}, {type: IPAddress, value: 10.0.0.1}]"), "spec.addresses[1].value", "must be unique"},

		// parentRefs and hostnames
		{"parentRef no name", gwObj("HTTPRoute", "parentRefs: [{kind: Gateway}]"), "spec.parentRefs[0].name", "is required"},
		{"parentRef port", gwObj("HTTPRoute", "parentRefs: [{name: g, port: 70000}]"), "spec.parentRefs[0].port", "between 1 and 65535"},
		{"parentRef same parent twice", gwObj("HTTPRoute", "parentRefs: [{name: g}, {name: g}]"), "spec.parentRefs[1].sectionName", "must be specified"},
		{"parentRef same section twice", gwObj("HTTPRoute", "parentRefs: [{name: g, sectionName: a}, {name: g, sectionName: a}]"), "spec.parentRefs[1].sectionName", "must be unique"},
		{"parentRef kind", gwObj("HTTPRoute", "parentRefs: [{name: g, kind: '1x'}]"), "spec.parentRefs[0].kind", "must match"},
		{"route hostname", gwObj("HTTPRoute", "hostnames: ['a.*.com']"), "spec.hostnames[0]", "must match"},
		{"too many hostnames", gwObj("HTTPRoute", "hostnames: ["+strings.Repeat("a.com, ", 16)+"a.com]"), "spec.hostnames", "at most 16"},

		// HTTPRoute rules
		{"path relative", route("matches: [{path: {type: PathPrefix, value: api}}]"), "spec.rules[0].matches[0].path.value", "start with '/'"},
		{"path default type relative", route("matches: [{path: {value: api}}]"), "spec.rules[0].matches[0].path.value", "start with '/'"},
		{"path double slash", route("matches: [{path: {type: Exact, value: /a//b}}]"), "spec.rules[0].matches[0].path.value", `"//"`},
		{"path dot segment", route("matches: [{path: {type: Exact, value: /a/..}}]"), "spec.rules[0].matches[0].path.value", `"/.."`},
		{"path encoded slash", route("matches: [{path: {type: PathPrefix, value: /a%2fb}}]"), "spec.rules[0].matches[0].path.value", `"%2f"`},
		{"path bad character", route("matches: [{path: {type: PathPrefix, value: '/a b'}}]"), "spec.rules[0].matches[0].path.value", "valid path characters"},
		{"path type enum", route("matches: [{path: {type: Prefix, value: /}}]"), "spec.rules[0].matches[0].path.type", "is not one of"},
		{"header name", route("matches: [{headers: [{name: 'x y', value: v}]}]"), "spec.rules[0].matches[0].headers[0].name", "must match"},
		{"header names unique", route("matches: [{headers: [{name: X-A, value: v}, {name: x-a, value: w}]}]"), "spec.rules[0].matches[0].headers[1].name", "must be unique"},
		{"header no value", route("matches: [{headers: [{name: x}]}]"), "spec.rules[0].matches[0].headers[0].value", "is required"},
		{"header type enum", route("matches: [{headers: [{name: x, value: v, type: Prefix}]}]"), "spec.rules[0].matches[0].headers[0].type", "is not one of"},
		{"method enum", route("matches: [{method: FETCH}]"), "spec.rules[0].matches[0].method", "is not one of"},
		{"weight too large", route("backendRefs: [{name: s, port: 80, weight: 1000001}]"), "spec.rules[0].backendRefs[0].weight", "between 0 and 1000000"},
		{"weight negative", route("backendRefs: [{name: s, port: 80, weight: -1}]"), "spec.rules[0].backendRefs[0].weight", "between 0 and 1000000"},
		{"service without port", route("backendRefs: [{name: s}]"), "spec.rules[0].backendRefs[0].port", "port is required"},
		{"backend port", route("backendRefs: [{name: s, port: 0}]"), "spec.rules[0].backendRefs[0].port", "between 1 and 65535"},
		{"filter type enum", route("filters: [{type: Rewrite}]"), "spec.rules[0].filters[0].type", "is not one of"},
		{"filter field missing", route("filters: [{type: RequestHeaderModifier}]"), "spec.rules[0].filters[0].requestHeaderModifier", "must be specified"},
		{"filter field of another type", route("filters: [{type: RequestHeaderModifier, requestHeaderModifier: {}, urlRewrite: {hostname: a.com}}]"), "spec.rules[0].filters[0].urlRewrite", "must be nil"},
		{"filter repeated", route("filters: [{type: RequestHeaderModifier, requestHeaderModifier: {}}, {type: RequestHeaderModifier, requestHeaderModifier: {}}]"), "spec.rules[0].filters[1].type", "cannot be repeated"},
		{"redirect with backends", route("filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]\n  backendRefs: [{name: s, port: 80}]"), "spec.rules[0].filters", "must not be used together with backendRefs"},
		{"redirect status code", route("filters: [{type: RequestRedirect, requestRedirect: {statusCode: 300}}]"), "spec.rules[0].filters[0].requestRedirect.statusCode", "is not one of"},
		{"redirect scheme", route("filters: [{type: RequestRedirect, requestRedirect: {scheme: ftp}}]"), "spec.rules[0].filters[0].requestRedirect.scheme", "is not one of"},
		{"rewrite path type", route("filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath}}}]"), "spec.rules[0].filters[0].urlRewrite.path.replaceFullPath", "exactly when"},
		{"timeout format", route("timeouts: {request: 10 seconds}"), "spec.rules[0].timeouts.request", "must match"},
		{"too many rules", gwObj("HTTPRoute", "rules:\n"+strings.Repeat("- {}\n", 17)), "spec.rules", "at most 16"},

		// GRPCRoute
		{"grpc method empty", gwObj("GRPCRoute", "rules: [{matches: [{method: {type: Exact}}]}]"), "spec.rules[0].matches[0].method", "one or both of service or method"},
		{"grpc service name", gwObj("GRPCRoute", "rules: [{matches: [{method: {service: 'a/b'}}]}]"), "spec.rules[0].matches[0].method.service", "valid gRPC service"},
		{"grpc method name", gwObj("GRPCRoute", "rules: [{matches: [{method: {method: 'Get-It'}}]}]"), "spec.rules[0].matches[0].method.method", "valid gRPC method"},
		{"grpc header name", gwObj("GRPCRoute", "rules: [{matches: [{headers: [{name: 'a:b', value: v}]}]}]"), "spec.rules[0].matches[0].headers[0].name", "must match"},
		{"grpc weight", gwObj("GRPCRoute", "rules: [{backendRefs: [{name: s, port: 80, weight: 2000000}]}]"), "spec.rules[0].backendRefs[0].weight", "between 0 and 1000000"},
		{"grpc filter type", gwObj("GRPCRoute", "rules: [{filters: [{type: URLRewrite}]}]"), "spec.rules[0].filters[0].type", "is not one of"},

		// TCPRoute, TLSRoute
		{"tcp no rules", gwObj("TCPRoute", "parentRefs: [{name: g}]"), "spec.rules", "at least 1"},
		{"tcp no backends", gwObj("TCPRoute", "rules: [{}]"), "spec.rules[0].backendRefs", "at least 1"},
		{"tls no hostnames", gwObj("TLSRoute", "rules: [{backendRefs: [{name: s, port: 443}]}]"), "spec.hostnames", "at least 1"},
		{"tls hostname IP", gwObj("TLSRoute", "hostnames: [10.0.0.1]\nrules: [{backendRefs: [{name: s, port: 443}]}]"), "spec.hostnames[0]", "cannot contain an IP"},

		// ReferenceGrant
		{"grant no from", gwObj("ReferenceGrant", "to: [{group: '', kind: Service}]"), "spec.from", "at least 1"},
		{"grant from namespace", gwObj("ReferenceGrant", "from: [{group: gateway.networking.k8s.io, kind: HTTPRoute}]\nto: [{group: '', kind: Service}]"), "spec.from[0].namespace", "is required"},
		{"grant no to", gwObj("ReferenceGrant", "from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: a}]"), "spec.to", "at least 1"},
		{"grant to kind", gwObj("ReferenceGrant", "from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: a}]\nto: [{group: ''}]"), "spec.to[0].kind", "is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := decodeErr(t, tt.doc)
			if e.Field != tt.field {
				t.Errorf("field = %q, want %q (%v)", e.Field, tt.field, e)
			}
			if !strings.Contains(e.Reason, tt.reason) {
				t.Errorf("reason = %q, want it to contain %q", e.Reason, tt.reason)
			}
		})
	}
}

// TestValidateGatewayAPIAccepts: valid objects, with the fields the CRD
// would default left out, pass.
func TestValidateGatewayAPIAccepts(t *testing.T) {
	for _, doc := range []string{
		gwObj("GatewayClass", "controllerName: nave.io/gateway-controller"),
		gateway("- {name: http, port: 80, protocol: HTTP}\n- {name: https, port: 443, protocol: HTTPS, hostname: '*.example.com', tls: {certificateRefs: [{name: cert}]}}\n- {name: tls, port: 8443, protocol: TLS, tls: {mode: Passthrough}}\n- {name: tcp, port: 9000, protocol: TCP}"),
		gwObj("HTTPRoute", "parentRefs: [{name: g, sectionName: a}, {name: g, sectionName: b}, {kind: Service, group: '', name: s, port: 80}]\nhostnames: ['*.example.com']\nrules:\n- matches: [{path: {type: PathPrefix, value: /api}, headers: [{name: x-a, value: v}], queryParams: [{name: q, value: v}], method: GET}]\n  filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x, value: z}]}}, {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}]\n  backendRefs: [{name: s, port: 80, weight: 1000000}, {name: t, port: 80, weight: 0}]\n  timeouts: {request: 10s}\n- matches: [{path: {type: RegularExpression, value: '/a/.*'}}]\n  filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 301}}]"),
		gwObj("GRPCRoute", "parentRefs: [{name: g}]\nrules: [{matches: [{method: {service: pkg.Svc, method: Get}}, {method: {type: RegularExpression, service: 'pkg\\..*'}}], backendRefs: [{name: s, port: 9090, weight: 3}]}]"),
		gwObj("TCPRoute", "parentRefs: [{name: g}]\nrules: [{backendRefs: [{name: s, port: 5432}]}]"),
		gwObj("TLSRoute", "parentRefs: [{name: g}]\nhostnames: [a.example.com]\nrules: [{backendRefs: [{name: s, port: 443}]}]"),
		gwObj("ReferenceGrant", "from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: a}]\nto: [{group: '', kind: Service}]"),
	} {
		objs, errs := DecodeYAML([]byte(doc), "in.yaml")
		if len(errs) != 0 || len(objs) != 1 {
			t.Errorf("%s\n-> %v", doc, errs)
		}
	}
}

// TestGatewayClassNamespace: a GatewayClass is cluster-scoped; whatever
// namespace a document gives it, it carries ClusterNamespace.
func TestGatewayClassNamespace(t *testing.T) {
	objs, errs := DecodeYAML([]byte(gwObj("GatewayClass", "controllerName: nave.io/gateway-controller")), "in.yaml")
	if len(errs) != 0 || len(objs) != 1 {
		t.Fatalf("decode: %v", errs)
	}
	if objs[0].Namespace != ClusterNamespace {
		t.Errorf("namespace %q, want %q", objs[0].Namespace, ClusterNamespace)
	}
}
