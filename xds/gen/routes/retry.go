package routes

import (
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	prevprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
)

// Istio's retry policy for a route whose VirtualService sets no retries:
// two attempts on connection failures, refused streams, gRPC unavailable /
// cancelled, and HTTP 503 (through retriable-status-codes).
const (
	DefaultRetryOn       = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
	DefaultRetryAttempts = 2
)

func (t *Translator) timeoutAndRetries(ra *routev3.RouteAction, hr *networking.HTTPRoute) {
	r := hr.GetRetries()
	if !t.envoy {
		if to := hr.GetTimeout(); to != nil {
			ra.Timeout = build.Duration(to)
			// grpc-go applies max_stream_duration, not timeout.
			ra.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: build.Duration(to)}
		}
		if r.GetAttempts() > 0 {
			ra.RetryPolicy = retryPolicy(r)
		}
		return
	}
	if to := hr.GetTimeout(); to != nil {
		ra.Timeout = build.Duration(to)
	} else {
		ra.Timeout = t.NoTimeout()
	}
	switch {
	case r == nil:
		ra.RetryPolicy = t.DefaultRetryPolicy()
	case r.GetAttempts() > 0:
		ra.RetryPolicy = retryPolicy(r)
	}
	// attempts 0: no retries.
}

// NoTimeout is a route timeout of 0, which disables Envoy's default 15 s
// (RouteAction.timeout). Istio sets it on every route whose
// VirtualService names no timeout; so do we. Shared by the routes of one
// translator.
func (t *Translator) NoTimeout() *durationpb.Duration {
	if t.zero == nil {
		t.zero = &durationpb.Duration{}
	}
	return t.zero
}

// DefaultRetryPolicy is Istio's default when a route sets no retries: 2
// attempts on connect-failure, refused-stream, unavailable, cancelled and
// retriable-status-codes (503). Built once per translator and shared.
func (t *Translator) DefaultRetryPolicy() *routev3.RetryPolicy {
	if t.defaultRetry == nil {
		t.defaultRetry = &routev3.RetryPolicy{
			RetryOn:              DefaultRetryOn,
			NumRetries:           wrapperspb.UInt32(DefaultRetryAttempts),
			RetriableStatusCodes: []uint32{503},
		}
	}
	return t.defaultRetry
}

// retryPolicy translates retries with attempts > 0. Numeric retryOn
// entries are HTTP status codes (retriable-status-codes, Envoy
// x-envoy-retry-on).
func retryPolicy(r *networking.HTTPRetry) *routev3.RetryPolicy {
	p := &routev3.RetryPolicy{
		NumRetries:    wrapperspb.UInt32(uint32(r.GetAttempts())),
		PerTryTimeout: build.Duration(r.GetPerTryTimeout()),
	}
	retryOn := r.GetRetryOn()
	if retryOn == "" {
		retryOn = DefaultRetryOn
		p.RetriableStatusCodes = []uint32{503}
	} else {
		var on []string
		hasCodes := false
		for _, s := range strings.Split(retryOn, ",") {
			s = strings.TrimSpace(s)
			if n, err := strconv.ParseUint(s, 10, 32); err == nil {
				p.RetriableStatusCodes = append(p.RetriableStatusCodes, uint32(n))
				continue
			}
			if s == "retriable-status-codes" {
				hasCodes = true
			}
			if s != "" {
				on = append(on, s)
			}
		}
		if len(p.RetriableStatusCodes) > 0 && !hasCodes {
			on = append(on, "retriable-status-codes")
		}
		retryOn = strings.Join(on, ",")
	}
	p.RetryOn = retryOn
	if r.GetRetryRemoteLocalities().GetValue() {
		// Retry in other priorities (localities) than the ones tried
		// (Envoy "previous priorities" retry priority plugin).
		p.RetryPriority = &routev3.RetryPolicy_RetryPriority{
			Name:       "envoy.retry_priorities.previous_priorities",
			ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: build.Any(&prevprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: 2})},
		}
	}
	return p
}
