package routes

import (
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/mesh"
)

// delegated inlines the routes of the delegate VirtualService hr names.
func (t *Translator) delegated(cfg *mesh.Config, field string, hr *networking.HTTPRoute, matches []*networking.HTTPMatchRequest, nested bool, ctx Context) []*routev3.Route {
	d := hr.GetDelegate()
	switch {
	case !t.envoy:
		t.problem(cfg.Ref(), field+".delegate", "delegate is not supported for proxyless gRPC; route skipped")
		return nil
	case nested:
		t.problem(cfg.Ref(), field+".delegate", "delegation is one level deep: a delegate VirtualService cannot delegate; route skipped")
		return nil
	}
	ns := d.GetNamespace()
	if ns == "" {
		ns = cfg.Object.Namespace
	}
	child := t.delegate(ns, d.GetName())
	if child == nil {
		t.problem(cfg.Ref(), field+".delegate", "no VirtualService "+ns+"/"+d.GetName()+"; route skipped")
		return nil
	}
	if len(child.VirtualService().GetHosts()) > 0 {
		t.problem(child.Ref(), "spec.hosts", "a delegate VirtualService (delegated to by "+cfg.Ref()+") must have no hosts; not inlined")
		return nil
	}
	return t.httpRoutes(child, child.VirtualService().GetHttp(), hr, matches, ctx)
}

// mergeMatches ANDs every parent clause with every child clause. A pair
// that cannot hold together (e.g. a child uri outside the parent's
// prefix) is dropped and reported; ok is false when nothing is left.
func (t *Translator) mergeMatches(child *mesh.Config, field string, parents, children, written []*networking.HTTPMatchRequest) ([]*networking.HTTPMatchRequest, bool) {
	var out []*networking.HTTPMatchRequest
	for _, p := range parents {
		for k, c := range children {
			m, conflict := mergeMatch(p, c)
			if conflict != "" {
				f := field
				if len(written) > 0 {
					f += ".match[" + strconv.Itoa(k) + "]"
				}
				t.problem(child.Ref(), f, conflict+"; dropped")
				continue
			}
			out = append(out, m)
		}
	}
	return out, len(out) > 0
}

// mergeMatch ANDs a delegating route's match p with a delegate's match c,
// or says why they conflict.
func mergeMatch(p, c *networking.HTTPMatchRequest) (*networking.HTTPMatchRequest, string) {
	out := proto.Clone(c).(*networking.HTTPMatchRequest)
	switch {
	case p.GetUri() == nil:
	case c.GetUri() == nil:
		out.Uri = p.GetUri()
	case !uriWithin(p.GetUri(), c.GetUri()):
		return nil, "uri " + c.GetUri().String() + " is not within the delegating route's uri " + p.GetUri().String()
	}
	for _, f := range []struct {
		name string
		p, c *networking.StringMatch
		dst  **networking.StringMatch
	}{{"scheme", p.GetScheme(), c.GetScheme(), &out.Scheme}, {"method", p.GetMethod(), c.GetMethod(), &out.Method}, {"authority", p.GetAuthority(), c.GetAuthority(), &out.Authority}} {
		switch {
		case f.p == nil:
		case f.c == nil:
			*f.dst = f.p
		case !proto.Equal(f.p, f.c):
			return nil, f.name + " conflicts with the delegating route's"
		}
	}
	var conflict string
	out.Headers, conflict = mergeStringMatches("headers", p.GetHeaders(), c.GetHeaders())
	if conflict != "" {
		return nil, conflict
	}
	if out.WithoutHeaders, conflict = mergeStringMatches("withoutHeaders", p.GetWithoutHeaders(), c.GetWithoutHeaders()); conflict != "" {
		return nil, conflict
	}
	if out.QueryParams, conflict = mergeStringMatches("queryParams", p.GetQueryParams(), c.GetQueryParams()); conflict != "" {
		return nil, conflict
	}
	if p.GetPort() != 0 {
		if c.GetPort() != 0 && c.GetPort() != p.GetPort() {
			return nil, "port conflicts with the delegating route's"
		}
		out.Port = p.GetPort()
	}
	for k, v := range p.GetSourceLabels() {
		if cv, ok := c.GetSourceLabels()[k]; ok && cv != v {
			return nil, "sourceLabels." + k + " conflicts with the delegating route's"
		}
		if out.SourceLabels == nil {
			out.SourceLabels = map[string]string{}
		}
		out.SourceLabels[k] = v
	}
	out.IgnoreUriCase = p.GetIgnoreUriCase() || c.GetIgnoreUriCase()
	out.Gateways = p.GetGateways()
	return out, ""
}

func mergeStringMatches(name string, p, c map[string]*networking.StringMatch) (map[string]*networking.StringMatch, string) {
	if len(p) == 0 {
		return c, ""
	}
	out := make(map[string]*networking.StringMatch, len(p)+len(c))
	for k, v := range c {
		out[k] = v
	}
	for k, v := range p {
		if cv, ok := c[k]; ok && !proto.Equal(cv, v) {
			return nil, name + "." + k + " conflicts with the delegating route's"
		}
		out[k] = v
	}
	return out, ""
}

// uriWithin reports whether every uri matching c also matches p.
func uriWithin(p, c *networking.StringMatch) bool {
	switch pm := p.GetMatchType().(type) {
	case *networking.StringMatch_Prefix:
		switch cm := c.GetMatchType().(type) {
		case *networking.StringMatch_Prefix:
			return strings.HasPrefix(cm.Prefix, pm.Prefix)
		case *networking.StringMatch_Exact:
			return strings.HasPrefix(cm.Exact, pm.Prefix)
		}
	}
	return proto.Equal(p, c)
}

// inherit fills the settings a delegate's route leaves unset from the
// delegating route (Istio: the delegate's own settings win).
func inherit(hr, parent *networking.HTTPRoute) *networking.HTTPRoute {
	if parent.GetTimeout() == nil && parent.GetRetries() == nil && parent.GetFault() == nil && parent.GetCorsPolicy() == nil &&
		parent.GetHeaders() == nil && parent.GetRewrite() == nil && parent.GetMirror() == nil && len(parent.GetMirrors()) == 0 {
		return hr
	}
	out := proto.Clone(hr).(*networking.HTTPRoute)
	if out.Timeout == nil {
		out.Timeout = parent.GetTimeout()
	}
	if out.Retries == nil {
		out.Retries = parent.GetRetries()
	}
	if out.Fault == nil {
		out.Fault = parent.GetFault()
	}
	if out.CorsPolicy == nil {
		out.CorsPolicy = parent.GetCorsPolicy()
	}
	if out.Headers == nil {
		out.Headers = parent.GetHeaders()
	}
	if out.Rewrite == nil {
		out.Rewrite = parent.GetRewrite()
	}
	if out.Mirror == nil && len(out.Mirrors) == 0 {
		out.Mirror, out.Mirrors, out.MirrorPercentage = parent.GetMirror(), parent.GetMirrors(), parent.GetMirrorPercentage()
	}
	return out
}

// virtualServiceByName finds a VirtualService by namespace and name (for
// delegation), or nil.
func virtualServiceByName(s *mesh.Snapshot, namespace, name string) *mesh.Config {
	for _, c := range s.AllVirtualServices {
		if c.Object.Namespace == namespace && c.Object.Name == name {
			return c
		}
	}
	return nil
}
