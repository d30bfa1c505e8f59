package ingest

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/protocol"
	"github.com/navemesh/nave/shared/meshconfig"
)

// ClusterIdentity is the (mesh, cluster) a spoke's stream writes to. It comes
// from the Authenticator only, never from a field of a pushed message
// (docs/design.md invariant 1).
type ClusterIdentity struct {
	Mesh    string `json:"mesh"`
	Cluster string `json:"cluster"`
}

func (id ClusterIdentity) String() string { return id.Mesh + "/" + id.Cluster }

// Authenticator decides the identity of a spoke's stream. It is the one
// seam where identity is established; implementations must be safe for
// concurrent use.
type Authenticator interface {
	Authenticate(ctx context.Context) (ClusterIdentity, error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(ctx context.Context) (ClusterIdentity, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(ctx context.Context) (ClusterIdentity, error) { return f(ctx) }

var labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ClaimedIdentity trusts the mesh and cluster a spoke names in its stream
// metadata. It authenticates nothing: it stands in until spokes present
// certificates, and exists so that exactly one place reads the claim.
func ClaimedIdentity() Authenticator {
	return AuthenticatorFunc(func(ctx context.Context) (ClusterIdentity, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		get := func(key string) (string, error) {
			vs := md.Get(key)
			if len(vs) != 1 {
				return "", status.Errorf(codes.Unauthenticated, "metadata %s: want exactly one value, got %d", key, len(vs))
			}
			if !labelRE.MatchString(vs[0]) {
				return "", status.Errorf(codes.Unauthenticated, "metadata %s: %q is not a DNS label", key, vs[0])
			}
			return vs[0], nil
		}
		mesh, err := get(protocol.MetadataMesh)
		if err != nil {
			return ClusterIdentity{}, err
		}
		cluster, err := get(protocol.MetadataCluster)
		if err != nil {
			return ClusterIdentity{}, err
		}
		return ClusterIdentity{Mesh: mesh, Cluster: cluster}, nil
	})
}

// HostedMeshes refuses, with PermissionDenied, a stream that a decides
// belongs to a mesh hosted does not serve now (hosted is asked on every
// stream: meshes come and go while the hub runs); it passes the others
// on. The refusal lists names(), the meshes served (nil: no list). It
// bounds what ClaimedIdentity accepts: a plaintext spoke still names its
// cluster unchecked, but only in a mesh of this hub.
func HostedMeshes(hosted func(mesh string) bool, names func() []string, a Authenticator) Authenticator {
	return AuthenticatorFunc(func(ctx context.Context) (ClusterIdentity, error) {
		id, err := a.Authenticate(ctx)
		if err != nil {
			return ClusterIdentity{}, err
		}
		if !hosted(id.Mesh) {
			msg := fmt.Sprintf("mesh %q is not a mesh of this hub", id.Mesh)
			if names != nil {
				msg += fmt.Sprintf(" (it serves %s)", strings.Join(names(), ", "))
			}
			return ClusterIdentity{}, status.Error(codes.PermissionDenied, msg)
		}
		return id, nil
	})
}

// otherClaim returns the (mesh, cluster) a stream's metadata claims
// (protocol.MetadataMesh, MetadataCluster) when it names something other
// than id, the identity the Authenticator decided from the stream's
// certificate. The stream is still served as id; the claim only tells of a
// misconfigured or tampered spoke. A claim absent or in part absent
// differs only in what it names.
func otherClaim(ctx context.Context, id ClusterIdentity) (ClusterIdentity, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	claimed := id
	if vs := md.Get(protocol.MetadataMesh); len(vs) > 0 {
		claimed.Mesh = strings.Join(vs, ",")
	}
	if vs := md.Get(protocol.MetadataCluster); len(vs) > 0 {
		claimed.Cluster = strings.Join(vs, ",")
	}
	return claimed, claimed != id
}

// checkProtocol refuses a stream whose metadata names a protocol version
// other than ours. It is checked for every stream, whatever the
// Authenticator.
func checkProtocol(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(protocol.MetadataProtocol); len(v) > 0 && v[0] != protocol.Version {
		return status.Error(codes.FailedPrecondition, fmt.Sprintf("protocol %q is not supported; this hub speaks %s", v[0], protocol.Version))
	}
	return nil
}

// domainSuffix reads the cluster's DNS suffix from the stream's metadata
// (protocol.MetadataDomainSuffix): meshconfig.DefaultDomainSuffix when
// absent, InvalidArgument when it is not one value that is a DNS subdomain.
func domainSuffix(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vs := md.Get(protocol.MetadataDomainSuffix)
	switch {
	case len(vs) == 0:
		return meshconfig.DefaultDomainSuffix, nil
	case len(vs) > 1:
		return "", status.Errorf(codes.InvalidArgument, "metadata %s: %d values, want one", protocol.MetadataDomainSuffix, len(vs))
	}
	if err := meshconfig.CheckDomainSuffix(vs[0]); err != nil {
		return "", status.Errorf(codes.InvalidArgument, "metadata %s: %v", protocol.MetadataDomainSuffix, err)
	}
	return vs[0], nil
}
