package envoysim

import (
	"fmt"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	prevhostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	prevprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
)

// Retries is what Envoy does with a route's retry policy (RetryPolicy
// field docs): how many retries, how long it waits between them, and how
// it picks a host for each. It is a plain value.
type Retries struct {
	// Retries is num_retries (1 when unset).
	Retries uint32
	// AvoidPrevious: the previous_hosts predicate rejects a host an
	// earlier attempt used; SelectionAttempts is how many times the load
	// balancer picks again before taking the host it has
	// (host_selection_retry_max_attempts; 1 when unset).
	AvoidPrevious     bool
	SelectionAttempts int64
	// OtherPriorities: the previous_priorities plugin moves retries to
	// priorities not tried yet.
	OtherPriorities bool
	// BaseInterval and MaxInterval bound the jittered exponential
	// back-off between retries (25 ms and ten times the base when unset).
	BaseInterval, MaxInterval time.Duration
}

// RetriesOf reads a retry policy as Envoy would; nil means no retries. A
// host predicate or priority Envoy would not load, or a back-off Envoy
// would refuse, is an error.
func RetriesOf(p *routev3.RetryPolicy) (Retries, error) {
	var r Retries
	if p == nil {
		return r, nil
	}
	r.Retries = 1
	if n := p.GetNumRetries(); n != nil {
		r.Retries = n.GetValue()
	}
	r.SelectionAttempts = 1
	if n := p.GetHostSelectionRetryMaxAttempts(); n != 0 {
		r.SelectionAttempts = n
	}
	for _, hp := range p.GetRetryHostPredicate() {
		if hp.GetName() != "envoy.retry_host_predicates.previous_hosts" {
			return r, fmt.Errorf("retry host predicate %q is not simulated", hp.GetName())
		}
		if err := hp.GetTypedConfig().UnmarshalTo(&prevhostsv3.PreviousHostsPredicate{}); err != nil {
			return r, fmt.Errorf("retry host predicate %s: %w", hp.GetName(), err)
		}
		r.AvoidPrevious = true
	}
	if rp := p.GetRetryPriority(); rp != nil {
		if rp.GetName() != "envoy.retry_priorities.previous_priorities" {
			return r, fmt.Errorf("retry priority %q is not simulated", rp.GetName())
		}
		if err := rp.GetTypedConfig().UnmarshalTo(&prevprioritiesv3.PreviousPrioritiesConfig{}); err != nil {
			return r, fmt.Errorf("retry priority %s: %w", rp.GetName(), err)
		}
		r.OtherPriorities = true
	}
	r.BaseInterval = 25 * time.Millisecond
	if b := p.GetRetryBackOff(); b != nil {
		// RetryBackOff.base_interval is required and > 0; max_interval,
		// when set, must be at least the base.
		if b.GetBaseInterval() == nil || b.GetBaseInterval().AsDuration() <= 0 {
			return r, fmt.Errorf("retry_back_off.base_interval %v must be greater than 0", b.GetBaseInterval().AsDuration())
		}
		r.BaseInterval = b.GetBaseInterval().AsDuration()
		if m := b.GetMaxInterval(); m != nil {
			if m.AsDuration() < r.BaseInterval {
				return r, fmt.Errorf("retry_back_off.max_interval %v is below base_interval %v", m.AsDuration(), r.BaseInterval)
			}
			r.MaxInterval = m.AsDuration()
		}
	}
	if r.MaxInterval == 0 {
		r.MaxInterval = 10 * r.BaseInterval
	}
	return r, nil
}

// Hosts returns the host of the first attempt and of each retry when
// every attempt fails and the load balancer offers picks in order (it
// is asked once per host selection; when picks run out the last one
// repeats). A pick the previous_hosts predicate rejects is picked again,
// up to SelectionAttempts times, then kept.
func (r Retries) Hosts(picks []string) []string {
	if len(picks) == 0 {
		return nil
	}
	i := 0
	pick := func() string {
		h := picks[min(i, len(picks)-1)]
		i++
		return h
	}
	tried := map[string]bool{}
	out := []string{pick()}
	tried[out[0]] = true
	for range r.Retries {
		h := pick()
		for n := int64(0); r.AvoidPrevious && tried[h] && n < r.SelectionAttempts; n++ {
			h = pick()
		}
		tried[h] = true
		out = append(out, h)
	}
	return out
}
