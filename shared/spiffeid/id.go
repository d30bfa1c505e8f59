package spiffeid

import (
	"errors"
	"fmt"
	"strings"
)

// ID is a SPIFFE ID, spiffe://<TrustDomain><Path>. The zero ID is not a
// valid identity. IDs are comparable values: == compares them, and they may
// key a map.
//
// Nave uses two shapes:
//   - a workload: spiffe://<td>/ns/<namespace>/sa/<serviceaccount>
//     (WorkloadID, ParseWorkloadID);
//   - a spoke: spiffe://<td>/nave/cluster/<cluster> (ClusterID,
//     ParseClusterID).
//
// ParseID accepts any path whose segments follow the same strict rules.
type ID struct {
	// TrustDomain is a lowercase DNS-style name: labels of [a-z0-9-],
	// starting and ending with a letter or digit, joined by dots.
	TrustDomain string
	// Path is the ID's path: "/" then segments joined by "/". It is never
	// empty and never ends with "/".
	Path string
}

// Limits from the SPIFFE ID specification and DNS.
const (
	maxIDLength          = 2048
	maxTrustDomainLength = 255
	maxLabelLength       = 63
	maxSegmentLength     = 253
	spiffeScheme         = "spiffe://"
)

// String returns the URI form of id, spiffe://<td>/<path>.
func (id ID) String() string {
	if id.TrustDomain == "" {
		return ""
	}
	return spiffeScheme + id.TrustDomain + id.Path
}

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id == ID{} }

// Workload returns the namespace and service account of a workload ID, and
// false for any other shape.
func (id ID) Workload() (namespace, serviceAccount string, ok bool) {
	segs := strings.Split(strings.TrimPrefix(id.Path, "/"), "/")
	if len(segs) != 4 || segs[0] != "ns" || segs[2] != "sa" {
		return "", "", false
	}
	return segs[1], segs[3], true
}

// Cluster returns the cluster of a spoke ID, and false for any other shape.
func (id ID) Cluster() (cluster string, ok bool) {
	segs := strings.Split(strings.TrimPrefix(id.Path, "/"), "/")
	if len(segs) != 3 || segs[0] != "nave" || segs[1] != "cluster" {
		return "", false
	}
	return segs[2], true
}

// WorkloadID returns spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccount>,
// or an error naming the part that is not valid. A namespace is a DNS label
// (Kubernetes namespaces are); a service account may also hold dots
// (Kubernetes service accounts are DNS subdomains).
func WorkloadID(trustDomain, namespace, serviceAccount string) (ID, error) {
	if err := ValidateTrustDomain(trustDomain); err != nil {
		return ID{}, err
	}
	if err := ValidateName(namespace); err != nil {
		return ID{}, fmt.Errorf("namespace %q: %w", namespace, err)
	}
	if err := validateSegment(serviceAccount); err != nil {
		return ID{}, fmt.Errorf("service account %q: %w", serviceAccount, err)
	}
	return checkLength(ID{TrustDomain: trustDomain, Path: "/ns/" + namespace + "/sa/" + serviceAccount})
}

// ClusterID returns spiffe://<trustDomain>/nave/cluster/<cluster>, the
// identity of the spoke of one cluster, or an error naming the part that is
// not valid. A cluster name is a DNS label.
func ClusterID(trustDomain, cluster string) (ID, error) {
	if err := ValidateTrustDomain(trustDomain); err != nil {
		return ID{}, err
	}
	if err := ValidateName(cluster); err != nil {
		return ID{}, fmt.Errorf("cluster %q: %w", cluster, err)
	}
	return checkLength(ID{TrustDomain: trustDomain, Path: "/nave/cluster/" + cluster})
}

// ParseWorkloadID parses a workload ID, spiffe://<td>/ns/<namespace>/sa/<sa>,
// strictly: lowercase "spiffe" scheme, a valid trust domain (no port, no
// user info), the path exactly ns/<namespace>/sa/<serviceaccount>, no query
// and no fragment, no percent-encoding. The error says what is wrong.
func ParseWorkloadID(s string) (ID, error) {
	id, err := ParseID(s)
	if err != nil {
		return ID{}, err
	}
	ns, _, ok := id.Workload()
	if !ok {
		return ID{}, fmt.Errorf("spiffe id %q: path %q is not /ns/<namespace>/sa/<serviceaccount>", s, id.Path)
	}
	if err := ValidateName(ns); err != nil {
		return ID{}, fmt.Errorf("spiffe id %q: namespace %q: %w", s, ns, err)
	}
	return id, nil
}

// ParseClusterID parses a spoke ID, spiffe://<td>/nave/cluster/<cluster>,
// with the rules of ParseID.
func ParseClusterID(s string) (ID, error) {
	id, err := ParseID(s)
	if err != nil {
		return ID{}, err
	}
	c, ok := id.Cluster()
	if !ok {
		return ID{}, fmt.Errorf("spiffe id %q: path %q is not /nave/cluster/<cluster>", s, id.Path)
	}
	if err := ValidateName(c); err != nil {
		return ID{}, fmt.Errorf("spiffe id %q: cluster %q: %w", s, c, err)
	}
	return id, nil
}

// ParseID parses a SPIFFE ID of any path shape, as strictly as
// ParseWorkloadID: every path segment is lowercase letters, digits, '-' and
// '.', starting and ending with a letter or digit, so "." and ".." and
// empty segments are refused. Use it where an identity may be a workload or
// something else (a spoke), and check the shape with ID.Workload or
// ID.Cluster.
func ParseID(s string) (ID, error) {
	if len(s) > maxIDLength {
		return ID{}, fmt.Errorf("spiffe id of %d bytes: longer than %d", len(s), maxIDLength)
	}
	if !strings.HasPrefix(s, spiffeScheme) {
		scheme, _, found := strings.Cut(s, ":")
		if found && strings.EqualFold(scheme, "spiffe") {
			return ID{}, fmt.Errorf("spiffe id %q: scheme must be lowercase \"spiffe://\"", s)
		}
		return ID{}, fmt.Errorf("spiffe id %q: scheme is not \"spiffe://\"", s)
	}
	rest := s[len(spiffeScheme):]
	// Name the URI parts that a SPIFFE ID must not have before looking at
	// characters, so the error says "query" rather than "bad character".
	switch {
	case strings.Contains(rest, "?"):
		return ID{}, fmt.Errorf("spiffe id %q: has a query; SPIFFE IDs have none", s)
	case strings.Contains(rest, "#"):
		return ID{}, fmt.Errorf("spiffe id %q: has a fragment; SPIFFE IDs have none", s)
	case strings.Contains(rest, "%"):
		return ID{}, fmt.Errorf("spiffe id %q: has percent-encoding; SPIFFE IDs have none", s)
	}
	td, path, _ := strings.Cut(rest, "/")
	switch {
	case strings.Contains(td, "@"):
		return ID{}, fmt.Errorf("spiffe id %q: has user info; SPIFFE IDs have none", s)
	case strings.Contains(td, ":"):
		return ID{}, fmt.Errorf("spiffe id %q: trust domain has a port; SPIFFE IDs have none", s)
	}
	if err := ValidateTrustDomain(td); err != nil {
		return ID{}, fmt.Errorf("spiffe id %q: %w", s, err)
	}
	if path == "" {
		return ID{}, fmt.Errorf("spiffe id %q: has no path; a workload or spoke identity needs one", s)
	}
	for i, seg := range strings.Split(path, "/") {
		if err := validateSegment(seg); err != nil {
			return ID{}, fmt.Errorf("spiffe id %q: path segment %d %q: %w", s, i+1, seg, err)
		}
	}
	return ID{TrustDomain: td, Path: "/" + path}, nil
}

// ValidateTrustDomain returns an error unless td is a lowercase DNS-style
// name: at most 255 bytes, dot-separated labels of 1 to 63 letters, digits
// and '-', each starting and ending with a letter or digit.
func ValidateTrustDomain(td string) error {
	if td == "" {
		return errors.New("trust domain is empty")
	}
	if len(td) > maxTrustDomainLength {
		return fmt.Errorf("trust domain of %d bytes: longer than %d", len(td), maxTrustDomainLength)
	}
	for label := range strings.SplitSeq(td, ".") {
		if err := ValidateName(label); err != nil {
			return fmt.Errorf("trust domain %q: label %q: %w", td, label, err)
		}
	}
	return nil
}

func checkLength(id ID) (ID, error) {
	if s := id.String(); len(s) > maxIDLength {
		return ID{}, fmt.Errorf("spiffe id of %d bytes: longer than %d", len(s), maxIDLength)
	}
	return id, nil
}

// validateLabel checks a DNS label: 1-63 of [a-z0-9-], alphanumeric at
// both ends.
// ValidateName checks that s is a DNS label (the form of mesh, cluster and
// namespace names) and says why not.
func ValidateName(s string) error {
	if len(s) > maxLabelLength {
		return fmt.Errorf("longer than %d bytes", maxLabelLength)
	}
	return validateName(s, false)
}

// validateSegment checks a path segment: 1-253 of [a-z0-9.-], alphanumeric
// at both ends.
func validateSegment(s string) error {
	if len(s) > maxSegmentLength {
		return fmt.Errorf("longer than %d bytes", maxSegmentLength)
	}
	return validateName(s, true)
}

func validateName(s string, dots bool) error {
	if s == "" {
		return errors.New("is empty")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' || (dots && c == '.'):
			if i == 0 || i == len(s)-1 {
				return fmt.Errorf("must start and end with a lowercase letter or digit, not %q", c)
			}
		case c >= 'A' && c <= 'Z':
			return errors.New("has an uppercase letter; only lowercase is allowed")
		default:
			if dots {
				return fmt.Errorf("has %q; only lowercase letters, digits, '-' and '.' are allowed", c)
			}
			return fmt.Errorf("has %q; only lowercase letters, digits and '-' are allowed", c)
		}
	}
	return nil
}

// Hub is the SPIFFE ID of the hub's serving certificate, issued by the
// hub's own serving CA (never a tenant's) in trust domain
// hub.nave.internal: the identity the hub shows spokes, as a server, and
// as the client that dials a polled spoke (which requires exactly it).
var Hub = ID{TrustDomain: "hub.nave.internal", Path: "/ns/nave-system/sa/nave-hub"}
