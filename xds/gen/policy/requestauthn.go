package policy

import (
	"cmp"
	"encoding/json"
	"net"
	"net/url"
	"slices"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/navemesh/nave/xds/mesh"
)

// unusableJWKS is a well-formed key set whose one RSA public key has no
// private key anywhere (it was generated once and the private half
// discarded): no token verifies against it. Providers whose keys nave
// cannot give Envoy use it, so that tokens of their issuer are refused
// (fail closed) while the listener stays valid.
const unusableJWKS = `{"keys":[{"kty":"RSA","kid":"nave-unusable","alg":"RS256","use":"sig","e":"AQAB","n":"pd1psmkI4gNgVUIjdMcG5pVSFr1OrluuKRtSdA9CFi9Kqfd9jiFZSRMo5gPXATkGpCr711UHYOyxGLfZUnnwowpAxXgdqXLUPH8hpu-cTX0fy_p5hK7TmBhtCvdki6EIdLgGe0LoXE2vv3ItyvUjU9hiCmouZa7jK95hl2zsGz2Anw7cLO_18vFEg9sTv27cQ0gS46lFEjdmYT6-5OMiVBCUc2um372P0odnUIyXraX6BtuFqqr29qtRD5TJKaLV47DqZi-CKCop8dS_42P6Ldxk-iAUIRCexj1_KyzjeX97myvfNxr2Hv4PxERrGzK3l6G_JL94_Qjtjl8VKYHYHQ"}]}`

// defaultJWKSTimeout bounds a remote JWKS fetch when the rule sets no
// timeout.
var defaultJWKSTimeout = durationpb.New(5e9)

// SelectRequestAuthentications returns the RequestAuthentications that
// apply to a workload in namespace with labels, in snapshot order: the
// root namespace's without a selector (mesh-wide), and the workload
// namespace's without a selector or with one matching the labels. Unlike
// PeerAuthentication, all of them apply together: their JWT rules are
// merged.
func SelectRequestAuthentications(s *mesh.Snapshot, namespace string, labels map[string]string, report func(mesh.Problem)) []*mesh.Config {
	var out []*mesh.Config
	for _, c := range s.RequestAuthentications {
		ra := c.RequestAuthentication()
		ns := c.Object.Namespace
		sel := ra.GetSelector().GetMatchLabels()
		if ra.GetTargetRef() != nil || len(ra.GetTargetRefs()) > 0 {
			if report != nil && (ns == namespace || ns == s.RootNamespace()) {
				report(mesh.Problem{Resource: c.Ref(), Field: "spec.targetRefs",
					Reason: "policies attached by targetRef (gateways, waypoints) are not supported yet; it applies to no workload"})
			}
			continue
		}
		switch {
		case ns == namespace && mesh.Matches(sel, labels):
			out = append(out, c)
		case ns == s.RootNamespace() && len(sel) == 0:
			out = append(out, c)
		}
	}
	return out
}

// BuildJWTAuthn translates RequestAuthentications into Envoy's
// jwt_authn: one provider per JWT rule (issuer, audiences, keys, token
// locations, forwarding, claims to headers) writing the verified payload
// to dynamic metadata (where AuthorizationPolicy's requestPrincipals and
// request.auth.* conditions read it), and one requirement for every path:
// any provider's valid token, or no token at all. So, as in Istio, a
// request with an invalid token (bad signature, expired, unknown issuer,
// wrong audience) is refused and a request without one passes —
// AuthorizationPolicy requestPrincipals is what requires a token.
//
// Keys: an inline jwks is used as is; a jwksUri is fetched by Envoy
// through the outbound cluster of its host and port (a service the mesh
// knows — for an external issuer, a ServiceEntry and, for https, a
// DestinationRule originating TLS). Where nave cannot give Envoy keys (no
// service for the jwksUri, neither jwks nor jwksUri: nave does not fetch
// OpenID discovery documents, an inline jwks that is not a key set), the
// problem is reported and the provider gets a key set no token verifies
// against: tokens of that issuer are refused (fail closed).
//
// cluster finds the outbound cluster of a host and port ("" when none).
func BuildJWTAuthn(policies []*mesh.Config, cluster func(host string, port uint32) string, report func(mesh.Problem)) *jwtv3.JwtAuthentication {
	cfg := &jwtv3.JwtAuthentication{Providers: map[string]*jwtv3.JwtProvider{}, BypassCorsPreflight: true}
	var reqs []*jwtv3.JwtRequirement
	for _, c := range policies {
		for i, r := range c.RequestAuthentication().GetJwtRules() {
			field := "spec.jwtRules[" + strconv.Itoa(i) + "]"
			name := c.Object.Namespace + "/" + c.Object.Name + "/" + strconv.Itoa(i)
			p := &jwtv3.JwtProvider{
				Issuer:            r.GetIssuer(),
				Audiences:         r.GetAudiences(),
				Forward:           r.GetForwardOriginalToken(),
				FromParams:        r.GetFromParams(),
				FromCookies:       r.GetFromCookies(),
				PayloadInMetadata: jwtPayloadKey,
				NormalizePayloadInMetadata: &jwtv3.JwtProvider_NormalizePayload{
					// Istio splits these space-delimited claims into lists.
					SpaceDelimitedClaims: appendNew([]string{"scope", "permission"}, r.GetSpaceDelimitedClaims()...),
				},
				ForwardPayloadHeader: r.GetOutputPayloadToHeader(),
			}
			for _, h := range r.GetFromHeaders() {
				p.FromHeaders = append(p.FromHeaders, &jwtv3.JwtHeader{Name: h.GetName(), ValuePrefix: h.GetPrefix()})
			}
			for _, ch := range r.GetOutputClaimToHeaders() {
				p.ClaimToHeaders = append(p.ClaimToHeaders, &jwtv3.JwtClaimToHeader{HeaderName: ch.GetHeader(), ClaimName: ch.GetClaim()})
			}
			unusable := func(f, reason string) {
				report(mesh.Problem{Resource: c.Ref(), Field: field + f, Reason: reason + "; tokens of issuer " + r.GetIssuer() + " are refused (fail closed)"})
				p.JwksSourceSpecifier = &jwtv3.JwtProvider_LocalJwks{LocalJwks: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: unusableJWKS}}}
			}
			switch {
			case r.GetJwks() != "":
				var set struct {
					Keys []json.RawMessage `json:"keys"`
				}
				if err := json.Unmarshal([]byte(r.GetJwks()), &set); err != nil || len(set.Keys) == 0 {
					unusable(".jwks", "jwks is not a JSON Web Key Set with keys")
					break
				}
				p.JwksSourceSpecifier = &jwtv3.JwtProvider_LocalJwks{LocalJwks: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: r.GetJwks()}}}
			case r.GetJwksUri() != "":
				u, err := url.Parse(r.GetJwksUri())
				if err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") {
					unusable(".jwksUri", "jwksUri "+strconv.Quote(r.GetJwksUri())+" is not an http(s) URL")
					break
				}
				port := uint32(443)
				if u.Scheme == "http" {
					port = 80
				}
				if ps := u.Port(); ps != "" {
					n, _ := strconv.ParseUint(ps, 10, 16)
					port = uint32(n)
				}
				cl := cluster(u.Hostname(), port)
				if cl == "" {
					unusable(".jwksUri", "no service of the mesh serves "+net.JoinHostPort(u.Hostname(), strconv.Itoa(int(port)))+
						" (Envoy fetches the keys through the mesh: add a ServiceEntry for the issuer)")
					break
				}
				timeout := defaultJWKSTimeout
				if t := r.GetTimeout(); t != nil {
					timeout = durationpb.New(t.AsDuration())
				}
				p.JwksSourceSpecifier = &jwtv3.JwtProvider_RemoteJwks{RemoteJwks: &jwtv3.RemoteJwks{
					HttpUri: &corev3.HttpUri{Uri: r.GetJwksUri(), HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cl}, Timeout: timeout},
				}}
			default:
				unusable(".jwksUri", "neither jwks nor jwksUri is set (nave does not fetch OpenID discovery documents)")
			}
			cfg.Providers[name] = p
			reqs = append(reqs, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_ProviderName{ProviderName: name}})
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	slices.SortFunc(reqs, func(a, b *jwtv3.JwtRequirement) int {
		return cmp.Compare(a.GetProviderName(), b.GetProviderName())
	})
	reqs = append(reqs, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}}})
	cfg.Rules = []*jwtv3.RequirementRule{{
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		RequirementType: &jwtv3.RequirementRule_Requires{Requires: &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAny{
			RequiresAny: &jwtv3.JwtRequirementOrList{Requirements: reqs},
		}}},
	}}
	return cfg
}

func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		if !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	return list
}
