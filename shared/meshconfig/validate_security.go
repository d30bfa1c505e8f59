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
	if ap.GetAction() == securityv1beta1.AuthorizationPolicy_CUSTOM {
		c.fail(p.field("action"), "action CUSTOM is not supported")
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
