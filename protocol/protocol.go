// Package protocol holds the spoke↔hub wire protocol's Go side: type URLs,
// metadata keys, and the conversion between config objects and the
// resources that travel in delta discovery messages. The messages and the
// gRPC service themselves are generated in protocol/v1.
//
// Everything here is stateless and safe for concurrent use.
package protocol

import (
	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// Version is the protocol version this code speaks.
const Version = "v1"

const typeURLPrefix = "type.googleapis.com/"

// Type URLs of the protocol's own messages.
var (
	// EnvelopeTypeURL is the type of every pushed resource body.
	EnvelopeTypeURL = typeURLPrefix + string((&protocolv1.Envelope{}).ProtoReflect().Descriptor().FullName())
	// SyncedTypeURL marks the end of a spoke's full state on a stream.
	SyncedTypeURL = typeURLPrefix + string((&protocolv1.Synced{}).ProtoReflect().Descriptor().FullName())
	// RejectionsTypeURL is the detail type in a NACK's error_detail.
	RejectionsTypeURL = typeURLPrefix + string((&protocolv1.Rejections{}).ProtoReflect().Descriptor().FullName())
	// ClusterStatusTypeURL is the resource type served on Watch.
	ClusterStatusTypeURL = typeURLPrefix + string((&protocolv1.ClusterStatus{}).ProtoReflect().Descriptor().FullName())
)

// gRPC metadata keys a spoke sends when it opens a stream. Until spokes
// authenticate with certificates they are the spoke's claimed identity;
// the hub reads them in exactly one place (its authenticator).
const (
	MetadataMesh     = "x-nave-mesh"
	MetadataCluster  = "x-nave-cluster"
	MetadataProtocol = "x-nave-protocol"
)

// MaxNameLength bounds a resource name ("namespace/name") on the wire.
const MaxNameLength = 253 + 1 + 253
