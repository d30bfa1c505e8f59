package mesh

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Auto-allocated addresses (docs/dns.md, decision 045): a ServiceEntry
// host with no address of its own gets one IPv4 address of
// AutoAddressPrefixV4 and the matching IPv6 address of
// AutoAddressPrefixV6, as Istio's IP auto-allocation gives it, so that a
// proxy whose agent answers its DNS can resolve the name and route
// connections to it by address (a TCP port gets a listener on it).
//
// The allocation is a pure function of the snapshot's input, so two hub
// replicas building the same input agree without talking: hosts are
// served oldest first (the earliest creation time of the ServiceEntries
// defining the host, unset last, then by name), each taking the first
// free slot of its probe sequence: the slot its name hashes to (FNV-1a),
// then further slots by double hashing. A host newer than every other
// therefore never moves one; a host moves only when one that precedes it
// and collides with it appears or goes.
const (
	// AutoAddressPrefixV4 is Istio's range (Class E, unroutable outside
	// the pod): 240.240.0.0/16.
	AutoAddressPrefixV4 = "240.240.0.0/16"
	// AutoAddressPrefixV6 is Istio's range (RFC 5180 benchmarking):
	// 2001:2::/48. A host's IPv6 address is 2001:2::f0f0:N for its IPv4
	// address 240.240.X.Y, N = X*256+Y.
	AutoAddressPrefixV6 = "2001:2::/48"

	// AutoAllocateLabel opts a ServiceEntry out of auto-allocation when
	// "false" (Istio's networking.istio.io/enable-autoallocate-ip).
	AutoAllocateLabel = "networking.istio.io/enable-autoallocate-ip"

	// autoSlots is how many addresses the IPv4 range holds once the
	// fourth octets 0 and 255 are left out (as Istio's first allocator
	// did): 256 third octets × 254.
	autoSlots = 256 * 254
)

// autoAllocation is what the build records of a service for allocation:
// whether a ServiceEntry defines it, whether one opted out, the oldest
// defining entry's creation time (the precedence on a collision), and the
// slot of its AutoAddresses plus one (0: none).
type autoAllocation struct {
	entry  bool
	optOut bool
	since  time.Time
	slot   int
}

func (a autoAllocation) merge(o autoAllocation) autoAllocation {
	if o.entry && (!a.entry || older(o.since, a.since)) {
		a.since = o.since
	}
	a.entry = a.entry || o.entry
	a.optOut = a.optOut || o.optOut
	return a
}

// older orders creation times: set before unset, then earlier first.
func older(a, b time.Time) bool {
	if a.IsZero() != b.IsZero() {
		return !a.IsZero()
	}
	return a.Before(b)
}

// autoEligible reports whether the service gets addresses allocated, as
// Istio decides (ShouldV2AutoAllocateIP and its controller's keepHost): a
// ServiceEntry host, not opted out, without addresses (none of a registry
// Service either), whose resolution is not NONE (a proxy could not know
// the original destination), and not a wildcard (Istio allocates those
// only for DYNAMIC_DNS, which nave does not implement).
func (svc *Service) autoEligible() bool {
	return svc.auto.entry && !svc.auto.optOut && len(svc.Addresses) == 0 && len(svc.ClusterAddresses) == 0 &&
		svc.Resolution != ResolutionNone && !strings.HasPrefix(svc.Hostname, "*")
}

// autoHash is the host's hash: its preferred slot and probe step derive
// from it.
func autoHash(host string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(host))
	return h.Sum64()
}

// autoProbeStep is the host's probe step among slots: from its hash, in
// [1, slots), and coprime with slots (so the probe visits every slot).
func autoProbeStep(h uint64, slots int) int {
	if slots < 2 {
		return 1
	}
	step := 1 + int((h>>32)%uint64(slots-1))
	for gcd(step, slots) != 1 {
		step++ // ends at slots-1 at the latest
	}
	return step
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// setAutoSlot gives svc the addresses of slot n (none for -1).
func (svc *Service) setAutoSlot(n int) {
	svc.auto.slot, svc.AutoAddresses = n+1, nil
	if n >= 0 {
		svc.AutoAddresses = autoAddresses(n)
	}
}

// autoPreferred is the slot a host takes when nothing collides.
func autoPreferred(host string) int { return int(autoHash(host) % autoSlots) }

// autoAddresses returns the IPv4 and IPv6 addresses of slot n.
func autoAddresses(n int) []string {
	third, fourth := byte(n/254), byte(n%254+1)
	return []string{
		netip.AddrFrom4([4]byte{240, 240, third, fourth}).String(),
		netip.AddrFrom16([16]byte{0x20, 0x01, 0, 0x02, 12: 0xf0, 13: 0xf0, 14: third, 15: fourth}).String(),
	}
}

// allocateAddresses sets AutoAddresses of every eligible service, cloning
// services shared with an earlier snapshot only where they differ (Build
// only, while s.shared is set). Services beyond the range's capacity get
// none and are reported.
func (s *Snapshot) allocateAddresses() { s.allocate(autoSlots) }

// allocate is allocateAddresses over the first slots slots of the range
// (tests use fewer).
func (s *Snapshot) allocate(slots int) {
	var eligible []*Service
	for _, svc := range s.Services {
		if svc.autoEligible() {
			eligible = append(eligible, svc)
		} else if svc.auto.slot != 0 {
			s.service(svc.Hostname, svc.Namespace).setAutoSlot(-1)
		}
	}
	slices.SortFunc(eligible, func(a, b *Service) int {
		switch {
		case older(a.auto.since, b.auto.since):
			return -1
		case older(b.auto.since, a.auto.since):
			return 1
		}
		return strings.Compare(a.Hostname, b.Hostname)
	})
	// In that order, each host takes the first free slot of its probe
	// sequence: the slot it hashes to, then double hashing.
	used := make([]uint64, (slots+63)/64)
	taken := 0
	for _, svc := range eligible {
		n := -1
		if taken < slots {
			h := autoHash(svc.Hostname)
			n = int(h % uint64(slots))
			for step := autoProbeStep(h, slots); used[n/64]&(1<<(n%64)) != 0; {
				n = (n + step) % slots
			}
			used[n/64] |= 1 << (n % 64)
			taken++
		} else {
			s.Problems = append(s.Problems, Problem{Resource: serviceSource(svc), Field: "spec.addresses",
				Reason: fmt.Sprintf("no address is left in %s to allocate to %s (%d hosts have one); proxies that capture DNS do not resolve it", AutoAddressPrefixV4, svc.Hostname, slots)})
		}
		if svc.auto.slot != n+1 {
			s.service(svc.Hostname, svc.Namespace).setAutoSlot(n)
		}
	}
}

// serviceSource names the first object defining svc, for problems.
func serviceSource(svc *Service) string {
	if len(svc.Sources) > 0 {
		return svc.Sources[0]
	}
	return svc.Hostname
}

type autoMemo struct{}

// HasAutoAddresses reports whether any service has auto-allocated
// addresses: only then does a proxy's DNS capture change its config.
// Memoized.
func (s *Snapshot) HasAutoAddresses() bool {
	return s.Memo(autoMemo{}, func() any {
		for _, svc := range s.Services {
			if len(svc.AutoAddresses) > 0 {
				return true
			}
		}
		return false
	}).(bool)
}

// AutoAddressesFor returns the service's auto-allocated addresses of the
// families given (the proxy's: Istio gives an IPv4 proxy the IPv4 one).
func (svc *Service) AutoAddressesFor(ipv4, ipv6 bool) []string {
	var out []string
	for _, a := range svc.AutoAddresses {
		if is4 := strings.Contains(a, "."); (is4 && ipv4) || (!is4 && ipv6) {
			out = append(out, a)
		}
	}
	return out
}
