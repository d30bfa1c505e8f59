package routes

import (
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	prevhostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	prevprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/mesh"
)

// Istio's retry policy for a route whose VirtualService sets no retries:
// two attempts on connection failures, refused streams, gRPC unavailable /
// cancelled, and HTTP 503 (through retriable-status-codes).
const (
	DefaultRetryOn       = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
	DefaultRetryAttempts = 2
)

// Retries on Envoy avoid the hosts already tried, as Istio's do: the
// previous_hosts retry host predicate rejects a host picked for a retry
// that an earlier attempt used, and the load balancer picks again, at most
// HostSelectionRetryMaxAttempts times (Istio's value) before taking the
// host it has. Istio leaves the predicate out of routes that hash
// (consistentHash), so that a retry stays on the hashed host, unless the
// VirtualService sets retryIgnorePreviousHosts.
const (
	PreviousHostsPredicate        = "envoy.retry_host_predicates.previous_hosts"
	HostSelectionRetryMaxAttempts = 5
)

func (t *Translator) timeoutAndRetries(cfg *mesh.Config, field string, ra *routev3.RouteAction, hr *networking.HTTPRoute) {
	r := hr.GetRetries()
	if !t.envoy {
		if to := hr.GetTimeout(); to != nil {
			ra.Timeout = build.Duration(to)
			// grpc-go applies max_stream_duration, not timeout.
			ra.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: build.Duration(to)}
		}
		if r.GetAttempts() > 0 {
			ra.RetryPolicy = retryPolicy(r)
			ra.RetryPolicy.RetryBackOff = t.backoff(cfg, field, r)
			t.grpcRetryProblems(cfg, field+".retries", r)
		}
		return
	}
	if to := hr.GetTimeout(); to != nil {
		ra.Timeout = build.Duration(to)
	} else {
		ra.Timeout = t.NoTimeout()
	}
	hashed := len(ra.GetHashPolicy()) > 0
	switch {
	case r == nil:
		ra.RetryPolicy = t.DefaultRetryPolicy(hashed)
	case r.GetAttempts() > 0:
		p := retryPolicy(r)
		p.HostSelectionRetryMaxAttempts = HostSelectionRetryMaxAttempts
		ignore := !hashed
		if v := r.GetRetryIgnorePreviousHosts(); v != nil {
			ignore = v.GetValue()
		}
		if ignore {
			p.RetryHostPredicate = t.previousHosts()
		}
		p.RetryBackOff = t.backoff(cfg, field, r)
		ra.RetryPolicy = p
	}
	// attempts 0: no retries.
}

// grpcRetryOn are the retryOn conditions grpc-go honours (gRPC status
// codes; xdsresource.generateRetryConfig); it ignores the others.
var grpcRetryOn = map[string]bool{"cancelled": true, "deadline-exceeded": true, "internal": true, "resource-exhausted": true, "unavailable": true}

// grpcRetryProblems reports what of retries r (attempts > 0) grpc-go
// does not honour: a retry host predicate (its retries pick through the
// load balancer again), retry priorities, a per-try timeout, and retryOn
// conditions that are not gRPC status names (HTTP conditions and status
// codes); with none of those left, grpc-go does not retry at all.
func (t *Translator) grpcRetryProblems(cfg *mesh.Config, field string, r *networking.HTTPRetry) {
	if r.GetRetryIgnorePreviousHosts().GetValue() {
		t.problem(cfg.Ref(), field+".retryIgnorePreviousHosts",
			"proxyless gRPC clients have no retry host predicate: a retry may go to the host already tried; ignored")
	}
	if r.GetRetryRemoteLocalities().GetValue() {
		t.problem(cfg.Ref(), field+".retryRemoteLocalities", "proxyless gRPC clients have no retry priorities; ignored")
	}
	if r.GetPerTryTimeout() != nil {
		t.problem(cfg.Ref(), field+".perTryTimeout", "proxyless gRPC clients have no per-try timeout (only the route's timeout); ignored")
	}
	if r.GetRetryOn() == "" {
		return // the default: unavailable and cancelled apply
	}
	var ignored []string
	honoured := false
	for _, s := range strings.Split(r.GetRetryOn(), ",") {
		s = strings.ToLower(strings.TrimSpace(s))
		switch {
		case s == "":
		case grpcRetryOn[s]:
			honoured = true
		default:
			ignored = append(ignored, s)
		}
	}
	switch {
	case !honoured:
		t.problem(cfg.Ref(), field+".retryOn", "proxyless gRPC clients retry only on gRPC status names (cancelled, deadline-exceeded, internal, resource-exhausted, unavailable); none is listed, so they do not retry")
	case len(ignored) > 0:
		t.problem(cfg.Ref(), field+".retryOn", "proxyless gRPC clients retry only on gRPC status names; "+strings.Join(ignored, ",")+" ignored")
	}
}

// backoff translates retries.backoff, the base interval between retries
// (Envoy and grpc-go cap the interval at ten times it, and default to
// 25 ms). Both refuse a base interval of zero (Envoy rejects the route
// configuration, grpc-go the whole RDS resource), so a backoff that is
// not a positive duration is reported and left out.
func (t *Translator) backoff(cfg *mesh.Config, field string, r *networking.HTTPRetry) *routev3.RetryPolicy_RetryBackOff {
	b := r.GetBackoff()
	if b == nil {
		return nil
	}
	if err := b.CheckValid(); err != nil || b.AsDuration() <= 0 {
		t.problem(cfg.Ref(), field+".retries.backoff", "backoff must be a positive duration; ignored (retries use the default 25ms)")
		return nil
	}
	return &routev3.RetryPolicy_RetryBackOff{BaseInterval: build.Duration(b)}
}

// previousHosts is the retry host predicate list of Envoy's
// previous_hosts predicate, built once per translator and shared.
func (t *Translator) previousHosts() []*routev3.RetryPolicy_RetryHostPredicate {
	if t.prevHosts == nil {
		t.prevHosts = []*routev3.RetryPolicy_RetryHostPredicate{{
			Name:       PreviousHostsPredicate,
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: build.Any(&prevhostsv3.PreviousHostsPredicate{})},
		}}
	}
	return t.prevHosts
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
// retriable-status-codes (503), avoiding the hosts already tried unless
// the route hashes. Built once per translator and shared.
func (t *Translator) DefaultRetryPolicy(hashed bool) *routev3.RetryPolicy {
	p := &t.defaultRetry
	if hashed {
		p = &t.defaultHashedRetry
	}
	if *p == nil {
		*p = &routev3.RetryPolicy{
			RetryOn:                       DefaultRetryOn,
			NumRetries:                    wrapperspb.UInt32(DefaultRetryAttempts),
			RetriableStatusCodes:          []uint32{503},
			HostSelectionRetryMaxAttempts: HostSelectionRetryMaxAttempts,
		}
		if !hashed {
			(*p).RetryHostPredicate = t.previousHosts()
		}
	}
	return *p
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
