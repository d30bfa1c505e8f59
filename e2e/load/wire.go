package load

import (
	"hash/maphash"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// The client reads no more of a resource than it must: a resource's name
// is field 1 of every xDS type the hub serves (Cluster.name,
// ClusterLoadAssignment.cluster_name, Listener.name,
// RouteConfiguration.name), read with protowire; a cluster's EDS name is
// read the same way; listeners (for their route names) and, for proxyless
// clients, route configurations (for their clusters) are unmarshalled,
// once per distinct content per run (deriver).

// field returns the bytes of the first occurrence of a length-delimited
// top-level field, or nil.
func field(b []byte, want protowire.Number) []byte {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == want && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil
			}
			return v
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil
		}
		b = b[m:]
	}
	return nil
}

// resourceName is field 1 of a serialized resource.
func resourceName(b []byte) []byte { return field(b, 1) }

// edsName reads a serialized Cluster: if its discovery type is EDS, it
// returns the name to subscribe to on EDS (eds_cluster_config.service_name,
// or the cluster's name).
func edsName(b []byte) (name []byte, eds bool) {
	var service []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType: // name
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, false
			}
			name, b = v, b[m:]
			continue
		case num == 2 && typ == protowire.VarintType: // type
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return nil, false
			}
			eds, b = v == uint64(clusterv3.Cluster_EDS), b[m:]
			continue
		case num == 3 && typ == protowire.BytesType: // eds_cluster_config
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, false
			}
			service, b = field(v, 2), b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, false
		}
		b = b[m:]
	}
	if len(service) > 0 {
		name = service
	}
	return name, eds
}

// deriver finds the names a resource makes the client subscribe to on
// another type, caching by content (a hash of the bytes): the proxies of
// a run mostly receive identical resources. Safe for concurrent use.
type deriver struct {
	names *names
	seed  maphash.Seed

	mu    sync.Mutex
	cache map[derivedKey][]int32
}

type derivedKey struct {
	typ  int
	hash uint64
}

func newDeriver(n *names) *deriver {
	return &deriver{names: n, seed: maphash.MakeSeed(), cache: map[derivedKey][]int32{}}
}

func (d *deriver) hash(b []byte) uint64 { return maphash.Bytes(d.seed, b) }

// derive returns the ids of the names resource b (of type typ) refers
// to: a cluster its EDS name, a listener its RDS route names, a route
// configuration its clusters. The slice is shared: read only.
func (d *deriver) derive(typ int, b []byte) []int32 {
	if typ == typeCDS {
		name, eds := edsName(b)
		if !eds || len(name) == 0 {
			return nil
		}
		return []int32{d.names.id(name)}
	}
	key := derivedKey{typ, d.hash(b)}
	d.mu.Lock()
	ids, ok := d.cache[key]
	d.mu.Unlock()
	if ok {
		return ids
	}
	var found []string
	switch typ {
	case typeLDS:
		found = listenerRoutes(b)
	case typeRDS:
		found = routeClusters(b)
	}
	ids = make([]int32, 0, len(found))
	seen := map[string]bool{}
	for _, n := range found {
		if !seen[n] {
			seen[n] = true
			ids = append(ids, d.names.idString(n))
		}
	}
	d.mu.Lock()
	d.cache[key] = ids
	d.mu.Unlock()
	return ids
}

// listenerRoutes returns the RDS route names of a serialized Listener: the
// rds.route_config_name of every HttpConnectionManager in its filter
// chains, default filter chain or api_listener.
func listenerRoutes(b []byte) []string {
	var l listenerv3.Listener
	if proto.Unmarshal(b, &l) != nil {
		return nil
	}
	var out []string
	hcm := func(a *anypb.Any) {
		var h hcmv3.HttpConnectionManager
		if a == nil || !a.MessageIs(&h) || a.UnmarshalTo(&h) != nil {
			return
		}
		if n := h.GetRds().GetRouteConfigName(); n != "" {
			out = append(out, n)
		}
	}
	chains := append([]*listenerv3.FilterChain{l.GetDefaultFilterChain()}, l.GetFilterChains()...)
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			hcm(f.GetTypedConfig())
		}
	}
	hcm(l.GetApiListener().GetApiListener())
	return out
}

// routeClusters returns the clusters a serialized RouteConfiguration routes
// to (what a proxyless client subscribes to on CDS).
func routeClusters(b []byte) []string {
	var rc routev3.RouteConfiguration
	if proto.Unmarshal(b, &rc) != nil {
		return nil
	}
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			a := r.GetRoute()
			if c := a.GetCluster(); c != "" {
				out = append(out, c)
			}
			for _, wc := range a.GetWeightedClusters().GetClusters() {
				out = append(out, wc.GetName())
			}
		}
	}
	return out
}
