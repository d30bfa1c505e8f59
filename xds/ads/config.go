package ads

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/mesh"
)

// ProxyConfig is what the server would send one connected proxy now: every
// resource its key gets from its mesh's current push context, by type, as
// protojson. Secrets are the workload certificate last minted for the
// stream and its mesh's roots, never a private key. A plain value.
type ProxyConfig struct {
	ID        string `json:"id"`
	NodeID    string `json:"nodeId"`
	Mesh      string `json:"mesh"`
	ProxyType string `json:"proxyType"`
	// Version is the push context's version (0: the mesh has none yet).
	Version uint64 `json:"version"`
	// Resources maps a short type name (Cluster, Listener,
	// RouteConfiguration, ClusterLoadAssignment, Secret) to its resources
	// sorted by name.
	Resources map[string][]json.RawMessage `json:"resources"`
	Problems  []mesh.Problem               `json:"problems,omitempty"`
}

// ErrNoProxy is returned by ProxyConfig for a name no connected proxy has.
var ErrNoProxy = errors.New("no connected proxy")

// ProxyConfig returns what the proxy named by name would be sent: name is a
// connection's ID, a node ID, or a part of one node ID that no other
// connected proxy's node ID contains. visible, if not nil, says which
// meshes' proxies the caller may see: the others are not considered at
// all. types, if any, are the short type names to include. Safe for
// concurrent use with the streams.
func (s *Server) ProxyConfig(name string, visible func(mesh string) bool, types ...string) (*ProxyConfig, error) {
	c, err := s.find(name, visible)
	if err != nil {
		return nil, err
	}
	want := func(t string) bool { return len(types) == 0 || slices.Contains(types, typeurl.Short(t)) }
	out := &ProxyConfig{ID: c.id, NodeID: c.nodeID, Mesh: c.mesh, ProxyType: string(c.proxy.Type), Resources: map[string][]json.RawMessage{}}
	if st, _ := s.src.Current(c.mesh); st != nil {
		out.Version = st.Version()
		res := c.resources(st)
		out.Problems = res.Problems
		for t, byName := range res.Resources {
			if !want(t) {
				continue
			}
			names := make([]string, 0, len(byName))
			for n := range byName {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				js, err := anyJSON(byName[n].Any)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", typeurl.Short(t), n, err)
				}
				out.Resources[typeurl.Short(t)] = append(out.Resources[typeurl.Short(t)], js)
			}
		}
	}
	if want(typeurl.Secret) {
		if cred := c.publicCred.Load(); cred != nil {
			secrets := secretResources(cred)
			for _, n := range slices.Sorted(maps.Keys(secrets)) {
				js, err := anyJSON(secrets[n])
				if err != nil {
					return nil, fmt.Errorf("secret %s: %w", n, err)
				}
				out.Resources[typeurl.Short(typeurl.Secret)] = append(out.Resources[typeurl.Short(typeurl.Secret)], js)
			}
		}
	}
	return out, nil
}

// find returns the connection name names (see ProxyConfig).
func (s *Server) find(name string, visible func(mesh string) bool) (*conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var conns []*conn
	for _, c := range s.conns {
		if visible == nil || visible(c.mesh) {
			conns = append(conns, c)
		}
	}
	i, err := FindProxy(name, len(conns), func(i int) (string, string, bool) { return conns[i].id, conns[i].nodeID, conns[i].nds })
	if err != nil {
		return nil, err
	}
	return conns[i], nil
}

// FindProxy picks the proxy name names among n proxies, the i-th of which
// has connection ID and node ID ids(i), and is a pod agent's name-table
// stream if nameTable: the one with that connection ID, else the one with
// that node ID, else the one whose node ID contains name — a proxy's own
// stream before its agent's name-table stream of the same node. None is
// ErrNoProxy; several are an error listing their connection IDs.
func FindProxy(name string, n int, ids func(i int) (id, nodeID string, nameTable bool)) (int, error) {
	var byNode, byPart []int
	for i := range n {
		id, node, _ := ids(i)
		switch {
		case id == name:
			return i, nil
		case node == name:
			byNode = append(byNode, i)
		case name != "" && strings.Contains(node, name):
			byPart = append(byPart, i)
		}
	}
	matches := byNode
	if len(matches) == 0 {
		matches = byPart
	}
	if proxies := slices.DeleteFunc(slices.Clone(matches), func(i int) bool { _, _, nt := ids(i); return nt }); len(proxies) > 0 {
		matches = proxies
	}
	switch len(matches) {
	case 0:
		return -1, fmt.Errorf("%w named %q", ErrNoProxy, name)
	case 1:
		return matches[0], nil
	}
	names := make([]string, len(matches))
	for k, i := range matches {
		names[k], _, _ = ids(i)
	}
	sort.Strings(names)
	return -1, fmt.Errorf("%q names %d connected proxies (%s): give a connection ID", name, len(names), strings.Join(names, ", "))
}

// anyJSON renders a resource as protojson; its type must be linked in
// (the generators' types are).
func anyJSON(a *anypb.Any) (json.RawMessage, error) {
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil, err
	}
	return protojson.Marshal(m)
}
