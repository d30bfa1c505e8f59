package envoysim

import (
	"slices"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	prevhostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/navemesh/nave/xds/gen/build"
)

func TestRetriesOf(t *testing.T) {
	prev := []*routev3.RetryPolicy_RetryHostPredicate{{
		Name:       "envoy.retry_host_predicates.previous_hosts",
		ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: build.Any(&prevhostsv3.PreviousHostsPredicate{})},
	}}
	// Envoy's defaults: one retry, one reselection, 25 ms..250 ms.
	r, err := RetriesOf(&routev3.RetryPolicy{RetryHostPredicate: prev})
	if err != nil || r.Retries != 1 || r.SelectionAttempts != 1 || !r.AvoidPrevious || r.BaseInterval != 25*time.Millisecond || r.MaxInterval != 250*time.Millisecond {
		t.Errorf("defaults = %+v, %v", r, err)
	}
	// One reselection: a second rejected pick is kept.
	if got := r.Hosts([]string{"a", "a", "a"}); !slices.Equal(got, []string{"a", "a"}) {
		t.Errorf("hosts = %v", got)
	}
	r, err = RetriesOf(&routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(3), HostSelectionRetryMaxAttempts: 2, RetryHostPredicate: prev,
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(time.Second), MaxInterval: durationpb.New(3 * time.Second)}})
	if err != nil || r.BaseInterval != time.Second || r.MaxInterval != 3*time.Second {
		t.Errorf("back-off = %+v, %v", r, err)
	}
	if got := r.Hosts([]string{"a", "a", "b", "a", "a", "a", "c"}); !slices.Equal(got, []string{"a", "b", "a", "c"}) {
		t.Errorf("hosts = %v", got)
	}
	for name, p := range map[string]*routev3.RetryPolicy{
		"zero base":       {RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(0)}},
		"max below base":  {RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(time.Second), MaxInterval: durationpb.New(time.Millisecond)}},
		"other predicate": {RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.omit_canary_hosts"}}},
		"wrong config": {RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: build.Any(&routev3.RetryPolicy{})}}}},
	} {
		if _, err := RetriesOf(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
