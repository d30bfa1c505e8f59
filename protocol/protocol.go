// Package protocol holds the spoke↔hub wire protocol's Go side: type URLs,
// metadata keys, and the conversion between config objects and the
// resources that travel in delta discovery messages. The messages and the
// gRPC service themselves are generated in protocol/v1.
//
// Everything here is stateless and safe for concurrent use.
package protocol

import (
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/typeurl"
)

// Version is the protocol version this code speaks.
const Version = "v1"

// Type URLs of the protocol's own messages.
var (
	// EnvelopeTypeURL is the type of every pushed resource body.
	EnvelopeTypeURL = typeurl.Of(&protocolv1.Envelope{})
	// SyncedTypeURL marks the end of a spoke's full state on a stream.
	SyncedTypeURL = typeurl.Of(&protocolv1.Synced{})
	// RejectionsTypeURL is the detail type in a NACK's error_detail.
	RejectionsTypeURL = typeurl.Of(&protocolv1.Rejections{})
	// ClusterStatusTypeURL is the resource type served on Watch.
	ClusterStatusTypeURL = typeurl.Of(&protocolv1.ClusterStatus{})
)

// gRPC metadata keys a spoke sends when it opens a stream. Until spokes
// authenticate with certificates they are the spoke's claimed identity;
// the hub reads them in exactly one place (its authenticator).
const (
	MetadataMesh     = "x-nave-mesh"
	MetadataCluster  = "x-nave-cluster"
	MetadataProtocol = "x-nave-protocol"
	// MetadataDomainSuffix is the cluster's DNS suffix (service hostnames
	// are name.namespace.svc.<suffix>); absent means
	// meshconfig.DefaultDomainSuffix. Not an identity: the hub uses it to
	// complete the cluster's short host names.
	MetadataDomainSuffix = "x-nave-domain-suffix"
)

// gRPC trailer keys a hub replica sets when it closes a spoke's Push
// stream to balance spokes across replicas (status UNAVAILABLE): the spoke
// reconnects at once instead of backing off, to TrailerRedirect first if
// it is set (the host:port of the least-loaded replica's sync service),
// then to its own hub address.
const (
	TrailerReconnect = "x-nave-reconnect"
	TrailerRedirect  = "x-nave-redirect"
)

// MaxNameLength bounds a resource name ("namespace/name") on the wire.
const MaxNameLength = 253 + 1 + 253
