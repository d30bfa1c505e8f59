//lint:file-ignore SA1019 the guards must see every field, deprecated ones too: they still encode

package build

import routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

// The plain* functions report whether a message has only the fields the
// Encoder writes itself set (plainRouteAction: and a cluster specifier it
// writes). Every other field is listed: TestEncoderRandom fails for one
// that is not (a field added to Envoy's API).

func plainRouteConfiguration(m *routev3.RouteConfiguration) bool {
	return m.Vhds == nil &&
		len(m.InternalOnlyHeaders) == 0 &&
		len(m.ResponseHeadersToAdd) == 0 &&
		len(m.ResponseHeadersToRemove) == 0 &&
		len(m.RequestHeadersToAdd) == 0 &&
		len(m.RequestHeadersToRemove) == 0 &&
		!m.MostSpecificHeaderMutationsWins &&
		m.MaxDirectResponseBodySizeBytes == nil &&
		len(m.ClusterSpecifierPlugins) == 0 &&
		len(m.RequestMirrorPolicies) == 0 &&
		!m.IgnorePortInHostMatching &&
		m.VhostHeader == "" &&
		!m.IgnorePathParametersInPathMatching &&
		len(m.TypedPerFilterConfig) == 0 &&
		m.Metadata == nil &&
		len(m.RouteSpecifiers) == 0
}

func plainVirtualHost(m *routev3.VirtualHost) bool {
	return m.Matcher == nil &&
		m.RequireTls == 0 &&
		len(m.VirtualClusters) == 0 &&
		len(m.RateLimits) == 0 &&
		len(m.RequestHeadersToAdd) == 0 &&
		len(m.RequestHeadersToRemove) == 0 &&
		len(m.ResponseHeadersToAdd) == 0 &&
		len(m.ResponseHeadersToRemove) == 0 &&
		m.Cors == nil &&
		len(m.TypedPerFilterConfig) == 0 &&
		!m.IncludeRequestAttemptCount &&
		!m.IncludeAttemptCountInResponse &&
		m.RetryPolicy == nil &&
		m.RetryPolicyTypedConfig == nil &&
		m.HedgePolicy == nil &&
		!m.IncludeIsTimeoutRetryHeader &&
		m.PerRequestBufferLimitBytes == nil &&
		m.RequestBodyBufferLimit == nil &&
		len(m.RequestMirrorPolicies) == 0 &&
		m.Metadata == nil &&
		len(m.RouteSpecifiers) == 0
}

func plainRoute(m *routev3.Route) bool {
	return m.Metadata == nil &&
		len(m.TypedPerFilterConfig) == 0 &&
		len(m.RequestHeadersToAdd) == 0 &&
		len(m.RequestHeadersToRemove) == 0 &&
		len(m.ResponseHeadersToAdd) == 0 &&
		len(m.ResponseHeadersToRemove) == 0 &&
		m.Tracing == nil &&
		m.PerRequestBufferLimitBytes == nil &&
		m.StatPrefix == "" &&
		m.RequestBodyBufferLimit == nil &&
		len(m.RouteSpecifiers) == 0
}

func plainRouteAction(m *routev3.RouteAction) bool {
	switch m.ClusterSpecifier.(type) {
	case nil, *routev3.RouteAction_Cluster, *routev3.RouteAction_WeightedClusters:
	default:
		return false
	}
	return m.ClusterNotFoundResponseCode == 0 &&
		m.MetadataMatch == nil &&
		m.RegexRewrite == nil &&
		m.PathRewritePolicy == nil &&
		m.PathRewrite == "" &&
		m.HostRewriteSpecifier == nil &&
		!m.AppendXForwardedHost &&
		m.IdleTimeout == nil &&
		m.FlushTimeout == nil &&
		m.EarlyDataPolicy == nil &&
		m.RetryPolicyTypedConfig == nil &&
		len(m.RequestMirrorPolicies) == 0 &&
		m.Priority == 0 &&
		len(m.RateLimits) == 0 &&
		m.IncludeVhRateLimits == nil &&
		m.Cors == nil &&
		m.MaxGrpcTimeout == nil &&
		m.GrpcTimeoutOffset == nil &&
		len(m.UpgradeConfigs) == 0 &&
		m.InternalRedirectPolicy == nil &&
		m.InternalRedirectAction == 0 &&
		m.MaxInternalRedirects == nil &&
		m.HedgePolicy == nil &&
		m.MaxStreamDuration == nil
}
