package envoysim

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"

	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Token is a JWT a request carries. Signatures are not computed: KeyID
// names the key that signed it, and Invalid marks a token that fails
// verification anyway (expired, tampered). It is a plain value.
type Token struct {
	// Header is the (lower-case) header the token is sent in, with Prefix
	// before it; Param a query parameter instead. Neither: the
	// Authorization header with "Bearer ".
	Header, Prefix, Param string
	Claims                map[string]any
	KeyID                 string
	Invalid               bool
}

// jwtFilterName is where jwt_authn writes verified payloads.
const jwtFilterName = "envoy.filters.http.jwt_authn"

// jwtAuthn applies an envoy.filters.http.jwt_authn filter, following
// Envoy's documented semantics for the forms the generators emit: rules
// matched by route match, requirements provider_name, requires_any and
// allow_missing (a missing token passes; a token some provider would read
// that no provider verifies is refused). A provider verifies a token of
// its issuer, with one of its audiences when it lists any, signed by a
// key it has: for an inline key set, the token's KeyID must name one of
// its keys; a remote key set is assumed to hold the token's key when it
// has a KeyID. The payload of a verified token goes to the request's
// metadata under payload_in_metadata, space-delimited claims split into
// lists.
func jwtAuthn(a *anypb.Any, r Request, res *Result) (handled, ok bool) {
	cfg := new(jwtv3.JwtAuthentication)
	if !a.MessageIs(cfg) {
		return false, true
	}
	if err := a.UnmarshalTo(cfg); err != nil {
		res.Err = err
		return true, false
	}
	var req *jwtv3.JwtRequirement
	for _, rule := range cfg.GetRules() {
		if ok, _ := routeMatches(rule.GetMatch(), r); ok {
			req = rule.GetRequires()
			break
		}
	}
	if req == nil {
		return true, true
	}
	// Which providers see a token, and whether it verifies for them.
	present := false
	names := make([]string, 0, len(cfg.GetProviders()))
	for n := range cfg.GetProviders() {
		names = append(names, n)
	}
	sort.Strings(names)
	verified := map[string]bool{}
	for _, n := range names {
		p := cfg.GetProviders()[n]
		if !extracts(p, r) {
			continue
		}
		present = true
		ok, err := verifies(p, r.JWT)
		if err != nil {
			res.Err = fmt.Errorf("jwt provider %s: %w", n, err)
			return true, false
		}
		verified[n] = ok
	}
	var pass func(*jwtv3.JwtRequirement) (bool, error)
	pass = func(q *jwtv3.JwtRequirement) (bool, error) {
		switch t := q.GetRequiresType().(type) {
		case *jwtv3.JwtRequirement_ProviderName:
			return verified[t.ProviderName], nil
		case *jwtv3.JwtRequirement_AllowMissing:
			return !present, nil
		case *jwtv3.JwtRequirement_RequiresAny:
			for _, sub := range t.RequiresAny.GetRequirements() {
				if ok, err := pass(sub); err != nil || ok {
					return ok, err
				}
			}
			return false, nil
		}
		return false, fmt.Errorf("jwt requirement %T is not modelled", q.GetRequiresType())
	}
	ok, err := pass(req)
	if err != nil {
		res.Err = err
		return true, false
	}
	if !ok {
		res.Denied = "jwt_authn: the request's token does not verify (401)"
		return true, false
	}
	for _, n := range names {
		if !verified[n] {
			continue
		}
		p := cfg.GetProviders()[n]
		if key := p.GetPayloadInMetadata(); key != "" {
			payload := map[string]any{}
			for k, v := range r.JWT.Claims {
				if s, isStr := v.(string); isStr && slices.Contains(p.GetNormalizePayloadInMetadata().GetSpaceDelimitedClaims(), k) {
					var list []any
					for _, f := range strings.Fields(s) {
						list = append(list, f)
					}
					v = list
				}
				payload[k] = v
			}
			if res.Metadata == nil {
				res.Metadata = map[string]map[string]any{}
			}
			if res.Metadata[jwtFilterName] == nil {
				res.Metadata[jwtFilterName] = map[string]any{}
			}
			res.Metadata[jwtFilterName][key] = payload
		}
		break
	}
	return true, true
}

// extracts reports whether provider p reads the request's token from
// where it is sent (Envoy's default locations when p names none).
func extracts(p *jwtv3.JwtProvider, r Request) bool {
	t := r.JWT
	if t == nil {
		return false
	}
	header, prefix := t.Header, t.Prefix
	if header == "" && t.Param == "" {
		header, prefix = "authorization", "Bearer "
	}
	if len(p.GetFromHeaders()) == 0 && len(p.GetFromParams()) == 0 && len(p.GetFromCookies()) == 0 {
		return (header == "authorization" && prefix == "Bearer ") || t.Param == "access_token"
	}
	for _, h := range p.GetFromHeaders() {
		if strings.EqualFold(h.GetName(), header) && h.GetValuePrefix() == prefix {
			return true
		}
	}
	if t.Param != "" {
		_, q, _ := strings.Cut(r.Path, "?")
		vals, _ := url.ParseQuery(q)
		return slices.Contains(p.GetFromParams(), t.Param) && vals.Has(t.Param)
	}
	return false
}

func verifies(p *jwtv3.JwtProvider, t *Token) (bool, error) {
	if t.Invalid || t.Claims["iss"] != p.GetIssuer() {
		return false, nil
	}
	if auds := p.GetAudiences(); len(auds) > 0 {
		var have []any
		switch a := t.Claims["aud"].(type) {
		case string:
			have = []any{a}
		case []any:
			have = a
		}
		if !slices.ContainsFunc(have, func(a any) bool { s, _ := a.(string); return slices.Contains(auds, s) }) {
			return false, nil
		}
	}
	switch src := p.GetJwksSourceSpecifier().(type) {
	case *jwtv3.JwtProvider_LocalJwks:
		var set struct {
			Keys []struct {
				Kid string `json:"kid"`
			} `json:"keys"`
		}
		if err := json.Unmarshal([]byte(src.LocalJwks.GetInlineString()), &set); err != nil {
			return false, fmt.Errorf("inline jwks: %w", err)
		}
		return slices.ContainsFunc(set.Keys, func(k struct {
			Kid string `json:"kid"`
		}) bool {
			return t.KeyID != "" && k.Kid == t.KeyID
		}), nil
	case *jwtv3.JwtProvider_RemoteJwks:
		return t.KeyID != "", nil
	}
	return false, fmt.Errorf("jwks source %T is not modelled", p.GetJwksSourceSpecifier())
}
