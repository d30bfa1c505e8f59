package dnsproxy

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
)

// RegistryKubernetes is the NameInfo registry of a Kubernetes service,
// whose short names a pod's search path forms resolve too.
const RegistryKubernetes = "Kubernetes"

// Table is the lookup form of a name table: every name the agent answers
// for, lower-cased and fully qualified (a final dot), with its addresses.
// It is immutable once built: share it freely.
type Table struct {
	// Version is the xDS version the table came with; Received is when.
	Version  string
	Received time.Time
	// Hosts is how many hosts of the name table have an address.
	Hosts int
	// names are the exact names (hosts and their short forms);
	// wildcards the "*.suffix." hosts, by "suffix.".
	names, wildcards map[string]*entry
	// search are the pod's search domains, lower-cased with a final dot.
	search []string
}

// entry is one host's addresses: A (IPv4) and AAAA (IPv6).
type entry struct {
	host     string // the name table's host it comes from
	v4, v6   []netip.Addr
	altNames []string // the further names that point at it
}

// Scope is what a table's short names depend on: the pod's namespace, the
// cluster's DNS domain suffix (cluster.local) and its resolv.conf search
// domains. A plain value.
type Scope struct {
	Namespace, DomainSuffix string
	Search                  []string
}

// BuildTable makes the lookup table of nt for a pod in scope. Each host
// answers for its own name; a Kubernetes service of the pod's cluster
// domain (host ending in .svc.<domainSuffix>) also for name.namespace,
// name.namespace.svc and, in the pod's namespace, name — the forms a
// search path completes, as Istio's agent does — and every entry for its
// alt_hosts. A host's own name wins over another host's short form; a
// host without a valid address answers nothing (its queries are
// forwarded).
func BuildTable(nt *ndsv1.NameTable, scope Scope, version string, received time.Time) *Table {
	t := &Table{Version: version, Received: received, names: map[string]*entry{}, wildcards: map[string]*entry{}}
	for _, s := range scope.Search {
		if s = fqdn(s); s != "." {
			t.search = append(t.search, s)
		}
	}
	hosts := make([]string, 0, len(nt.GetTable()))
	for h := range nt.GetTable() {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	svcDomain := fqdn("svc." + scope.DomainSuffix)
	var entries []*entry
	for _, h := range hosts {
		info := nt.GetTable()[h]
		e := &entry{host: h}
		for _, ip := range info.GetIps() {
			a, err := netip.ParseAddr(ip)
			if err != nil || a.Zone() != "" {
				continue
			}
			if a = a.Unmap(); a.Is4() {
				e.v4 = append(e.v4, a)
			} else {
				e.v6 = append(e.v6, a)
			}
		}
		name := fqdn(h)
		if len(e.v4)+len(e.v6) == 0 || name == "." {
			continue
		}
		t.Hosts++
		entries = append(entries, e)
		t.put(name, e)
		if info.GetRegistry() == RegistryKubernetes && scope.DomainSuffix != "" && strings.HasSuffix(name, "."+svcDomain) &&
			info.GetShortname() != "" && info.GetNamespace() != "" {
			short := strings.ToLower(info.GetShortname() + "." + info.GetNamespace())
			e.altNames = append(e.altNames, short+".", short+".svc.")
			if strings.EqualFold(info.GetNamespace(), scope.Namespace) {
				e.altNames = append(e.altNames, strings.ToLower(info.GetShortname())+".")
			}
		}
		for _, alt := range info.GetAltHosts() {
			if alt = fqdn(alt); alt != "." {
				e.altNames = append(e.altNames, alt)
			}
		}
	}
	// Short forms after every host's own name, so that none shadows a host.
	for _, e := range entries {
		for _, alt := range e.altNames {
			if _, taken := t.names[alt]; !taken {
				t.put(alt, e)
			}
		}
	}
	return t
}

// put files e under name, a wildcard ("*.suffix.") by its suffix.
func (t *Table) put(name string, e *entry) {
	if suffix, ok := strings.CutPrefix(name, "*."); ok {
		if _, taken := t.wildcards[suffix]; !taken {
			t.wildcards[suffix] = e
		}
		return
	}
	if _, taken := t.names[name]; !taken {
		t.names[name] = e
	}
}

// fqdn is name lower-cased with one final dot.
func fqdn(name string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(name), ".")) + "."
}

// Names is how many names the table answers for (wildcards counted once).
func (t *Table) Names() int { return len(t.names) + len(t.wildcards) }

// find is the entry of a lower-cased FQDN: an exact name, else the
// longest wildcard suffix that covers it.
func (t *Table) find(name string) *entry {
	if e, ok := t.names[name]; ok {
		return e
	}
	for i := 0; i < len(name)-1; i++ {
		if name[i] == '.' {
			if e, ok := t.wildcards[name[i+1:]]; ok {
				return e
			}
		}
	}
	return nil
}

// Lookup is how the table answers name (lower-cased, fully qualified):
// the entry and, when the query is the name completed with one of the
// pod's search domains (a stub resolver trying its search path:
// "reviews.ns.svc.cluster.local.ns.svc.cluster.local."), the length of
// the name it stands for, which the answer's CNAME points at; 0 when the
// name is answered as it is. A nil entry: the table does not know the
// name.
func (t *Table) Lookup(name string) (e *entry, base int) {
	if e := t.find(name); e != nil {
		return e, 0
	}
	for _, s := range t.search {
		if len(name) > len(s)+1 && strings.HasSuffix(name, s) && name[len(name)-len(s)-1] == '.' {
			b := len(name) - len(s)
			if e := t.find(name[:b]); e != nil {
				return e, b
			}
		}
	}
	return nil, 0
}

// HostView is one host of the table as /debug/dns shows it.
type HostView struct {
	Host  string   `json:"host"`
	IPs   []string `json:"ips"`
	Names []string `json:"names,omitempty"`
}

// View lists the table's hosts, sorted, with the further names each
// answers for.
func (t *Table) View() []HostView {
	byHost := map[*entry]*HostView{}
	var out []*HostView
	add := func(name string, e *entry) {
		v, ok := byHost[e]
		if !ok {
			v = &HostView{Host: e.host}
			for _, a := range slices.Concat(e.v4, e.v6) {
				v.IPs = append(v.IPs, a.String())
			}
			byHost[e] = v
			out = append(out, v)
		}
		if name != fqdn(e.host) {
			v.Names = append(v.Names, name)
		}
	}
	for n, e := range t.names {
		add(n, e)
	}
	for s, e := range t.wildcards {
		add("*."+s, e)
	}
	res := make([]HostView, 0, len(out))
	for _, v := range out {
		slices.Sort(v.Names)
		res = append(res, *v)
	}
	slices.SortFunc(res, func(a, b HostView) int { return strings.Compare(a.Host, b.Host) })
	return res
}
