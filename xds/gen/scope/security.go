package scope

import (
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// PeerAuthentications returns the PeerAuthentications of the proxy's own
// workload (selected on first use; conflicts are recorded as problems).
func (v *View) PeerAuthentications() policy.PeerAuthentications {
	if !v.peerDone {
		v.peerDone = true
		v.peerAuthn = policy.SelectPeerAuthentications(v.snap, v.key.Namespace, v.labels, v.problems.Add)
	}
	return v.peerAuthn
}

// AuthorizationPolicies returns the AuthorizationPolicies that apply to
// the proxy's own workload (selected on first use).
func (v *View) AuthorizationPolicies() []*mesh.Config {
	if !v.authzDone {
		v.authzDone = true
		v.authzPolicies = policy.SelectAuthorizationPolicies(v.snap, v.key.Namespace, v.labels, v.problems.Add)
	}
	return v.authzPolicies
}

// RequestAuthentications returns the RequestAuthentications that apply
// to the proxy's own workload (selected on first use).
func (v *View) RequestAuthentications() []*mesh.Config {
	if !v.requestDone {
		v.requestDone = true
		v.requestAuthn = policy.SelectRequestAuthentications(v.snap, v.key.Namespace, v.labels, v.problems.Add)
	}
	return v.requestAuthn
}

// Telemetry returns what the Telemetry objects and the MeshConfig's
// default providers configure for the proxy's own workload (resolved on
// first use).
func (v *View) Telemetry() *policy.Telemetry {
	if !v.telemetryDone {
		v.telemetryDone = true
		v.telemetry = policy.SelectTelemetry(v.snap, v.key.Namespace, v.labels, v.problems.Add)
	}
	return v.telemetry
}
