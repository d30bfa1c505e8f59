package ca

import "github.com/navemesh/nave/shared/spiffeid"

// ID is a SPIFFE ID. Its rules live in shared/spiffeid, which spoke
// enrollment uses too, so the CA issues exactly what the rest of nave
// accepts.
type ID = spiffeid.ID

// The SPIFFE ID constructors and parsers the CA uses (see shared/spiffeid).
var (
	WorkloadID          = spiffeid.WorkloadID
	ClusterID           = spiffeid.ClusterID
	ParseSPIFFEID       = spiffeid.ParseWorkloadID
	ParseClusterID      = spiffeid.ParseClusterID
	ParseID             = spiffeid.ParseID
	ValidateTrustDomain = spiffeid.ValidateTrustDomain
	validateLabel       = spiffeid.ValidateName
)
