package meshconfig

import (
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// validateGatewayAPI checks a Gateway API object's spec. Decoding it into
// its Go type already refused unknown and mistyped fields; the rules the
// API server's CRD schema and CEL rules (sigs.k8s.io/gateway-api
// config/crd/standard) enforce on the Kubernetes path are checked here for
// the files path and the webhook: required fields, enums, patterns,
// ranges, list sizes, and the cross-field rules (unique listeners, path
// values, filter types). Fields left out are valid: no CRD default is
// applied here, the hub's translator applies the defaults.
func validateGatewayAPI(c *checker, p path, o *Object) {
	spec, err := GatewayAPISpec(o)
	if err != nil {
		c.fail(p, "%v", err)
		return
	}
	switch s := spec.(type) {
	case *gatewayv1.GatewayClassSpec:
		validateGatewayClass(c, p, s)
	case *gatewayv1.GatewaySpec:
		validateKubernetesGateway(c, p, s)
	case *gatewayv1.HTTPRouteSpec:
		validateParentRefs(c, p.field("parentRefs"), s.ParentRefs)
		validateRouteHostnames(c, p.field("hostnames"), s.Hostnames)
		validateHTTPRules(c, p.field("rules"), s.Rules)
	case *gatewayv1.GRPCRouteSpec:
		validateParentRefs(c, p.field("parentRefs"), s.ParentRefs)
		validateRouteHostnames(c, p.field("hostnames"), s.Hostnames)
		validateGRPCRules(c, p.field("rules"), s.Rules)
	case *gatewayv1.TCPRouteSpec:
		validateParentRefs(c, p.field("parentRefs"), s.ParentRefs)
		rp := p.field("rules")
		checkItems(c, rp, len(s.Rules), 1, 16)
		for i, r := range s.Rules {
			validateBackendRefs(c, rp.index(i).field("backendRefs"), backendRefsOf(r.BackendRefs), 1)
		}
	case *gatewayv1.TLSRouteSpec:
		validateParentRefs(c, p.field("parentRefs"), s.ParentRefs)
		hp := p.field("hostnames")
		checkItems(c, hp, len(s.Hostnames), 1, 16)
		for i, h := range s.Hostnames {
			if _, err := netip.ParseAddr(string(h)); err == nil {
				c.fail(hp.index(i), "hostnames cannot contain an IP")
			}
		}
		validateRouteHostnames(c, hp, s.Hostnames)
		rp := p.field("rules")
		checkItems(c, rp, len(s.Rules), 1, 1)
		for i, r := range s.Rules {
			validateBackendRefs(c, rp.index(i).field("backendRefs"), backendRefsOf(r.BackendRefs), 1)
		}
	case *gatewayv1.ReferenceGrantSpec:
		validateReferenceGrant(c, p, s)
	default:
		c.fail(p, "no validation for %T", spec)
	}
}

// Patterns of the Gateway API's CRD schema.
var (
	gwHostname       = regexp.MustCompile(`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	gwPreciseHost    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	gwGroup          = regexp.MustCompile(`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	gwKind           = regexp.MustCompile(`^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`)
	gwNamespace      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	gwSectionName    = gwPreciseHost
	gwController     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$`)
	gwProtocol       = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9]+$`)
	gwHeaderName     = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+\\-.^_\x60|~]+$")
	gwDuration       = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)
	gwPathChars      = regexp.MustCompile(`^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$`)
	gwGRPCService    = regexp.MustCompile(`(?i)^\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$`)
	gwGRPCMethod     = regexp.MustCompile(`^[A-Za-z_][A-Za-z_0-9]*$`)
	gwAddressType    = regexp.MustCompile(`^Hostname|IPAddress|NamedAddress|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$`)
	gwRedirectScheme = []string{"http", "https"}
)

// checkItems checks a list's length against the schema's minItems and
// maxItems.
func checkItems(c *checker, p path, n, minItems, maxItems int) {
	switch {
	case n < minItems:
		c.fail(p, "at least %d item(s) required", minItems)
	case n > maxItems:
		c.fail(p, "at most %d items allowed, got %d", maxItems, n)
	}
}

// checkString checks a string's length and pattern; a nil re skips the pattern.
func checkString(c *checker, p path, s string, minLen, maxLen int, re *regexp.Regexp) {
	switch {
	case len(s) < minLen && minLen == 1:
		c.fail(p, "is required")
	case len(s) < minLen:
		c.fail(p, "must be at least %d characters", minLen)
	case len(s) > maxLen:
		c.fail(p, "must be at most %d characters", maxLen)
	case re != nil && s != "" && !re.MatchString(s):
		c.fail(p, "%q must match %s", s, re)
	}
}

func checkGWPort(c *checker, p path, port int32) {
	if port < 1 || port > 65535 {
		c.fail(p, "port %d must be between 1 and 65535", port)
	}
}

func checkEnum[T ~string](c *checker, p path, v T, allowed ...T) {
	if !slices.Contains(allowed, v) {
		names := make([]string, len(allowed))
		for i, a := range allowed {
			names[i] = string(a)
		}
		c.fail(p, "%q is not one of %s", v, strings.Join(names, ", "))
	}
}

func validateGatewayClass(c *checker, p path, s *gatewayv1.GatewayClassSpec) {
	checkString(c, p.field("controllerName"), string(s.ControllerName), 1, 253, gwController)
	if r := s.ParametersRef; r != nil {
		rp := p.field("parametersRef")
		checkString(c, rp.field("group"), string(r.Group), 0, 253, gwGroup)
		checkString(c, rp.field("kind"), string(r.Kind), 1, 63, gwKind)
		checkString(c, rp.field("name"), r.Name, 1, 253, nil)
		if r.Namespace != nil {
			checkString(c, rp.field("namespace"), string(*r.Namespace), 1, 63, gwNamespace)
		}
	}
	if s.Description != nil {
		checkString(c, p.field("description"), *s.Description, 0, 64, nil)
	}
}

func validateKubernetesGateway(c *checker, p path, s *gatewayv1.GatewaySpec) {
	checkString(c, p.field("gatewayClassName"), string(s.GatewayClassName), 1, 253, nil)
	lp := p.field("listeners")
	checkItems(c, lp, len(s.Listeners), 1, 64)
	names := map[gatewayv1.SectionName]bool{}
	type listenerKey struct {
		port     gatewayv1.PortNumber
		protocol gatewayv1.ProtocolType
		hostname gatewayv1.Hostname
	}
	keys := map[listenerKey]bool{}
	for i, l := range s.Listeners {
		ip := lp.index(i)
		checkString(c, ip.field("name"), string(l.Name), 1, 253, gwSectionName)
		if names[l.Name] {
			c.fail(ip.field("name"), "listener name %q must be unique within the Gateway", l.Name)
		}
		names[l.Name] = true
		checkGWPort(c, ip.field("port"), l.Port)
		checkString(c, ip.field("protocol"), string(l.Protocol), 1, 255, gwProtocol)
		var host gatewayv1.Hostname
		if l.Hostname != nil {
			host = *l.Hostname
			checkString(c, ip.field("hostname"), string(host), 1, 253, gwHostname)
		}
		k := listenerKey{l.Port, l.Protocol, host}
		if keys[k] {
			c.fail(ip, "the combination of port, protocol and hostname must be unique for each listener")
		}
		keys[k] = true
		switch l.Protocol {
		case gatewayv1.HTTPProtocolType, gatewayv1.TCPProtocolType, gatewayv1.UDPProtocolType:
			if l.TLS != nil {
				c.fail(ip.field("tls"), "tls must not be specified for protocols HTTP, TCP, UDP")
			}
		}
		if (l.Protocol == gatewayv1.TCPProtocolType || l.Protocol == gatewayv1.UDPProtocolType) && host != "" {
			c.fail(ip.field("hostname"), "hostname must not be specified for protocols TCP, UDP")
		}
		if l.Protocol == gatewayv1.TLSProtocolType && (l.TLS == nil || l.TLS.Mode == nil || *l.TLS.Mode == "") {
			c.fail(ip.field("tls.mode"), "tls mode must be set for protocol TLS")
		}
		if t := l.TLS; t != nil {
			tp := ip.field("tls")
			mode := gatewayv1.TLSModeTerminate
			if t.Mode != nil && *t.Mode != "" {
				mode = *t.Mode
				checkEnum(c, tp.field("mode"), mode, gatewayv1.TLSModeTerminate, gatewayv1.TLSModePassthrough)
			}
			if l.Protocol == gatewayv1.HTTPSProtocolType && mode != gatewayv1.TLSModeTerminate {
				c.fail(tp.field("mode"), "tls mode must be Terminate for protocol HTTPS")
			}
			if mode == gatewayv1.TLSModeTerminate && len(t.CertificateRefs) == 0 && len(t.Options) == 0 {
				c.fail(tp.field("certificateRefs"), "certificateRefs or options must be specified when mode is Terminate")
			}
			checkItems(c, tp.field("certificateRefs"), len(t.CertificateRefs), 0, 64)
			for j, r := range t.CertificateRefs {
				rp := tp.field("certificateRefs").index(j)
				validateObjectRef(c, rp, r.Group, r.Kind, r.Name, r.Namespace)
			}
		}
		if ar := l.AllowedRoutes; ar != nil {
			ap := ip.field("allowedRoutes")
			if ns := ar.Namespaces; ns != nil && ns.From != nil {
				checkEnum(c, ap.field("namespaces.from"), *ns.From, gatewayv1.NamespacesFromAll, gatewayv1.NamespacesFromSelector,
					gatewayv1.NamespacesFromSame, gatewayv1.NamespacesFromNone)
				if *ns.From == gatewayv1.NamespacesFromSelector && ns.Selector == nil {
					c.fail(ap.field("namespaces.selector"), "selector must be specified when from is Selector")
				}
			}
			checkItems(c, ap.field("kinds"), len(ar.Kinds), 0, 8)
			for j, k := range ar.Kinds {
				kp := ap.field("kinds").index(j)
				if k.Group != nil {
					checkString(c, kp.field("group"), string(*k.Group), 0, 253, gwGroup)
				}
				checkString(c, kp.field("kind"), string(k.Kind), 1, 63, gwKind)
			}
		}
	}
	ap := p.field("addresses")
	checkItems(c, ap, len(s.Addresses), 0, 16)
	seen := map[string]bool{}
	for i, a := range s.Addresses {
		aip := ap.index(i)
		typ := gatewayv1.IPAddressType
		if a.Type != nil {
			typ = *a.Type
			checkString(c, aip.field("type"), string(typ), 1, 253, gwAddressType)
		}
		checkString(c, aip.field("value"), a.Value, 0, 253, nil)
		switch typ {
		case gatewayv1.IPAddressType:
			if a.Value != "" {
				if _, err := netip.ParseAddr(a.Value); err != nil {
					c.fail(aip.field("value"), "%q must be a valid IP address", a.Value)
				}
			}
		case gatewayv1.HostnameAddressType:
			if a.Value != "" && !gwHostname.MatchString(a.Value) {
				c.fail(aip.field("value"), "%q must be a valid hostname", a.Value)
			}
		}
		if typ == gatewayv1.IPAddressType || typ == gatewayv1.HostnameAddressType {
			k := string(typ) + "/" + a.Value
			if a.Value != "" && seen[k] {
				c.fail(aip.field("value"), "%s values must be unique", typ)
			}
			seen[k] = true
		}
	}
}

// validateObjectRef checks a reference's group, kind, name and namespace.
func validateObjectRef(c *checker, p path, group *gatewayv1.Group, kind *gatewayv1.Kind, name gatewayv1.ObjectName, ns *gatewayv1.Namespace) {
	if group != nil {
		checkString(c, p.field("group"), string(*group), 0, 253, gwGroup)
	}
	if kind != nil {
		checkString(c, p.field("kind"), string(*kind), 1, 63, gwKind)
	}
	checkString(c, p.field("name"), string(name), 1, 253, nil)
	if ns != nil {
		checkString(c, p.field("namespace"), string(*ns), 1, 63, gwNamespace)
	}
}

func validateParentRefs(c *checker, p path, refs []gatewayv1.ParentReference) {
	checkItems(c, p, len(refs), 0, 32)
	type parent struct{ group, kind, namespace, name string }
	key := func(r gatewayv1.ParentReference) parent {
		k := parent{group: gatewayv1.GroupName, kind: "Gateway", name: string(r.Name)}
		if r.Group != nil {
			k.group = string(*r.Group)
		}
		if r.Kind != nil {
			k.kind = string(*r.Kind)
		}
		if r.Namespace != nil {
			k.namespace = string(*r.Namespace)
		}
		return k
	}
	sections := map[parent][]string{}
	for i, r := range refs {
		rp := p.index(i)
		validateObjectRef(c, rp, r.Group, r.Kind, r.Name, r.Namespace)
		section := ""
		if r.SectionName != nil {
			section = string(*r.SectionName)
			checkString(c, rp.field("sectionName"), section, 1, 253, gwSectionName)
		}
		if r.Port != nil {
			checkGWPort(c, rp.field("port"), *r.Port)
		}
		k := key(r)
		prev := sections[k]
		switch {
		case len(prev) > 0 && (section == "" || slices.Contains(prev, "")):
			c.fail(rp.field("sectionName"), "sectionName must be specified when parentRefs includes 2 or more references to the same parent")
		case slices.Contains(prev, section):
			c.fail(rp.field("sectionName"), "sectionName must be unique when parentRefs includes 2 or more references to the same parent")
		}
		sections[k] = append(prev, section)
	}
}

func validateRouteHostnames(c *checker, p path, hosts []gatewayv1.Hostname) {
	checkItems(c, p, len(hosts), 0, 16)
	for i, h := range hosts {
		checkString(c, p.index(i), string(h), 1, 253, gwHostname)
	}
}

// backendRef is what the route kinds' backend references share.
type backendRef = gatewayv1.BackendRef

func backendRefsOf(refs []gatewayv1.BackendRef) []backendRef { return refs }

// validateBackendRefs checks backend references: the object reference,
// its port (required for a Service), and weight 0 to 1,000,000.
func validateBackendRefs(c *checker, p path, refs []backendRef, minItems int) {
	checkItems(c, p, len(refs), minItems, 16)
	for i, r := range refs {
		rp := p.index(i)
		validateObjectRef(c, rp, r.Group, r.Kind, r.Name, r.Namespace)
		isService := (r.Group == nil || *r.Group == "") && (r.Kind == nil || *r.Kind == "Service")
		switch {
		case r.Port != nil:
			checkGWPort(c, rp.field("port"), *r.Port)
		case isService:
			c.fail(rp.field("port"), "port is required for a Service reference")
		}
		if r.Weight != nil && (*r.Weight < 0 || *r.Weight > 1000000) {
			c.fail(rp.field("weight"), "weight %d must be between 0 and 1000000", *r.Weight)
		}
	}
}

func validateHeaderMatches[T ~string](c *checker, p path, names []gatewayv1.HTTPHeaderName, types []*T, values []string, allowed ...T) {
	checkItems(c, p, len(names), 0, 16)
	seen := map[string]bool{}
	for i, n := range names {
		ip := p.index(i)
		checkString(c, ip.field("name"), string(n), 1, 256, gwHeaderName)
		if seen[strings.ToLower(string(n))] {
			c.fail(ip.field("name"), "header name %q must be unique within the match", n)
		}
		seen[strings.ToLower(string(n))] = true
		if types[i] != nil {
			checkEnum(c, ip.field("type"), *types[i], allowed...)
		}
		checkString(c, ip.field("value"), values[i], 1, 4096, nil)
	}
}

func validateHTTPRules(c *checker, p path, rules []gatewayv1.HTTPRouteRule) {
	checkItems(c, p, len(rules), 0, 16)
	total := 0
	for i, r := range rules {
		rp := p.index(i)
		mp := rp.field("matches")
		checkItems(c, mp, len(r.Matches), 0, 64)
		total += len(r.Matches)
		for j, m := range r.Matches {
			validateHTTPRouteMatch(c, mp.index(j), m)
		}
		validateHTTPFilters(c, rp.field("filters"), r.Filters)
		if len(r.BackendRefs) > 0 && slices.ContainsFunc(r.Filters, func(f gatewayv1.HTTPRouteFilter) bool {
			return f.Type == gatewayv1.HTTPRouteFilterRequestRedirect
		}) {
			c.fail(rp.field("filters"), "RequestRedirect filter must not be used together with backendRefs")
		}
		bp := rp.field("backendRefs")
		checkItems(c, bp, len(r.BackendRefs), 0, 16)
		for j, b := range r.BackendRefs {
			validateBackendRefs(c, bp, []backendRef{b.BackendRef}, 0)
			validateHTTPFilters(c, bp.index(j).field("filters"), b.Filters)
		}
		if t := r.Timeouts; t != nil {
			if t.Request != nil {
				checkString(c, rp.field("timeouts.request"), string(*t.Request), 1, 32, gwDuration)
			}
			if t.BackendRequest != nil {
				checkString(c, rp.field("timeouts.backendRequest"), string(*t.BackendRequest), 1, 32, gwDuration)
			}
		}
	}
	if total > 128 {
		c.fail(p, "the total number of matches across all rules in a route must be at most 128, got %d", total)
	}
}

func validateHTTPRouteMatch(c *checker, p path, m gatewayv1.HTTPRouteMatch) {
	if pm := m.Path; pm != nil {
		pp := p.field("path")
		typ := gatewayv1.PathMatchPathPrefix
		if pm.Type != nil {
			typ = *pm.Type
			checkEnum(c, pp.field("type"), typ, gatewayv1.PathMatchExact, gatewayv1.PathMatchPathPrefix, gatewayv1.PathMatchRegularExpression)
		}
		value := "/"
		if pm.Value != nil {
			value = *pm.Value
		}
		vp := pp.field("value")
		checkString(c, vp, value, 0, 1024, nil)
		if typ == gatewayv1.PathMatchExact || typ == gatewayv1.PathMatchPathPrefix {
			switch {
			case !strings.HasPrefix(value, "/"):
				c.fail(vp, "value must be an absolute path and start with '/' when type is %s", typ)
			case !gwPathChars.MatchString(value):
				c.fail(vp, "%q must only contain valid path characters", value)
			}
			for _, bad := range []string{"//", "/./", "/../", "%2f", "%2F", "#"} {
				if strings.Contains(value, bad) {
					c.fail(vp, "must not contain %q when type is %s", bad, typ)
				}
			}
			for _, bad := range []string{"/..", "/."} {
				if strings.HasSuffix(value, bad) {
					c.fail(vp, "must not end with %q when type is %s", bad, typ)
				}
			}
		}
	}
	var names []gatewayv1.HTTPHeaderName
	var types []*gatewayv1.HeaderMatchType
	var values []string
	for _, h := range m.Headers {
		names, types, values = append(names, h.Name), append(types, h.Type), append(values, h.Value)
	}
	validateHeaderMatches(c, p.field("headers"), names, types, values, gatewayv1.HeaderMatchExact, gatewayv1.HeaderMatchRegularExpression)
	names, values = nil, nil
	var qtypes []*gatewayv1.QueryParamMatchType
	for _, q := range m.QueryParams {
		names, qtypes, values = append(names, gatewayv1.HTTPHeaderName(q.Name)), append(qtypes, q.Type), append(values, q.Value)
	}
	validateHeaderMatches(c, p.field("queryParams"), names, qtypes, values, gatewayv1.QueryParamMatchExact, gatewayv1.QueryParamMatchRegularExpression)
	if m.Method != nil {
		checkEnum(c, p.field("method"), *m.Method, "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
	}
}

// httpFilterFields lists which field each HTTPRoute filter type sets.
func httpFilterFields(f gatewayv1.HTTPRouteFilter) map[gatewayv1.HTTPRouteFilterType]bool {
	return map[gatewayv1.HTTPRouteFilterType]bool{
		gatewayv1.HTTPRouteFilterRequestHeaderModifier:  f.RequestHeaderModifier != nil,
		gatewayv1.HTTPRouteFilterResponseHeaderModifier: f.ResponseHeaderModifier != nil,
		gatewayv1.HTTPRouteFilterRequestMirror:          f.RequestMirror != nil,
		gatewayv1.HTTPRouteFilterRequestRedirect:        f.RequestRedirect != nil,
		gatewayv1.HTTPRouteFilterURLRewrite:             f.URLRewrite != nil,
		gatewayv1.HTTPRouteFilterExtensionRef:           f.ExtensionRef != nil,
		gatewayv1.HTTPRouteFilterCORS:                   f.CORS != nil,
	}
}

func validateHTTPFilters(c *checker, p path, filters []gatewayv1.HTTPRouteFilter) {
	checkItems(c, p, len(filters), 0, 16)
	count := map[gatewayv1.HTTPRouteFilterType]int{}
	for i, f := range filters {
		fp := p.index(i)
		set := httpFilterFields(f)
		if !checkFilterFields(c, fp, f.Type, set) {
			continue
		}
		count[f.Type]++
		if f.Type != gatewayv1.HTTPRouteFilterRequestMirror && f.Type != gatewayv1.HTTPRouteFilterExtensionRef && count[f.Type] > 1 {
			c.fail(fp.field("type"), "%s filter cannot be repeated", f.Type)
		}
		if r := f.RequestRedirect; r != nil {
			rp := fp.field("requestRedirect")
			if r.Scheme != nil {
				checkEnum(c, rp.field("scheme"), *r.Scheme, gwRedirectScheme...)
			}
			if r.Port != nil {
				checkGWPort(c, rp.field("port"), *r.Port)
			}
			if r.StatusCode != nil && !slices.Contains([]int{301, 302, 303, 307, 308}, *r.StatusCode) {
				c.fail(rp.field("statusCode"), "%d is not one of 301, 302, 303, 307, 308", *r.StatusCode)
			}
			validatePathModifier(c, rp.field("path"), r.Path)
		}
		if r := f.URLRewrite; r != nil {
			validatePathModifier(c, fp.field("urlRewrite.path"), r.Path)
		}
		if m := f.RequestMirror; m != nil {
			if m.Percent != nil && m.Fraction != nil {
				c.fail(fp.field("requestMirror"), "only one of percent or fraction may be specified")
			}
			if m.Percent != nil && (*m.Percent < 0 || *m.Percent > 100) {
				c.fail(fp.field("requestMirror.percent"), "percent %d must be between 0 and 100", *m.Percent)
			}
			if fr := m.Fraction; fr != nil && (fr.Numerator < 0 || (fr.Denominator != nil && (*fr.Denominator < 1 || fr.Numerator > *fr.Denominator))) {
				c.fail(fp.field("requestMirror.fraction"), "numerator must be between 0 and the denominator, which is at least 1")
			}
		}
	}
	if count[gatewayv1.HTTPRouteFilterRequestRedirect] > 0 && count[gatewayv1.HTTPRouteFilterURLRewrite] > 0 {
		c.fail(p, "may specify either RequestRedirect or URLRewrite, but not both")
	}
}

func validatePathModifier(c *checker, p path, m *gatewayv1.HTTPPathModifier) {
	if m == nil {
		return
	}
	checkEnum(c, p.field("type"), m.Type, gatewayv1.FullPathHTTPPathModifier, gatewayv1.PrefixMatchHTTPPathModifier)
	if (m.Type == gatewayv1.FullPathHTTPPathModifier) != (m.ReplaceFullPath != nil) {
		c.fail(p.field("replaceFullPath"), "replaceFullPath is set exactly when type is ReplaceFullPath")
	}
	if (m.Type == gatewayv1.PrefixMatchHTTPPathModifier) != (m.ReplacePrefixMatch != nil) {
		c.fail(p.field("replacePrefixMatch"), "replacePrefixMatch is set exactly when type is ReplacePrefixMatch")
	}
}

func validateGRPCRules(c *checker, p path, rules []gatewayv1.GRPCRouteRule) {
	checkItems(c, p, len(rules), 0, 16)
	total := 0
	for i, r := range rules {
		rp := p.index(i)
		mp := rp.field("matches")
		checkItems(c, mp, len(r.Matches), 0, 64)
		total += len(r.Matches)
		for j, m := range r.Matches {
			ip := mp.index(j)
			if mm := m.Method; mm != nil {
				exact := mm.Type == nil || *mm.Type == gatewayv1.GRPCMethodMatchExact
				if mm.Type != nil {
					checkEnum(c, ip.field("method.type"), *mm.Type, gatewayv1.GRPCMethodMatchExact, gatewayv1.GRPCMethodMatchRegularExpression)
				}
				if mm.Service == nil && mm.Method == nil {
					c.fail(ip.field("method"), "one or both of service or method must be specified")
				}
				if mm.Service != nil {
					checkString(c, ip.field("method.service"), *mm.Service, 0, 1024, nil)
					if exact && !gwGRPCService.MatchString(*mm.Service) {
						c.fail(ip.field("method.service"), "%q must be a valid gRPC service name", *mm.Service)
					}
				}
				if mm.Method != nil {
					checkString(c, ip.field("method.method"), *mm.Method, 0, 1024, nil)
					if exact && !gwGRPCMethod.MatchString(*mm.Method) {
						c.fail(ip.field("method.method"), "%q must be a valid gRPC method name", *mm.Method)
					}
				}
			}
			var names []gatewayv1.HTTPHeaderName
			var types []*gatewayv1.GRPCHeaderMatchType
			var values []string
			for _, h := range m.Headers {
				names, types, values = append(names, gatewayv1.HTTPHeaderName(h.Name)), append(types, h.Type), append(values, h.Value)
			}
			validateHeaderMatches(c, ip.field("headers"), names, types, values, gatewayv1.GRPCHeaderMatchExact, gatewayv1.GRPCHeaderMatchRegularExpression)
		}
		validateGRPCFilters(c, rp.field("filters"), r.Filters)
		bp := rp.field("backendRefs")
		checkItems(c, bp, len(r.BackendRefs), 0, 16)
		for j, b := range r.BackendRefs {
			validateBackendRefs(c, bp, []backendRef{b.BackendRef}, 0)
			validateGRPCFilters(c, bp.index(j).field("filters"), b.Filters)
		}
	}
	if total > 128 {
		c.fail(p, "the total number of matches across all rules in a route must be at most 128, got %d", total)
	}
}

func validateGRPCFilters(c *checker, p path, filters []gatewayv1.GRPCRouteFilter) {
	checkItems(c, p, len(filters), 0, 16)
	count := map[gatewayv1.GRPCRouteFilterType]int{}
	for i, f := range filters {
		fp := p.index(i)
		set := map[gatewayv1.GRPCRouteFilterType]bool{
			gatewayv1.GRPCRouteFilterRequestHeaderModifier:  f.RequestHeaderModifier != nil,
			gatewayv1.GRPCRouteFilterResponseHeaderModifier: f.ResponseHeaderModifier != nil,
			gatewayv1.GRPCRouteFilterRequestMirror:          f.RequestMirror != nil,
			gatewayv1.GRPCRouteFilterExtensionRef:           f.ExtensionRef != nil,
		}
		if !checkFilterFields(c, fp, f.Type, set) {
			continue
		}
		count[f.Type]++
		if (f.Type == gatewayv1.GRPCRouteFilterRequestHeaderModifier || f.Type == gatewayv1.GRPCRouteFilterResponseHeaderModifier) && count[f.Type] > 1 {
			c.fail(fp.field("type"), "%s filter cannot be repeated", f.Type)
		}
	}
}

func validateReferenceGrant(c *checker, p path, s *gatewayv1.ReferenceGrantSpec) {
	fp := p.field("from")
	checkItems(c, fp, len(s.From), 1, 16)
	for i, f := range s.From {
		ip := fp.index(i)
		checkString(c, ip.field("group"), string(f.Group), 0, 253, gwGroup)
		checkString(c, ip.field("kind"), string(f.Kind), 1, 63, gwKind)
		checkString(c, ip.field("namespace"), string(f.Namespace), 1, 63, gwNamespace)
	}
	tp := p.field("to")
	checkItems(c, tp, len(s.To), 1, 16)
	for i, t := range s.To {
		ip := tp.index(i)
		checkString(c, ip.field("group"), string(t.Group), 0, 253, gwGroup)
		checkString(c, ip.field("kind"), string(t.Kind), 1, 63, gwKind)
		if t.Name != nil {
			checkString(c, ip.field("name"), string(*t.Name), 1, 253, nil)
		}
	}
}

// checkFilterFields checks a filter's type against the types a route
// kind has, and that exactly its type's own field is set (set says which
// field of each type is); false for an unknown type.
func checkFilterFields[T ~string](c *checker, fp path, filterType T, set map[T]bool) bool {
	types := slices.Sorted(maps.Keys(set))
	if _, ok := set[filterType]; !ok {
		checkEnum(c, fp.field("type"), filterType, types...)
		return false
	}
	for _, typ := range types {
		switch has := set[typ]; {
		case has && typ != filterType:
			c.fail(fp.field(lowerFirst(string(typ))), "must be nil if the filter type is not %s", typ)
		case !has && typ == filterType:
			c.fail(fp.field(lowerFirst(string(typ))), "must be specified for filter type %s", typ)
		}
	}
	return true
}

// lowerFirst turns a filter type into its field name:
// "RequestHeaderModifier" -> "requestHeaderModifier", "CORS" -> "cors".
func lowerFirst(s string) string {
	if s == "CORS" || s == "URLRewrite" {
		return map[string]string{"CORS": "cors", "URLRewrite": "urlRewrite"}[s]
	}
	return strings.ToLower(s[:1]) + s[1:]
}
