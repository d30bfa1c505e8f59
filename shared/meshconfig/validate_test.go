package meshconfig

import (
	"errors"
	"strings"
	"testing"

	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// object renders one document of a kind with the given spec (indented YAML).
func object(apiVersion, kind, spec string) string {
	return "apiVersion: " + apiVersion + "\nkind: " + kind + "\nmetadata: {name: obj, namespace: ns}\nspec:\n" + indent(spec)
}

func indent(s string) string {
	var b strings.Builder
	for line := range strings.Lines(strings.TrimLeft(s, "\n")) {
		b.WriteString("  " + line)
	}
	return b.String()
}

const (
	net = "networking.istio.io/v1"
	sec = "security.istio.io/v1"
	tel = "telemetry.istio.io/v1"
)

func vs(spec string) string { return object(net, "VirtualService", spec) }

// vsHTTP is a virtual service for host r with one HTTP route.
func vsHTTP(route string) string { return vs("hosts: [r]\nhttp:\n" + route) }

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name, doc, field, reason string
	}{
		// metadata
		{"name uppercase", strings.Replace(vsHTTP("- route: [{destination: {host: r}}]"), "name: obj", "name: Obj", 1), "metadata.name", "DNS-1123 subdomain"},
		{"name too long", strings.Replace(vsHTTP("- route: [{destination: {host: r}}]"), "name: obj", "name: "+strings.Repeat("a", 254), 1), "metadata.name", "longer than 253"},
		{"namespace with dot", strings.Replace(vsHTTP("- route: [{destination: {host: r}}]"), "namespace: ns", "namespace: a.b", 1), "metadata.namespace", "DNS-1123 label"},
		{"namespace too long", strings.Replace(vsHTTP("- route: [{destination: {host: r}}]"), "namespace: ns", "namespace: "+strings.Repeat("n", 64), 1), "metadata.namespace", "longer than 63"},
		{"bad label key", strings.Replace(vsHTTP("- route: [{destination: {host: r}}]"), "namespace: ns", "namespace: ns, labels: {'a b': c}", 1), "metadata.labels[a b]", `label key "a b" may hold only`},
		{"bad label value", strings.Replace(vsHTTP("- route: [{destination: {host: r}}]"), "namespace: ns", "namespace: ns, labels: {a: -c}", 1), "metadata.labels[a]", "label value"},

		// VirtualService hosts
		{"delegate vs with gateways", vs("gateways: [gw]\nhttp: [{route: [{destination: {host: r}}]}]"), "spec.gateways", "delegate"},
		{"vs host with scheme", vs("hosts: ['http://r']\nhttp: [{route: [{destination: {host: r}}]}]"), "spec.hosts[0]", "scheme"},
		{"vs host with port", vs("hosts: ['r:80']\nhttp: [{route: [{destination: {host: r}}]}]"), "spec.hosts[0]", "port"},
		{"vs host with space", vs("hosts: ['r s']\nhttp: [{route: [{destination: {host: r}}]}]"), "spec.hosts[0]", "spaces"},
		{"vs host bad wildcard", vs("hosts: ['a.*.com']\nhttp: [{route: [{destination: {host: r}}]}]"), "spec.hosts[0]", "wildcard"},
		{"vs host label too long", vs("hosts: ['" + strings.Repeat("a", 64) + ".com']\nhttp: [{route: [{destination: {host: r}}]}]"), "spec.hosts[0]", "longer than 63"},
		{"vs host too long", vs("hosts: ['" + strings.Repeat("abcdefg.", 32) + "com']\nhttp: [{route: [{destination: {host: r}}]}]"), "spec.hosts[0]", "longer than 253"},
		{"vs host empty label", vs("hosts: ['a..com']\nhttp: [{route: [{destination: {host: r}}]}]"), "spec.hosts[0]", "empty label"},
		{"vs star on mesh", vs("hosts: ['*']\nhttp: [{route: [{destination: {host: r}}]}]"), "spec.hosts[0]", "bound to gateways only"},
		{"vs star on mesh and gateway", vs("hosts: ['*']\ngateways: [gw, mesh]\nhttp: [{route: [{destination: {host: r}}]}]"), "spec.hosts[0]", "bound to gateways only"},
		{"vs no routes", vs("hosts: [r]"), "spec", "at least one of http, tcp or tls"},

		// HTTP route actions
		{"http no action", vsHTTP("- match: [{uri: {prefix: /}}]"), "spec.http[0]", "one of route, redirect, directResponse or delegate is required"},
		{"http route and redirect", vsHTTP("- route: [{destination: {host: r}}]\n  redirect: {uri: /x}"), "spec.http[0]", "route and redirect cannot be used together"},
		{"http route and directResponse", vsHTTP("- route: [{destination: {host: r}}]\n  directResponse: {status: 503}"), "spec.http[0]", "route and directResponse cannot be used together"},
		{"http redirect and directResponse", vsHTTP("- redirect: {uri: /x}\n  directResponse: {status: 503}"), "spec.http[0]", "redirect and directResponse cannot be used together"},
		{"http bad redirect code", vsHTTP("- redirect: {uri: /x, redirectCode: 200}"), "spec.http[0].redirect.redirectCode", "not a 3xx"},
		{"http bad direct status", vsHTTP("- directResponse: {status: 700}"), "spec.http[0].directResponse.status", "out of range 200-599"},
		{"http delegate no name", vsHTTP("- delegate: {namespace: ns}"), "spec.http[0].delegate.name", "must not be empty"},

		// destinations and weights
		{"destination missing", vsHTTP("- route: [{weight: 100}]"), "spec.http[0].route[0].destination", "destination is required"},
		{"destination no host", vsHTTP("- route: [{destination: {subset: v1}}]"), "spec.http[0].route[0].destination.host", "destination host is required"},
		{"destination bad host", vsHTTP("- route: [{destination: {host: 'r/s'}}]"), "spec.http[0].route[0].destination.host", "path or a namespace"},
		{"destination star host", vsHTTP("- route: [{destination: {host: '*'}}]"), "spec.http[0].route[0].destination.host", "not allowed here"},
		{"destination bad subset", vsHTTP("- route: [{destination: {host: r, subset: V_1}}]"), "spec.http[0].route[0].destination.subset", "DNS-1123 label"},
		{"destination bad port", vsHTTP("- route: [{destination: {host: r, port: {number: 70000}}}]"), "spec.http[0].route[0].destination.port.number", "out of range 1-65535"},
		{"weights sum to 90", vsHTTP("- route:\n  - {destination: {host: a}, weight: 50}\n  - {destination: {host: b}, weight: 40}"), "spec.http[0].route", "weights sum to 90, want 100"},
		{"weights sum over 100", vsHTTP("- route:\n  - {destination: {host: a}, weight: 80}\n  - {destination: {host: b}, weight: 40}"), "spec.http[0].route", "weights sum to 120, want 100"},
		{"weights unset", vsHTTP("- route:\n  - {destination: {host: a}}\n  - {destination: {host: b}}"), "spec.http[0].route", "weights must be set"},
		{"weight negative", vsHTTP("- route:\n  - {destination: {host: a}, weight: -10}\n  - {destination: {host: b}, weight: 110}"), "spec.http[0].route[0].weight", "must not be negative"},
		{"single weight 50", vsHTTP("- route:\n  - {destination: {host: a}, weight: 50}"), "spec.http[0].route[0].weight", "want 100"},

		// matches
		{"uri empty match", vsHTTP("- match: [{uri: {}}]\n  route: [{destination: {host: r}}]"), "spec.http[0].match[0].uri", "one of exact, prefix or regex is required"},
		{"authority empty match", vsHTTP("- match: [{authority: {}}]\n  route: [{destination: {host: r}}]"), "spec.http[0].match[0].authority", "one of exact, prefix or regex"},
		{"uri bad regex", vsHTTP("- match: [{uri: {regex: '/a(['}}]\n  route: [{destination: {host: r}}]"), "spec.http[0].match[0].uri.regex", "error parsing regexp: missing closing ]"},
		{"uri lookahead regex", vsHTTP("- match: [{uri: {regex: '(?!x)y'}}]\n  route: [{destination: {host: r}}]"), "spec.http[0].match[0].uri.regex", "invalid or unsupported Perl syntax"},
		{"header bad regex", vsHTTP("- match: [{headers: {x-user: {regex: 'a{2,1}'}}}]\n  route: [{destination: {host: r}}]"), "spec.http[0].match[0].headers[x-user].regex", "invalid repeat count"},
		{"query param bad regex", vsHTTP("- match: [{queryParams: {q: {regex: '*'}}}]\n  route: [{destination: {host: r}}]"), "spec.http[0].match[0].queryParams[q].regex", "missing argument to repetition operator"},
		{"query param prefix", vsHTTP("- match: [{queryParams: {q: {prefix: a}}}]\n  route: [{destination: {host: r}}]"), "spec.http[0].match[0].queryParams[q].prefix", "prefix is not supported"},
		{"empty regex", vsHTTP("- match: [{uri: {regex: ''}}]\n  route: [{destination: {host: r}}]"), "spec.http[0].match[0].uri.regex", "must not be empty"},

		// timeouts, retries, fault, mirror
		{"timeout too short", vsHTTP("- timeout: 0.0001s\n  route: [{destination: {host: r}}]"), "spec.http[0].timeout", "shorter than 1ms"},
		{"timeout negative", vsHTTP("- timeout: -1s\n  route: [{destination: {host: r}}]"), "spec.http[0].timeout", "shorter than 1ms"},
		{"perTryTimeout too short", vsHTTP("- retries: {attempts: 2, perTryTimeout: 500us}\n  route: [{destination: {host: r}}]"), "spec.http[0].retries.perTryTimeout", "shorter than 1ms"},
		{"retries negative", vsHTTP("- retries: {attempts: -1}\n  route: [{destination: {host: r}}]"), "spec.http[0].retries.attempts", "must not be negative"},
		{"retry backoff zero", vsHTTP("- retries: {attempts: 2, backoff: 0s}\n  route: [{destination: {host: r}}]"), "spec.http[0].retries.backoff", "shorter than 1ms"},
		{"fault delay percentage", vsHTTP("- fault: {delay: {percentage: {value: 101}, fixedDelay: 1s}}\n  route: [{destination: {host: r}}]"), "spec.http[0].fault.delay.percentage.value", "out of range 0-100"},
		{"fault delay percent", vsHTTP("- fault: {delay: {percent: -5, fixedDelay: 1s}}\n  route: [{destination: {host: r}}]"), "spec.http[0].fault.delay.percent", "out of range 0-100"},
		{"fault abort percentage", vsHTTP("- fault: {abort: {percentage: {value: -1}, httpStatus: 503}}\n  route: [{destination: {host: r}}]"), "spec.http[0].fault.abort.percentage.value", "out of range 0-100"},
		{"fault abort status", vsHTTP("- fault: {abort: {httpStatus: 99}}\n  route: [{destination: {host: r}}]"), "spec.http[0].fault.abort.httpStatus", "out of range 200-599"},
		{"mirror percentage", vsHTTP("- mirror: {host: m}\n  mirrorPercentage: {value: 100.5}\n  route: [{destination: {host: r}}]"), "spec.http[0].mirrorPercentage.value", "out of range 0-100"},
		{"mirrors percentage", vsHTTP("- mirrors: [{destination: {host: m}, percentage: {value: 200}}]\n  route: [{destination: {host: r}}]"), "spec.http[0].mirrors[0].percentage.value", "out of range 0-100"},
		{"mirror no host", vsHTTP("- mirror: {subset: v1}\n  route: [{destination: {host: r}}]"), "spec.http[0].mirror.host", "destination host is required"},

		// tcp and tls routes
		{"tcp no destination host", vs("hosts: [r]\ntcp: [{route: [{destination: {port: {number: 80}}}]}]"), "spec.tcp[0].route[0].destination.host", "destination host is required"},
		{"tcp no route", vs("hosts: [r]\ntcp: [{match: [{port: 80}]}]"), "spec.tcp[0].route", "at least one route destination"},
		{"tcp weights", vs("hosts: [r]\ntcp: [{route: [{destination: {host: a}, weight: 10}, {destination: {host: b}, weight: 10}]}]"), "spec.tcp[0].route", "weights sum to 20, want 100"},
		{"tls no match", vs("hosts: [r]\ntls: [{route: [{destination: {host: a}}]}]"), "spec.tls[0].match", "at least one match"},
		{"tls no sni", vs("hosts: [r]\ntls: [{match: [{port: 443}], route: [{destination: {host: a}}]}]"), "spec.tls[0].match[0].sniHosts", "at least one SNI host"},
		{"tls weights", vs("hosts: [r]\ntls: [{match: [{sniHosts: [r]}], route: [{destination: {host: a}, weight: 30}, {destination: {host: b}, weight: 30}]}]"), "spec.tls[0].route", "weights sum to 60, want 100"},

		// DestinationRule
		{"dr no host", object(net, "DestinationRule", "subsets: [{name: v1, labels: {v: '1'}}]"), "spec.host", "host is required"},
		{"dr bad host", object(net, "DestinationRule", "host: 'https://r'"), "spec.host", "scheme"},
		{"dr subset no name", object(net, "DestinationRule", "host: r\nsubsets: [{labels: {v: '1'}}]"), "spec.subsets[0].name", "subset name is required"},
		{"dr subset bad name", object(net, "DestinationRule", "host: r\nsubsets: [{name: V1, labels: {v: '1'}}]"), "spec.subsets[0].name", "DNS-1123 label"},
		{"dr subset duplicate", object(net, "DestinationRule", "host: r\nsubsets: [{name: v1, labels: {v: '1'}}, {name: v1, labels: {v: '2'}}]"), "spec.subsets[1].name", `subset "v1" is already defined at subsets[0]`},
		{"dr subset no labels", object(net, "DestinationRule", "host: r\nsubsets: [{name: v1}]"), "spec.subsets[0].labels", "labels are required"},
		{"dr port zero", object(net, "DestinationRule", "host: r\ntrafficPolicy: {portLevelSettings: [{port: {number: 0}}]}"), "spec.trafficPolicy.portLevelSettings[0].port.number", "out of range 1-65535"},
		{"dr port too big", object(net, "DestinationRule", "host: r\ntrafficPolicy: {portLevelSettings: [{port: {number: 65536}}]}"), "spec.trafficPolicy.portLevelSettings[0].port.number", "out of range 1-65535"},
		{"dr port duplicate", object(net, "DestinationRule", "host: r\ntrafficPolicy: {portLevelSettings: [{port: {number: 80}}, {port: {number: 80}}]}"), "spec.trafficPolicy.portLevelSettings[1].port.number", "already has settings at portLevelSettings[0]"},
		{"dr subset port duplicate", object(net, "DestinationRule", "host: r\nsubsets: [{name: v1, labels: {v: '1'}, trafficPolicy: {portLevelSettings: [{port: {number: 80}}, {port: {number: 80}}]}}]"), "spec.subsets[0].trafficPolicy.portLevelSettings[1].port.number", "already has settings"},

		// ServiceEntry
		{"se no hosts", object(net, "ServiceEntry", "ports: [{number: 80, name: http}]"), "spec.hosts", "at least one host"},
		{"se star host", object(net, "ServiceEntry", "hosts: ['*']\nports: [{number: 80, name: http}]"), "spec.hosts[0]", "not allowed here"},
		{"se no ports", object(net, "ServiceEntry", "hosts: [a.com]"), "spec.ports", "at least one port"},
		{"se port zero", object(net, "ServiceEntry", "hosts: [a.com]\nports: [{number: 0, name: http}]"), "spec.ports[0].number", "out of range 1-65535"},
		{"se port no name", object(net, "ServiceEntry", "hosts: [a.com]\nports: [{number: 80}]"), "spec.ports[0].name", "port name is required"},
		{"se port duplicate name", object(net, "ServiceEntry", "hosts: [a.com]\nports: [{number: 80, name: http}, {number: 81, name: http}]"), "spec.ports[1].name", `"http" is already used by ports[0]`},
		{"se static hostname", object(net, "ServiceEntry", "hosts: [a.com]\nports: [{number: 80, name: http}]\nresolution: STATIC\nendpoints: [{address: b.com}]"), "spec.endpoints[0].address", "must be an IP address or unix:// path"},
		{"se endpoints and selector", object(net, "ServiceEntry", "hosts: [a.com]\nports: [{number: 80, name: http}]\nresolution: STATIC\nworkloadSelector: {labels: {app: a}}\nendpoints: [{address: 1.1.1.1}]"), "spec.endpoints", "mutually exclusive"},
		{"se none with endpoints", object(net, "ServiceEntry", "hosts: [a.com]\nports: [{number: 80, name: http}]\nresolution: NONE\nendpoints: [{address: 1.1.1.1}]"), "spec.endpoints", "resolution NONE takes no endpoints"},
		{"se endpoint unknown port", object(net, "ServiceEntry", "hosts: [a.com]\nports: [{number: 80, name: http}]\nresolution: DNS\nendpoints: [{address: b.com, ports: {https: 443}}]"), "spec.endpoints[0].ports[https]", "not one of the service entry's port names"},
		{"se endpoint port range", object(net, "ServiceEntry", "hosts: [a.com]\nports: [{number: 80, name: http}]\nresolution: DNS\nendpoints: [{address: b.com, ports: {http: 0}}]"), "spec.endpoints[0].ports[http]", "out of range"},
		{"se endpoint no address", object(net, "ServiceEntry", "hosts: [a.com]\nports: [{number: 80, name: http}]\nresolution: DNS\nendpoints: [{ports: {http: 8080}}]"), "spec.endpoints[0].address", "address is required"},

		// WorkloadEntry
		{"we no address", object(net, "WorkloadEntry", "ports: {http: 80}"), "spec.address", "address is required"},
		{"we bad address", object(net, "WorkloadEntry", "address: 'not an address'"), "spec.address", "neither an IP address nor a host name"},
		{"we port zero", object(net, "WorkloadEntry", "address: 1.2.3.4\nports: {http: 0}"), "spec.ports[http]", "out of range 1-65535"},
		{"we port too big", object(net, "WorkloadEntry", "address: 1.2.3.4\nports: {http: 70000}"), "spec.ports[http]", "out of range 1-65535"},
		{"we locality", object(net, "WorkloadEntry", "address: 1.2.3.4\nlocality: a/b/c/d"), "spec.locality", "has 4 parts, want at most 3"},

		// Gateway
		{"gw no servers", object(net, "Gateway", "selector: {istio: ingressgateway}"), "spec.servers", "at least one server"},
		{"gw no port", object(net, "Gateway", "servers: [{hosts: ['*']}]"), "spec.servers[0].port", "port is required"},
		{"gw port range", object(net, "Gateway", "servers: [{port: {number: 0, protocol: HTTP}, hosts: ['*']}]"), "spec.servers[0].port.number", "out of range 1-65535"},
		{"gw no protocol", object(net, "Gateway", "servers: [{port: {number: 80}, hosts: ['*']}]"), "spec.servers[0].port.protocol", "protocol is required"},
		{"gw no hosts", object(net, "Gateway", "servers: [{port: {number: 80, protocol: HTTP}}]"), "spec.servers[0].hosts", "at least one host"},
		{"gw bad host", object(net, "Gateway", "servers: [{port: {number: 80, protocol: HTTP}, hosts: ['a:80']}]"), "spec.servers[0].hosts[0]", "port"},
		{"gw bad namespace", object(net, "Gateway", "servers: [{port: {number: 80, protocol: HTTP}, hosts: ['Prod/a.com']}]"), "spec.servers[0].hosts[0]", "namespace"},
		{"gw simple tls no cert", object(net, "Gateway", "servers: [{port: {number: 443, protocol: HTTPS}, hosts: [a.com], tls: {mode: SIMPLE}}]"), "spec.servers[0].tls", "TLS mode SIMPLE requires credentialName or serverCertificate"},
		{"gw mutual tls no cert", object(net, "Gateway", "servers: [{port: {number: 443, protocol: HTTPS}, hosts: [a.com], tls: {mode: MUTUAL}}]"), "spec.servers[0].tls", "TLS mode MUTUAL requires"},

		// Sidecar
		{"sidecar host without namespace", object(net, "Sidecar", "egress: [{hosts: [reviews.com]}]"), "spec.egress[0].hosts[0]", "namespace/host"},
		{"sidecar bad namespace", object(net, "Sidecar", "egress: [{hosts: ['a_b/*']}]"), "spec.egress[0].hosts[0]", "namespace"},
		{"sidecar bad host", object(net, "Sidecar", "egress: [{hosts: ['./a b']}]"), "spec.egress[0].hosts[0]", "spaces"},
		{"sidecar no hosts", object(net, "Sidecar", "egress: [{port: {number: 80}}]"), "spec.egress[0].hosts", "at least one host"},

		// WorkloadGroup
		{"wg no template", object(net, "WorkloadGroup", "metadata: {labels: {app: a}}"), "spec.template", "template is required"},
		{"wg template port", object(net, "WorkloadGroup", "template: {ports: {http: 0}}"), "spec.template.ports[http]", "out of range"},

		// security
		{"pa bad selector", object(sec, "PeerAuthentication", "selector: {matchLabels: {'-app': a}}"), "spec.selector.matchLabels[-app]", "label key"},
		{"pa port zero", object(sec, "PeerAuthentication", "selector: {matchLabels: {app: a}}\nportLevelMtls: {0: {mode: STRICT}}"), "spec.portLevelMtls[0]", "out of range"},
		{"ra bad selector", object(sec, "RequestAuthentication", "selector: {matchLabels: {app: 'a b'}}"), "spec.selector.matchLabels[app]", `label value "a b" may hold only letters`},
		{"ra no issuer", object(sec, "RequestAuthentication", "jwtRules: [{jwksUri: 'https://x'}]"), "spec.jwtRules[0].issuer", "issuer is required"},
		{"ap bad selector", object(sec, "AuthorizationPolicy", "selector: {matchLabels: {app: '"+strings.Repeat("x", 64)+"'}}"), "spec.selector.matchLabels[app]", "longer than 63"},
		{"telemetry selector and targetRefs", object(tel, "Telemetry", "selector: {matchLabels: {app: a}}\ntargetRefs: [{kind: Gateway, name: gw}]"), "spec.selector", "cannot both be set"},
		{"telemetry sampling over 100", object(tel, "Telemetry", "tracing: [{randomSamplingPercentage: 101}]"), "spec.tracing[0].randomSamplingPercentage", "out of range"},
		{"telemetry provider without name", object(tel, "Telemetry", "accessLogging: [{providers: [{}]}]"), "spec.accessLogging[0].providers[0].name", "required"},
		{"telemetry custom tag without type", object(tel, "Telemetry", "tracing: [{customTags: {t: {}}}]"), "spec.tracing[0].customTags[t]", "one of literal, environment, header or formatter"},
		{"telemetry literal tag without value", object(tel, "Telemetry", "tracing: [{customTags: {t: {literal: {}}}}]"), "spec.tracing[0].customTags[t].literal.value", "required"},
		{"telemetry istio tags", object(tel, "Telemetry", "tracing: [{enableIstioTags: true}]"), "spec.tracing[0].enableIstioTags", "not supported"},
		{"telemetry reporting interval", object(tel, "Telemetry", "metrics: [{reportingInterval: 5s}]"), "spec.metrics[0].reportingInterval", "not supported"},
		{"telemetry upsert without value", object(tel, "Telemetry", "metrics: [{overrides: [{tagOverrides: {t: {operation: UPSERT}}}]}]"), "spec.metrics[0].overrides[0].tagOverrides[t].value", "needs a value"},
		{"ap custom without provider", object(sec, "AuthorizationPolicy", "action: CUSTOM\nrules: [{to: [{operation: {paths: [/admin]}}]}]"), "spec.provider.name", "action CUSTOM needs a provider"},
		{"ap provider without custom", object(sec, "AuthorizationPolicy", "action: DENY\nprovider: {name: ext-authz}\nrules: [{}]"), "spec.provider", "only allowed with action CUSTOM"},
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
			if e.Name != "obj" && !strings.HasPrefix(tt.field, "metadata.name") {
				t.Errorf("error names %q, want obj", e.Name)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct{ name, doc string }{
		{"canary at zero", vsHTTP("- route:\n  - {destination: {host: a}, weight: 100}\n  - {destination: {host: b}, weight: 0}")},
		{"single weight 100", vsHTTP("- route: [{destination: {host: a}, weight: 100}]")},
		{"star host on gateway", vs("hosts: ['*']\ngateways: [istio-system/gw]\nhttp: [{route: [{destination: {host: r}}]}]")},
		{"wildcard host", vs("hosts: ['*.example.com', reviews.ns.svc.cluster.local., 10.0.0.1]\nhttp: [{route: [{destination: {host: r}}]}]")},
		{"header presence", vsHTTP("- match: [{headers: {x-canary: {}}, withoutHeaders: {x-debug: {}}, queryParams: {q: {}}}]\n  route: [{destination: {host: r}}]")},
		{"go durations", vsHTTP("- timeout: 1h30m\n  retries: {attempts: 0, perTryTimeout: 250ms}\n  route: [{destination: {host: r}}]")},
		{"redirect", vsHTTP("- redirect: {uri: /new, redirectCode: 301}")},
		{"direct response", vsHTTP("- directResponse: {status: 503, body: {string: unavailable}}")},
		{"delegate", vsHTTP("- delegate: {name: reviews-routes, namespace: shop}")},
		{"tcp", vs("hosts: [db]\ntcp: [{match: [{port: 5432}], route: [{destination: {host: db, port: {number: 5432}}}]}]")},
		{"se dns hostname endpoints", object(net, "ServiceEntry", "hosts: [api.example.com]\nports: [{number: 443, name: https, protocol: TLS}]\nresolution: DNS\nendpoints: [{address: eu.api.example.com}, {address: us.api.example.com, ports: {https: 8443}}]")},
		{"se static unix", object(net, "ServiceEntry", "hosts: [local.sock]\nports: [{number: 80, name: http}]\nresolution: STATIC\nendpoints: [{address: 'unix:///var/run/a.sock'}, {address: '2001:db8::1'}]")},
		{"se selector", object(net, "ServiceEntry", "hosts: [vm.example.com]\nports: [{number: 80, name: http}]\nresolution: STATIC\nworkloadSelector: {labels: {app: vm}}")},
		{"we hostname", object(net, "WorkloadEntry", "address: vm1.example.com")},
		{"gateway cert files", object(net, "Gateway", "servers: [{port: {number: 443, protocol: HTTPS}, hosts: ['*/a.com'], tls: {mode: SIMPLE, serverCertificate: /etc/c.pem, privateKey: /etc/k.pem}}]")},
		{"gateway passthrough", object(net, "Gateway", "servers: [{port: {number: 443, protocol: TLS}, hosts: [a.com], tls: {mode: PASSTHROUGH}}]")},
		{"ap deny", object(sec, "AuthorizationPolicy", "action: DENY\nrules: [{from: [{source: {notNamespaces: [prod]}}]}]")},
		{"ap allow nothing", object(sec, "AuthorizationPolicy", "{}")},
		{"telemetry every level", object(tel, "Telemetry", "selector: {matchLabels: {app: a}}\naccessLogging: [{providers: [{name: envoy}], match: {mode: SERVER}, filter: {expression: 'response.code >= 400'}}]\ntracing: [{providers: [{name: otel}], randomSamplingPercentage: 0.5, customTags: {h: {header: {name: x-user}}, e: {environment: {name: POD}}, f: {formatter: {value: '%REQ(:PATH)%'}}}}]\nmetrics: [{providers: [{name: prometheus}], overrides: [{match: {customMetric: my_metric, mode: CLIENT}, disabled: true}, {tagOverrides: {t: {operation: REMOVE}}}]}]")},
		{"telemetry gateway targetRef", object(tel, "Telemetry", "targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\ntracing: [{disableSpanReporting: true}]")},
		{"pa mesh-wide", object(sec, "PeerAuthentication", "mtls: {mode: STRICT}")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			decodeOne(t, tt.doc, "ok.yaml")
		})
	}
}

func TestValidateRegistryKinds(t *testing.T) {
	kind := func(name string) *Kind {
		k, err := KindFor("nave.io/v1", name)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	svc, wl := kind("Service"), kind("Workload")
	tests := []struct {
		name   string
		obj    *Object
		field  string // "" for valid
		reason string
	}{
		{"service ok", &Object{Kind: svc, Name: "reviews", Namespace: "shop", Spec: &meshconfigv1.Service{
			Hostname: "reviews.shop.svc.cluster.local", Ports: []*meshconfigv1.ServicePort{{Name: "http", Number: 9080, TargetPort: 8080}}}}, "", ""},
		{"service no hostname", &Object{Kind: svc, Name: "reviews", Namespace: "shop", Spec: &meshconfigv1.Service{}}, "spec.hostname", "hostname is required"},
		{"service bad hostname", &Object{Kind: svc, Name: "reviews", Namespace: "shop", Spec: &meshconfigv1.Service{Hostname: "reviews:80"}}, "spec.hostname", "port"},
		{"service port zero", &Object{Kind: svc, Name: "reviews", Namespace: "shop", Spec: &meshconfigv1.Service{
			Hostname: "reviews", Ports: []*meshconfigv1.ServicePort{{Number: 0}}}}, "spec.ports[0].number", "out of range 1-65535"},
		{"service port too big", &Object{Kind: svc, Name: "reviews", Namespace: "shop", Spec: &meshconfigv1.Service{
			Hostname: "reviews", Ports: []*meshconfigv1.ServicePort{{Number: 80}, {Number: 65536}}}}, "spec.ports[1].number", "out of range"},
		{"service named target port", &Object{Kind: svc, Name: "reviews", Namespace: "shop", Spec: &meshconfigv1.Service{
			Hostname: "reviews", Ports: []*meshconfigv1.ServicePort{{Number: 80, TargetPortName: "http-web"}}}}, "", ""},
		{"service both target ports", &Object{Kind: svc, Name: "reviews", Namespace: "shop", Spec: &meshconfigv1.Service{
			Hostname: "reviews", Ports: []*meshconfigv1.ServicePort{{Number: 80, TargetPort: 8080, TargetPortName: "http-web"}}}}, "spec.ports[0].targetPortName", "exclusive"},
		{"workload ok", &Object{Kind: wl, Name: "reviews-1", Namespace: "shop", Spec: &meshconfigv1.Workload{Address: "10.0.0.7", Ports: map[string]uint32{"http": 9080}}}, "", ""},
		{"workload no address", &Object{Kind: wl, Name: "reviews-1", Namespace: "shop", Spec: &meshconfigv1.Workload{}}, "spec.address", "address is required"},
		{"wrong spec type", &Object{Kind: wl, Name: "reviews-1", Namespace: "shop", Spec: &meshconfigv1.Service{}}, "spec", "want type.googleapis.com/nave.meshconfig.v1.Workload"},
		{"no spec", &Object{Kind: wl, Name: "reviews-1", Namespace: "shop"}, "spec", "spec is missing"},
		{"no kind", &Object{Name: "x", Namespace: "shop"}, "kind", "kind is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.obj.Origin = "kubernetes"
			err := Validate(tt.obj)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var oe *ObjectError
			if !errors.As(err, &oe) {
				t.Fatalf("Validate = %v, want an *ObjectError", err)
			}
			if oe.Field != tt.field || !strings.Contains(oe.Reason, tt.reason) {
				t.Errorf("got %q: %q, want %q: ...%q...", oe.Field, oe.Reason, tt.field, tt.reason)
			}
			if oe.Origin != "kubernetes" || oe.Index != -1 {
				t.Errorf("origin %q index %d, want kubernetes -1", oe.Origin, oe.Index)
			}
		})
	}
}
