package webhookcert

import (
	"slices"
	"time"
)

// Status is what /debug/webhook shows of the certificates. A plain value.
type Status struct {
	Secret         string            `json:"secret"`
	Authorities    []AuthorityStatus `json:"authorities"`
	Serving        *ServingStatus    `json:"serving,omitempty"`
	Configurations []ConfigStatus    `json:"configurations"`
	// Problems are unreadable entries of the Secret (left out of the
	// bundle, dropped at the next rotation).
	Problems    []string  `json:"problems,omitempty"`
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
}

// AuthorityStatus is one CA of the Secret.
type AuthorityStatus struct {
	Generation  int       `json:"generation"`
	Fingerprint string    `json:"sha256"`
	NotBefore   time.Time `json:"notBefore"`
	NotAfter    time.Time `json:"notAfter"`
	Expired     bool      `json:"expired,omitempty"`
	Signing     bool      `json:"signing,omitempty"`
}

// ServingStatus is this replica's serving certificate.
type ServingStatus struct {
	Serial       string    `json:"serial"`
	CAGeneration int       `json:"caGeneration"`
	DNSNames     []string  `json:"dnsNames,omitempty"`
	IPAddresses  []string  `json:"ipAddresses,omitempty"`
	NotBefore    time.Time `json:"notBefore"`
	NotAfter     time.Time `json:"notAfter"`
	RenewAt      time.Time `json:"renewAt"`
}

// ConfigStatus is one webhook configuration whose caBundle is kept.
type ConfigStatus struct {
	Name string `json:"name"`
	// Kind: ValidatingWebhookConfiguration or MutatingWebhookConfiguration.
	Kind string `json:"kind"`
	// State: current, updated, not found, not synced, holds a newer CA
	// than this replica has seen yet, changed meanwhile, update failed.
	State      string `json:"state"`
	Generation int    `json:"generation,omitempty"`
}

// Status returns a copy of the Manager's status.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.status
	st.Authorities = slices.Clone(st.Authorities)
	st.Configurations = slices.Clone(st.Configurations)
	st.Problems = slices.Clone(st.Problems)
	return st
}

func (m *Manager) setStatus(cas []*authority, sig *authority, cur *serving, configs []ConfigStatus, problems []string, now time.Time) {
	var auths []AuthorityStatus
	for _, a := range cas {
		auths = append(auths, AuthorityStatus{Generation: a.gen, Fingerprint: a.fingerprint(), NotBefore: a.cert.NotBefore,
			NotAfter: a.cert.NotAfter, Expired: !a.validAt(now), Signing: sig != nil && a == sig})
	}
	var srv *ServingStatus
	if cur != nil {
		srv = &ServingStatus{Serial: cur.cert.SerialNumber.Text(16), CAGeneration: cur.caGen, DNSNames: cur.cert.DNSNames,
			NotBefore: cur.cert.NotBefore, NotAfter: cur.cert.NotAfter, RenewAt: cur.renewAt()}
		for _, ip := range cur.cert.IPAddresses {
			srv.IPAddresses = append(srv.IPAddresses, ip.String())
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.Authorities, m.status.Serving, m.status.Configurations, m.status.Problems = auths, srv, configs, problems
}
