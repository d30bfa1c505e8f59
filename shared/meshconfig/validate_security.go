package meshconfig

import (
	"slices"
	"strconv"

	securityv1beta1 "istio.io/api/security/v1beta1"
)

func validatePeerAuthentication(c *checker, p path, pa *securityv1beta1.PeerAuthentication) {
	validateSelector(c, p.field("selector").field("matchLabels"), pa.GetSelector().GetMatchLabels())
	for _, port := range sortedPortKeys(pa.GetPortLevelMtls()) {
		checkPort(c, p.field("portLevelMtls").key(strconv.FormatUint(uint64(port), 10)), port)
	}
}

func validateRequestAuthentication(c *checker, p path, ra *securityv1beta1.RequestAuthentication) {
	validateSelector(c, p.field("selector").field("matchLabels"), ra.GetSelector().GetMatchLabels())
	for i, r := range ra.GetJwtRules() {
		if r.GetIssuer() == "" {
			c.fail(p.field("jwtRules").index(i).field("issuer"), "issuer is required")
		}
	}
}

func validateAuthorizationPolicy(c *checker, p path, ap *securityv1beta1.AuthorizationPolicy) {
	validateSelector(c, p.field("selector").field("matchLabels"), ap.GetSelector().GetMatchLabels())
	// As Istio validates it: CUSTOM names its provider (an
	// extensionProviders entry of the mesh's MeshConfig, checked when
	// generating), and only CUSTOM names one.
	custom := ap.GetAction() == securityv1beta1.AuthorizationPolicy_CUSTOM
	if custom && ap.GetProvider().GetName() == "" {
		c.fail(p.field("provider").field("name"), "action CUSTOM needs a provider (an extensionProviders entry of the mesh's MeshConfig)")
	}
	if !custom && ap.GetProvider() != nil {
		c.fail(p.field("provider"), "a provider is only allowed with action CUSTOM")
	}
}

func sortedPortKeys[V any](m map[uint32]V) []uint32 {
	keys := make([]uint32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
