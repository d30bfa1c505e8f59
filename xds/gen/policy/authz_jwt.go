package policy

import (
	"fmt"
	"strings"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// JWT facts the authorization rules read: the jwt_authn filter writes the
// payload of a verified token into the request's dynamic metadata, under
// the filter's name, key jwtPayloadKey (every provider uses the same key;
// a request carries at most one verified token).
const (
	JWTAuthnFilter = "envoy.filters.http.jwt_authn"
	jwtPayloadKey  = "payload"
)

// claimMatcher matches a payload claim at path (nested claims: one key
// per level) against m.
func claimMatcher(path []string, v *matcherv3.ValueMatcher) *rbacv3.Principal {
	segs := make([]*matcherv3.MetadataMatcher_PathSegment, 0, len(path)+1)
	for _, k := range append([]string{jwtPayloadKey}, path...) {
		segs = append(segs, &matcherv3.MetadataMatcher_PathSegment{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: k}})
	}
	//lint:ignore SA1019 sourced_metadata replaces it only in Envoy ≥1.34; metadata (dynamic) works in every Envoy a mesh runs
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Metadata{Metadata: &matcherv3.MetadataMatcher{
		Filter: JWTAuthnFilter, Path: segs, Value: v}}}
}

func claimString(path []string, m *matcherv3.StringMatcher) *rbacv3.Principal {
	return claimMatcher(path, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: m}})
}

func claimPresent(path []string) *rbacv3.Principal {
	return claimMatcher(path, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: true}})
}

func exactString(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}

func prefixString(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: s}}
}

func suffixString(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: s}}
}

// requestPrincipal matches the request principal, Istio's "ISS/SUB" of a
// verified JWT. The payload holds iss and sub apart and the issuer may
// itself contain '/', so each form is spelled out over the places the
// separating '/' can be, which is exact:
//   - "I/S": iss == I and sub == S, for some split of the value at a '/';
//   - "X*": iss starts with X, or iss == X[:k] and sub starts with X[k+1:];
//   - "*Y": sub ends with Y, or iss ends with Y[:k] and sub == Y[k+1:];
//   - "*": any verified token (iss and sub present).
func requestPrincipal(v string) (*rbacv3.Principal, error) {
	w, err := parseWildcard(v)
	if err != nil {
		return nil, fmt.Errorf("request principal %w", err)
	}
	iss, sub := []string{"iss"}, []string{"sub"}
	var alts []*rbacv3.Principal
	splits := func(s string, fn func(left, right string)) {
		for i := range len(s) {
			if s[i] == '/' {
				fn(s[:i], s[i+1:])
			}
		}
	}
	switch w.kind {
	case '*':
		return andIDs([]*rbacv3.Principal{claimPresent(iss), claimPresent(sub)}), nil
	case 'p':
		alts = append(alts, andIDs([]*rbacv3.Principal{claimString(iss, prefixString(w.value)), claimPresent(sub)}))
		splits(w.value, func(l, r string) {
			subM := claimPresent(sub)
			if r != "" {
				subM = claimString(sub, prefixString(r))
			}
			alts = append(alts, andIDs([]*rbacv3.Principal{claimString(iss, exactString(l)), subM}))
		})
	case 's':
		alts = append(alts, andIDs([]*rbacv3.Principal{claimPresent(iss), claimString(sub, suffixString(w.value))}))
		splits(w.value, func(l, r string) {
			issM := claimPresent(iss)
			if l != "" {
				issM = claimString(iss, suffixString(l))
			}
			alts = append(alts, andIDs([]*rbacv3.Principal{issM, claimString(sub, exactString(r))}))
		})
	default:
		if !strings.Contains(w.value, "/") {
			return nil, fmt.Errorf("request principal %q is not of the form ISSUER/SUBJECT", v)
		}
		splits(w.value, func(l, r string) {
			alts = append(alts, andIDs([]*rbacv3.Principal{claimString(iss, exactString(l)), claimString(sub, exactString(r))}))
		})
	}
	return orIDs(alts), nil
}

// claimPrincipal matches a claim that is a string or a list of strings
// (one element matching is enough), as Istio's request.auth.claims.
func claimPrincipal(path []string) func(string) (*rbacv3.Principal, error) {
	return func(v string) (*rbacv3.Principal, error) {
		w, err := parseWildcard(v)
		if err != nil {
			return nil, fmt.Errorf("claim value %w", err)
		}
		m := w.stringMatcher("", false)
		return orIDs([]*rbacv3.Principal{
			claimString(path, m),
			claimMatcher(path, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_ListMatch{ListMatch: &matcherv3.ListMatcher{
				MatchPattern: &matcherv3.ListMatcher_OneOf{OneOf: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: m}}},
			}}}),
		}), nil
	}
}

// claimPath parses "request.auth.claims[a][b]" into ["a", "b"].
func claimPath(key string) ([]string, error) {
	rest := strings.TrimPrefix(key, "request.auth.claims")
	var path []string
	for rest != "" {
		if !strings.HasPrefix(rest, "[") {
			return nil, fmt.Errorf("condition key %q is not of the form request.auth.claims[NAME], optionally with [NESTED] keys", key)
		}
		end := strings.Index(rest, "]")
		if end <= 1 {
			return nil, fmt.Errorf("condition key %q is not of the form request.auth.claims[NAME], optionally with [NESTED] keys", key)
		}
		path = append(path, rest[1:end])
		rest = rest[end+1:]
	}
	if len(path) == 0 {
		return nil, fmt.Errorf("condition key %q names no claim", key)
	}
	return path, nil
}
