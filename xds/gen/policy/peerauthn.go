package policy

import (
	"fmt"

	securityv1beta1 "istio.io/api/security/v1beta1"

	"github.com/navemesh/nave/xds/mesh"
)

// MTLSMode is the mutual TLS mode a workload port accepts inbound
// traffic with (PeerAuthentication). It is a plain value.
type MTLSMode int

// MTLSMode values. The zero value is Istio's default when no policy sets
// a mode.
const (
	// MTLSPermissive accepts mTLS (from mesh workloads) and plain text.
	MTLSPermissive MTLSMode = iota
	// MTLSStrict accepts only mTLS with a client certificate of the mesh.
	MTLSStrict
	// MTLSDisable accepts plain text only (the sidecar terminates no TLS).
	MTLSDisable
)

func (m MTLSMode) String() string {
	switch m {
	case MTLSStrict:
		return "STRICT"
	case MTLSDisable:
		return "DISABLE"
	}
	return "PERMISSIVE"
}

// PeerAuthentications are the PeerAuthentication policies that apply to
// one workload, one per level; nil where none does. It is a plain value
// over read-only config: Mode may be called from any goroutine.
type PeerAuthentications struct {
	// Mesh is the root namespace's policy without a selector.
	Mesh *mesh.Config
	// Namespace is the workload namespace's policy without a selector.
	Namespace *mesh.Config
	// Workload is the workload namespace's policy whose selector matches
	// the workload's labels.
	Workload *mesh.Config
}

// SelectPeerAuthentications finds the PeerAuthentications of a workload
// in namespace with labels, Istio's way: a policy with a selector applies
// only to workloads of its own namespace (so one in the root namespace
// selects only root-namespace workloads); a policy without one applies to
// its namespace, or to the whole mesh from the root namespace. When a
// level has several candidates the oldest applies (creation time, then
// name, as for other same-level conflicts), and the others are reported.
func SelectPeerAuthentications(s *mesh.Snapshot, namespace string, labels map[string]string, report func(mesh.Problem)) PeerAuthentications {
	var out PeerAuthentications
	for _, c := range s.PeerAuthentications {
		pa := c.PeerAuthentication()
		ns := c.Object.Namespace
		selector := pa.GetSelector().GetMatchLabels()
		switch {
		case len(selector) > 0:
			if ns == namespace && mesh.Matches(selector, labels) {
				out.Workload = oldest(out.Workload, c, "spec.selector", "several PeerAuthentications select the same workload", report)
			}
		case ns == namespace && ns != s.RootNamespace():
			out.Namespace = oldest(out.Namespace, c, "metadata.name", "namespace "+ns+" has several PeerAuthentications without a selector", report)
		case ns == s.RootNamespace():
			out.Mesh = oldest(out.Mesh, c, "metadata.name", "the root namespace ("+s.RootNamespace()+") has several mesh-wide PeerAuthentications (no selector)", report)
		}
	}
	return out
}

// oldest returns whichever of cur and c is older (creation time, then
// namespace/name; unset creation times count as newest), reporting the
// other. cur may be nil.
func oldest(cur, c *mesh.Config, field, what string, report func(mesh.Problem)) *mesh.Config {
	if cur == nil {
		return c
	}
	win, lose := cur, c
	if olderThan(c, cur) {
		win, lose = c, cur
	}
	if report != nil {
		report(mesh.Problem{Resource: lose.Ref(), Field: field,
			Reason: fmt.Sprintf("%s; %s (the oldest) applies and this one is ignored", what, win.Ref())})
	}
	return win
}

// olderThan orders configs by creation time (unset last), then
// namespace/name, then cluster.
func olderThan(a, b *mesh.Config) bool {
	at, bt := a.Object.CreationTime, b.Object.CreationTime
	if at.IsZero() != bt.IsZero() {
		return !at.IsZero()
	}
	if !at.Equal(bt) {
		return at.Before(bt)
	}
	if a.Object.Key() != b.Object.Key() {
		return a.Object.Key() < b.Object.Key()
	}
	return a.Cluster < b.Cluster
}

// Mode returns the effective mode for workload port port (0: the
// workload as a whole, e.g. for ports no service declares): the most
// specific level that sets a mode wins, UNSET inheriting from the level
// above (workload port → workload → namespace → mesh → PERMISSIVE).
// Port-level settings apply only from the workload-level policy; on a
// policy without a selector they are reported and ignored, as Istio
// ignores them.
func (p PeerAuthentications) Mode(port uint32, report func(mesh.Problem)) MTLSMode {
	mode := MTLSPermissive
	for _, c := range []*mesh.Config{p.Mesh, p.Namespace, p.Workload} {
		if c == nil {
			continue
		}
		pa := c.PeerAuthentication()
		if m, ok := modeOf(pa.GetMtls()); ok {
			mode = m
		}
		if c != p.Workload && len(pa.GetPortLevelMtls()) > 0 && report != nil {
			report(mesh.Problem{Resource: c.Ref(), Field: "spec.portLevelMtls",
				Reason: "port-level mTLS applies only to a policy with a selector; ignored"})
		}
	}
	if p.Workload != nil && port != 0 {
		if pl, found := p.Workload.PeerAuthentication().GetPortLevelMtls()[port]; found {
			if m, ok := modeOf(pl); ok {
				mode = m
			}
		}
	}
	return mode
}

// modeOf maps a policy's mode; false for UNSET (inherit).
func modeOf(m *securityv1beta1.PeerAuthentication_MutualTLS) (MTLSMode, bool) {
	switch m.GetMode() {
	case securityv1beta1.PeerAuthentication_MutualTLS_STRICT:
		return MTLSStrict, true
	case securityv1beta1.PeerAuthentication_MutualTLS_PERMISSIVE:
		return MTLSPermissive, true
	case securityv1beta1.PeerAuthentication_MutualTLS_DISABLE:
		return MTLSDisable, true
	}
	return MTLSPermissive, false
}

// EffectiveMTLS is the mTLS mode of port (0: the workload as a whole) of
// a workload in namespace with labels, with the problems found choosing
// it.
func EffectiveMTLS(s *mesh.Snapshot, namespace string, labels map[string]string, port uint32) (MTLSMode, []mesh.Problem) {
	var problems []mesh.Problem
	report := func(p mesh.Problem) { problems = append(problems, p) }
	mode := SelectPeerAuthentications(s, namespace, labels, report).Mode(port, report)
	return mode, problems
}

type disablesMTLSKey struct{}

// DisablesMTLS reports whether any PeerAuthentication of the snapshot
// sets DISABLE, for a workload or one of its ports: only then can an
// endpoint's own mode differ from what its namespace's policies say
// (memoized per snapshot).
func DisablesMTLS(s *mesh.Snapshot) bool {
	return s.Memo(disablesMTLSKey{}, func() any {
		for _, c := range s.PeerAuthentications {
			pa := c.PeerAuthentication()
			if pa.GetMtls().GetMode() == securityv1beta1.PeerAuthentication_MutualTLS_DISABLE {
				return true
			}
			for _, pl := range pa.GetPortLevelMtls() {
				if pl.GetMode() == securityv1beta1.PeerAuthentication_MutualTLS_DISABLE {
					return true
				}
			}
		}
		return false
	}).(bool)
}
