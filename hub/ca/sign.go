package ca

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/spiffeid"
)

// SignOptions say what one signing may issue. The caller fills them from
// what it has authenticated (see Authorizer); nothing in the CSR widens
// them.
type SignOptions struct {
	// Identities are the SPIFFE IDs the caller may obtain. The CSR's URI
	// SAN must be one of them, and in the mesh's trust domain. A CSR has
	// exactly one URI SAN, as the SPIFFE X509-SVID
	// specification requires.
	Identities []ID
	// TTL is the requested lifetime; zero means Options.DefaultTTL. It is
	// shortened to Options.MaxTTL, and so that the certificate does not
	// outlive any certificate of its chain.
	TTL time.Duration
	// DNSNames and IPAddresses are the DNS and IP SANs the caller may
	// obtain; by default none. Email SANs are never issued.
	DNSNames    []string
	IPAddresses []net.IP
}

// leafBackdate is how far before now a leaf's NotBefore is set, for peers
// whose clocks are a little behind.
const leafBackdate = time.Minute

// Sign issues a certificate for the CSR (PEM) in mesh, with the SANs of the
// CSR that opts allow: every SAN must be allowed, or nothing is issued.
// The subject and extensions the CSR requests are ignored: a leaf has an
// empty subject (its identity is its URI SAN, which is then critical),
// key usage digitalSignature and keyEncipherment, extended key usage
// serverAuth and clientAuth, CA:FALSE, a random 128-bit serial, NotBefore a
// minute ago and NotAfter now + TTL (see SignOptions.TTL).
//
// It returns the chain as PEM: the leaf first, then the CA's chain in
// order, the root last (a generated root signs leaves itself, so its chain
// is leaf, root). That is the order of Istio's CreateCertificate answer,
// whose last entry is the root.
//
// A refusal is a *certreq.RefusalError whose message says what was refused and
// why; Sign does not log it, the caller does.
func (a *Authority) Sign(ctx context.Context, mesh string, csrPEM []byte, opts SignOptions) ([]byte, error) {
	is, err := a.issue(ctx, mesh, csrPEM, opts)
	if err != nil {
		return nil, err
	}
	return bytes.Join(is.chain, nil), nil
}

// issued is what issue returns: the leaf and the PEM chain, one entry per
// certificate, leaf first and root last.
type issued struct {
	leaf  *x509.Certificate
	chain [][]byte
	// roots is the mesh's bundle when it was signed (RootsPEM).
	roots []byte
}

func (a *Authority) issue(_ context.Context, mesh string, csrPEM []byte, opts SignOptions) (*issued, error) {
	return a.count(mesh, func() (*x509.CertificateRequest, error) { return certreq.Parse(csrPEM) }, opts, requestedSANs(opts))
}

// requestedSANs is the policy of Sign: the CSR's SANs, every one of which
// opts must allow.
func requestedSANs(opts SignOptions) sanPolicy {
	return func(c *meshCA, csr *x509.CertificateRequest) (sans, error) {
		uris, err := checkSANs(c.mesh, csr, opts)
		return sans{uris: uris, dns: csr.DNSNames, ips: csr.IPAddresses}, err
	}
}

// sans are the subject alternative names a certificate is issued with.
type sans struct {
	uris []*url.URL
	dns  []string
	ips  []net.IP
}

// sanPolicy decides, for a mesh's CA and a request, the SANs to issue, or
// refuses the request.
type sanPolicy func(*meshCA, *x509.CertificateRequest) (sans, error)

// MaxClusterServerNames is how many DNS and IP SANs a cluster certificate
// may carry.
const MaxClusterServerNames = 4

// SignCluster issues a spoke cluster's certificate in mesh (it implements
// enroll.Signer): its URI SAN is the cluster's SPIFFE ID,
// spiffe://<trust domain>/nave/cluster/<cluster>, whatever URI the request
// asks for; its DNS and IP SANs are the request's (at most
// MaxClusterServerNames, plain DNS names without wildcards, or IP
// addresses): the names the spoke's fallback xDS server is dialled by
// (docs/fallback.md; docs/security.md says what they let a spoke
// present). Only the request's key and those names are used (after
// certreq.Parse's checks). The certificate allows server and client
// authentication like every leaf of the Authority; it is valid for ttl
// (0: Options.DefaultTTL).
func (a *Authority) SignCluster(_ context.Context, mesh, cluster string, csrPEM []byte, ttl time.Duration) ([]byte, error) {
	is, err := a.count(mesh, func() (*x509.CertificateRequest, error) { return certreq.Parse(csrPEM) }, SignOptions{TTL: ttl},
		func(c *meshCA, csr *x509.CertificateRequest) (sans, error) {
			u, err := spiffeid.Cluster(c.mesh.TrustDomain, cluster)
			if err != nil {
				return sans{}, certreq.Refuse(certreq.ReasonIdentityNotAllowed, "cluster %q: %v", cluster, err)
			}
			if err := checkServerNames(csr.DNSNames, csr.IPAddresses, a.opts.HubNames); err != nil {
				return sans{}, err
			}
			return sans{uris: []*url.URL{u}, dns: csr.DNSNames, ips: csr.IPAddresses}, nil
		})
	if err != nil {
		return nil, err
	}
	return bytes.Join(is.chain, nil), nil
}

// CheckClusterServerNames is SignCluster's check of the DNS and IP SANs a
// cluster certificate would carry (it implements enroll.ServerNameChecker).
func (a *Authority) CheckClusterServerNames(dns []string, ips []net.IP) error {
	return checkServerNames(dns, ips, a.opts.HubNames)
}

// checkServerNames refuses DNS and IP SANs a cluster certificate may not
// carry: more than MaxClusterServerNames, a DNS name that is not a plain
// lower-case DNS name (RFC 1123: no wildcard, no trailing dot), an
// unspecified IP address, one of hubNames (the hub's own, a wildcard
// among them covering the names it matches).
func checkServerNames(dns []string, ips []net.IP, hubNames []string) error {
	if n := len(dns) + len(ips); n > MaxClusterServerNames {
		return certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: %d DNS and IP SANs; a cluster certificate carries at most %d (its fallback server's names)", n, MaxClusterServerNames)
	}
	for _, d := range dns {
		if errs := validation.IsDNS1123Subdomain(d); len(errs) > 0 {
			return certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: DNS SAN %q: not a DNS name: %s", d, strings.Join(errs, "; "))
		}
		if slices.ContainsFunc(hubNames, func(h string) bool { return hubNameMatches(h, d) }) {
			return certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: DNS SAN %q: a name of the hub (tls.hosts); a spoke's fallback server needs a name of its own", d)
		}
	}
	for _, ip := range ips {
		if ip.IsUnspecified() {
			return certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: IP SAN %s: the unspecified address names no server", ip)
		}
		if slices.ContainsFunc(hubNames, func(h string) bool { hip := net.ParseIP(h); return hip != nil && hip.Equal(ip) }) {
			return certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: IP SAN %s: an address of the hub (tls.hosts); a spoke's fallback server needs an address of its own", ip)
		}
	}
	return nil
}

// hubNameMatches reports whether the hub name h (of tls.hosts) covers the
// DNS name d: equal, or h a wildcard *.SUFFIX and d one label more than
// SUFFIX (as TLS clients match a wildcard certificate: the replicas'
// *.nave-hub-replicas.NAMESPACE.svc, docs/replicas.md).
func hubNameMatches(h, d string) bool {
	if strings.EqualFold(h, d) {
		return true
	}
	suffix, ok := strings.CutPrefix(h, "*.")
	if !ok {
		return false
	}
	label, rest, ok := strings.Cut(d, ".")
	return ok && label != "" && strings.EqualFold(rest, suffix)
}

// TrustBundlePEM is RootsPEM; it implements enroll.TrustBundler, so the
// Enrollment service hands spokes their mesh's roots.
func (a *Authority) TrustBundlePEM(mesh string) ([]byte, error) { return a.RootsPEM(mesh) }

// count issues for the request csr returns with the SANs policy decides,
// and counts and logs the outcome.
func (a *Authority) count(mesh string, csr func() (*x509.CertificateRequest, error), opts SignOptions, policy sanPolicy) (*issued, error) {
	is, err := a.issueUncounted(mesh, csr, opts, policy)
	if err != nil {
		if r, ok := certreq.ReasonOf(err); ok {
			a.metrics.refused(r)
		}
		return nil, err
	}
	a.metrics.issued.Inc()
	a.log.Debug("certificate issued", "mesh", mesh, "identities", uriStrings(is.leaf.URIs),
		"serial", is.leaf.SerialNumber.Text(16), "not_after", is.leaf.NotAfter.UTC().Format(time.RFC3339))
	return is, nil
}

func (a *Authority) issueUncounted(mesh string, parse func() (*x509.CertificateRequest, error), opts SignOptions, policy sanPolicy) (*issued, error) {
	c, err := a.ca(mesh)
	if err != nil {
		return nil, err
	}
	if opts.TTL < 0 {
		return nil, certreq.Refuse(certreq.ReasonInvalidRequest, "requested lifetime %s is negative", opts.TTL)
	}
	csr, err := parse()
	if err != nil {
		return nil, err
	}
	names, err := policy(c, csr)
	if err != nil {
		return nil, err
	}

	now := a.opts.Now()
	ttl := opts.TTL
	if ttl == 0 {
		ttl = a.opts.DefaultTTL
	}
	ttl = min(ttl, a.opts.MaxTTL)
	notAfter := now.Add(ttl)
	if notAfter.After(c.notAfter) {
		notAfter = c.notAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("mesh %q: CA certificate chain expired at %s", mesh, c.notAfter.UTC().Format(time.RFC3339))
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-leafBackdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		URIs:                  names.uris,
		DNSNames:              names.dns,
		IPAddresses:           names.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.path[0], csr.PublicKey, c.signer)
	if err != nil {
		return nil, fmt.Errorf("mesh %q: sign: %w", mesh, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("mesh %q: parse issued certificate: %w", mesh, err)
	}
	chain := make([][]byte, 0, 1+len(c.pathPEM))
	chain = append(chain, encodeCertPEM(der))
	for _, p := range c.pathPEM {
		chain = append(chain, slices.Clone(p))
	}
	return &issued{leaf: leaf, chain: chain, roots: c.rootsPEM}, nil
}

// checkSANs refuses a CSR with a SAN that opts do not allow, or without
// exactly one URI SAN, and returns the URI SANs to issue, built from the parsed IDs (so the
// certificate holds exactly what was checked).
func checkSANs(m Mesh, csr *x509.CertificateRequest, opts SignOptions) ([]*url.URL, error) {
	switch len(csr.URIs) {
	case 0:
		return nil, certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: has no URI SAN; want one SPIFFE ID (this caller may obtain %s)", idList(opts.Identities))
	case 1:
	default:
		return nil, certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: has %d URI SANs (%s); an X.509 SVID has exactly one", len(csr.URIs), strings.Join(uriStrings(csr.URIs), ", "))
	}
	uris := make([]*url.URL, 0, len(csr.URIs))
	for _, u := range csr.URIs {
		raw := u.String()
		id, err := ParseID(raw)
		if err != nil {
			return nil, certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: URI SAN %s: %v", raw, err)
		}
		if id.TrustDomain != m.TrustDomain {
			return nil, certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: URI SAN %s: trust domain %q is not mesh %q's (%q)", raw, id.TrustDomain, m.Name, m.TrustDomain)
		}
		if !slices.Contains(opts.Identities, id) {
			return nil, certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: URI SAN %s: not an identity this caller may obtain (it may obtain %s)", raw, idList(opts.Identities))
		}
		pu, err := url.Parse(id.String())
		if err != nil {
			return nil, fmt.Errorf("csr: URI SAN %s: %w", raw, err) // not reached: ParseID allows only plain URIs
		}
		uris = append(uris, pu)
	}
	for _, d := range csr.DNSNames {
		if !slices.Contains(opts.DNSNames, d) {
			return nil, certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: DNS SAN %q: not allowed for this caller (allowed: %s)", d, quotedList(opts.DNSNames))
		}
	}
	for _, ip := range csr.IPAddresses {
		if !slices.ContainsFunc(opts.IPAddresses, ip.Equal) {
			ips := make([]string, len(opts.IPAddresses))
			for i, a := range opts.IPAddresses {
				ips[i] = a.String()
			}
			return nil, certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: IP SAN %s: not allowed for this caller (allowed: %s)", ip, quotedList(ips))
		}
	}
	if len(csr.EmailAddresses) > 0 {
		return nil, certreq.Refuse(certreq.ReasonIdentityNotAllowed, "csr: email SAN %q: mesh certificates carry none", csr.EmailAddresses[0])
	}
	return uris, nil
}

func idList(ids []ID) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return strings.Join(s, ", ")
}

func quotedList(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}

func uriStrings(us []*url.URL) []string {
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = u.String()
	}
	return s
}
