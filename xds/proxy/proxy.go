// Package proxy is the model of one xDS client: who it is (from its node),
// what kind of proxy it is, and the explicit key the generators take
// (docs/design.md invariant 6).
//
// Node ids follow Istio's form TYPE~IP~POD.NAMESPACE~DOMAIN, where TYPE is
// "sidecar" or "router" for Envoy. Any other id (or metadata GENERATOR=grpc)
// is a proxyless gRPC client. Metadata keys are Istio's where Istio has one
// (NAMESPACE, LABELS, SERVICE_ACCOUNT, INSTANCE_IPS, NETWORK, CLUSTER_ID,
// ISTIO_VERSION, DNS_CAPTURE, DNS_AUTO_ALLOCATE), plus nave's MESH.
package proxy

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/xds/mesh"
)

// Type is the kind of proxy.
type Type string

// Proxy types.
const (
	// Sidecar is an Envoy next to one workload.
	Sidecar Type = "sidecar"
	// Router is an Envoy gateway (ingress or egress).
	Router Type = "router"
	// GRPC is a proxyless gRPC client or server (grpc-go's xDS support).
	GRPC Type = "proxyless"
)

// Node metadata keys.
const (
	MetaMesh           = xdsbootstrap.MetaMesh
	MetaNamespace      = xdsbootstrap.MetaNamespace
	MetaLabels         = xdsbootstrap.MetaLabels
	MetaServiceAccount = xdsbootstrap.MetaServiceAccount
	MetaInstanceIPs    = xdsbootstrap.MetaInstanceIPs
	MetaNetwork        = xdsbootstrap.MetaNetwork
	MetaClusterID      = xdsbootstrap.MetaClusterID
	MetaGenerator      = xdsbootstrap.MetaGenerator
	MetaSDSCluster     = xdsbootstrap.MetaSDSCluster
	// MetaIstioVersion is set by Istio's pilot-agent, or by nave-agent
	// from proxyMetadata ISTIO_META_ISTIO_VERSION (docs/telemetry.md): the
	// proxy is Istio's Envoy build, with Istio's filters (istio.stats,
	// istio.metadata_exchange; decision 039); EnvoyFilter proxyVersion
	// matches read it too.
	MetaIstioVersion = "ISTIO_VERSION"
	// MetaDNSCapture is "true" when the pod's agent answers its DNS
	// (Istio's ISTIO_META_DNS_CAPTURE): the proxy then resolves
	// ServiceEntry hosts without addresses to the mesh's auto-allocated
	// addresses and gets listeners and routes for them (docs/dns.md).
	MetaDNSCapture = "DNS_CAPTURE"
	// MetaDNSAutoAllocate is Istio's ISTIO_META_DNS_AUTO_ALLOCATE. Istio
	// allocates addresses mesh-wide by default (PILOT_ENABLE_IP_AUTOALLOCATE),
	// so a proxy that captures DNS uses them whatever this says; it is
	// parsed (and shown) but decides nothing.
	MetaDNSAutoAllocate = "DNS_AUTO_ALLOCATE"
)

// Proxy is one connected xDS client, parsed and validated once per
// connection.
type Proxy struct {
	ID             string
	Type           Type
	Mesh           string
	Namespace      string
	Name           string // the pod (or VM) name, when the id names one
	IPs            []string
	Labels         map[string]string
	ServiceAccount string
	Network        string
	Cluster        string // the Kubernetes cluster the proxy runs in
	Locality       mesh.Locality
	// SDSCluster is the bootstrap cluster serving the proxy's workload
	// secrets (a local agent); empty: the hub, over ADS.
	SDSCluster string
	// IstioVersion is Istio's version of a proxy of Istio's Envoy build
	// (node metadata ISTIO_VERSION); empty for upstream Envoy.
	IstioVersion string
	// DNSCapture and DNSAutoAllocate are the node's DNS_CAPTURE and
	// DNS_AUTO_ALLOCATE (Istio's boolean strings).
	DNSCapture      bool
	DNSAutoAllocate bool
}

// FromNode parses an xDS node. defaultMesh applies when the node names no
// mesh. The error says which field is unusable and why.
func FromNode(n *corev3.Node, defaultMesh string) (*Proxy, error) {
	if n == nil {
		return nil, fmt.Errorf("the first request of a stream must carry the node")
	}
	if n.GetId() == "" {
		return nil, fmt.Errorf("node.id is required")
	}
	md := n.GetMetadata().GetFields()
	p := &Proxy{ID: n.GetId(), Type: GRPC, Mesh: defaultMesh}
	var err error
	str := func(key string) string {
		v, ok := md[key]
		if !ok || err != nil {
			return ""
		}
		s, isStr := v.GetKind().(*structpb.Value_StringValue)
		if !isStr {
			err = fmt.Errorf("node.metadata.%s must be a string", key)
			return ""
		}
		return s.StringValue
	}
	if m, ok := md[MetaMesh]; ok {
		if p.Mesh = str(MetaMesh); err == nil && p.Mesh == "" {
			return nil, fmt.Errorf("node.metadata.%s must be a non-empty string (got %v)", MetaMesh, m.AsInterface())
		}
	}
	p.Namespace = str(MetaNamespace)
	p.ServiceAccount = str(MetaServiceAccount)
	p.Network = str(MetaNetwork)
	p.Cluster = str(MetaClusterID)
	p.SDSCluster = str(MetaSDSCluster)
	p.IstioVersion = str(MetaIstioVersion)
	ips := str(MetaInstanceIPs)
	generator := str(MetaGenerator)
	dnsCapture, dnsAuto := str(MetaDNSCapture), str(MetaDNSAutoAllocate)
	if err != nil {
		return nil, err
	}
	if p.DNSCapture, err = metaBool(MetaDNSCapture, dnsCapture); err != nil {
		return nil, err
	}
	if p.DNSAutoAllocate, err = metaBool(MetaDNSAutoAllocate, dnsAuto); err != nil {
		return nil, err
	}
	if v, ok := md[MetaLabels]; ok {
		s := v.GetStructValue()
		if s == nil {
			return nil, fmt.Errorf("node.metadata.%s must be a struct of strings", MetaLabels)
		}
		p.Labels = make(map[string]string, len(s.GetFields()))
		for k, lv := range s.GetFields() {
			sv, isStr := lv.GetKind().(*structpb.Value_StringValue)
			if !isStr {
				return nil, fmt.Errorf("node.metadata.%s.%s must be a string", MetaLabels, k)
			}
			p.Labels[k] = sv.StringValue
		}
	}
	if l := n.GetLocality(); l != nil {
		p.Locality = mesh.Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubZone()}
	}

	if parts := strings.Split(p.ID, "~"); len(parts) == 4 && (parts[0] == string(Sidecar) || parts[0] == string(Router)) {
		p.Type = Type(parts[0])
		if parts[1] != "" {
			if _, perr := netip.ParseAddr(parts[1]); perr != nil {
				return nil, fmt.Errorf("node.id %q: %q is not an IP address (want TYPE~IP~POD.NAMESPACE~DOMAIN)", p.ID, parts[1])
			}
			if ips == "" {
				ips = parts[1]
			}
		}
		if name, ns, ok := strings.Cut(parts[2], "."); ok {
			p.Name = name
			if p.Namespace == "" {
				p.Namespace = ns
			} else if p.Namespace != ns {
				return nil, fmt.Errorf("node.id %q names namespace %q but node.metadata.%s is %q", p.ID, ns, MetaNamespace, p.Namespace)
			}
		}
	}
	if generator == xdsbootstrap.GeneratorGRPC {
		p.Type = GRPC
	}
	for _, ip := range strings.Split(ips, ",") {
		if ip = strings.TrimSpace(ip); ip == "" {
			continue
		}
		if _, perr := netip.ParseAddr(ip); perr != nil {
			return nil, fmt.Errorf("node.metadata.%s: %q is not an IP address", MetaInstanceIPs, ip)
		}
		p.IPs = append(p.IPs, ip)
	}
	if p.Type != GRPC && p.Namespace == "" {
		return nil, fmt.Errorf("node %q: a %s needs a namespace (node.metadata.%s or an id of the form TYPE~IP~POD.NAMESPACE~DOMAIN)", p.ID, p.Type, MetaNamespace)
	}
	return p, nil
}

// metaBool parses a boolean node metadata string as Istio's StringBool
// does (strconv.ParseBool); empty is false.
func metaBool(key, v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("node.metadata.%s: %q is not a boolean", key, v)
	}
	return b, nil
}

// Key is everything about a proxy that generation may depend on, and
// nothing else: proxies with equal keys receive identical config. It is
// comparable, so it can key a cache.
type Key struct {
	Type      Type
	Mesh      string
	Namespace string
	// Labels is the canonical form of the labels: sorted "k=v" joined by
	// newlines. LabelMap parses it.
	Labels string
	// IPs is the sorted, comma-joined instance IPs (they decide the
	// inbound listener).
	IPs      string
	Network  string
	Locality mesh.Locality
	// Cluster is the cluster the proxy runs in: it decides the endpoints
	// of cluster-local hosts (MeshConfig serviceSettings clusterLocal).
	Cluster string
	// SDSCluster is where the proxy's workload secrets come from (see
	// Proxy.SDSCluster).
	SDSCluster string
	// IstioBuild is true for a proxy of Istio's Envoy build (its node
	// names an ISTIO_VERSION): it gets Istio's telemetry filters.
	IstioBuild bool
	// Version is the proxy's ISTIO_VERSION (EnvoyFilter proxyVersion
	// matches).
	Version string
	// DNSCapture is true for a proxy whose agent answers its DNS
	// (DNS_CAPTURE): it is given the mesh's auto-allocated addresses
	// (mesh.Service.AutoAddresses), as Istio's GetAddressForProxy does.
	DNSCapture bool
}

// Key returns the proxy's generation key.
func (p *Proxy) Key() Key {
	labels := make([]string, 0, len(p.Labels))
	for k, v := range p.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	ips := append([]string(nil), p.IPs...)
	sort.Strings(ips)
	return Key{
		Type:       p.Type,
		Mesh:       p.Mesh,
		Namespace:  p.Namespace,
		Labels:     strings.Join(labels, "\n"),
		IPs:        strings.Join(ips, ","),
		Network:    p.Network,
		Locality:   p.Locality,
		Cluster:    p.Cluster,
		SDSCluster: p.SDSCluster,
		IstioBuild: p.IstioVersion != "",
		Version:    p.IstioVersion,
		DNSCapture: p.DNSCapture,
	}
}

// LabelMap returns the key's labels as a map.
func (k Key) LabelMap() map[string]string {
	if k.Labels == "" {
		return nil
	}
	lines := strings.Split(k.Labels, "\n")
	m := make(map[string]string, len(lines))
	for _, l := range lines {
		name, value, _ := strings.Cut(l, "=")
		m[name] = value
	}
	return m
}

// IPList returns the key's instance IPs.
func (k Key) IPList() []string {
	if k.IPs == "" {
		return nil
	}
	return strings.Split(k.IPs, ",")
}

// IPFamilies reports which IP families the proxy's instance IPs have:
// IPv4 alone when it names none (Istio's default mode).
func (k Key) IPFamilies() (ipv4, ipv6 bool) {
	for _, ip := range k.IPList() {
		if strings.Contains(ip, ":") {
			ipv6 = true
		} else {
			ipv4 = true
		}
	}
	return ipv4 || !ipv6, ipv6
}
