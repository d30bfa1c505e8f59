// Package analyze checks mesh config offline, as navectl analyze does:
// the validator the spoke and the hub use (shared/meshconfig), routes to
// undefined subsets, DestinationRules for unknown hosts, and the hub's merge
// of several clusters (xds/mesh: conflicts, ignored rules), and
// EnvoyFilter patches that fail on generated config (xds/gen). It writes
// no second validator. An Analysis is not safe for concurrent use.
package analyze

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// Finding severities.
const (
	SevError   = "error"
	SevWarning = "warning"
)

// Finding is one problem analyze reports: where (file and document), what
// object, which field, and why.
type Finding struct {
	Severity string `json:"severity"`
	// Check names the check: validation, subset, protocol, host,
	// conflict, merge, rootNamespace, envoyfilter.
	Check   string `json:"check"`
	Cluster string `json:"cluster,omitempty"`
	// Where is "file#document"; Object "Kind namespace/name".
	Where   string `json:"where,omitempty"`
	Object  string `json:"object,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Analysis is analyze's result.
type Analysis struct {
	Files    int       `json:"files"`
	Objects  int       `json:"objects"`
	Skipped  int       `json:"skipped"` // documents of other APIs
	Findings []Finding `json:"findings"`
	// MeshConfig is the mesh's MeshConfig the cross checks build with (nil:
	// Istio's defaults); ReadMeshConfig sets it.
	MeshConfig *meshv1alpha1.MeshConfig `json:"-"`
}

// ReadMeshConfig reads the mesh's MeshConfig from path (Istio's YAML, as
// navectl mesh create takes it) for the cross checks. A MeshConfig that
// does not parse or validate is an error finding (check "meshconfig",
// naming the field), and the checks then use Istio's defaults; a file
// that cannot be read is an error.
func (a *Analysis) ReadMeshConfig(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read meshconfig: %w", err)
	}
	cfg, err := meshconfig.ParseMeshConfig(data)
	if err == nil {
		err = meshconfig.ValidateMeshConfig(cfg)
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			field, msg, _ := strings.Cut(line, ": ")
			a.Findings = append(a.Findings, Finding{Severity: SevError, Check: "meshconfig", Where: path, Object: "MeshConfig", Field: field, Message: msg})
		}
		return nil
	}
	a.MeshConfig = cfg
	return nil
}

// New returns an empty Analysis.
func New() *Analysis { return &Analysis{Findings: []Finding{}} }

// Count counts the findings of severity sev.
func (a *Analysis) Count(sev string) int {
	n := 0
	for _, f := range a.Findings {
		if f.Severity == sev {
			n++
		}
	}
	return n
}

// Cluster is the config analyze read for one cluster.
type Cluster struct {
	Name    string
	objects []*meshconfig.Object
	// services are the hostnames of the Kubernetes Services among the
	// inputs.
	services []string
}

// ReadPath reads a file, a directory (its .yaml, .yml and .json files,
// recursively, in name order) or "-" into ci.
func (a *Analysis) ReadPath(ci *Cluster, path string, stdin io.Reader, suffix string) error {
	if path == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("standard input: %w", err)
		}
		a.ReadDocuments(ci, b, "<stdin>", suffix)
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		a.ReadDocuments(ci, b, path, suffix)
		return nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && slices.Contains([]string{".yaml", ".yml", ".json"}, strings.ToLower(filepath.Ext(p))) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		a.ReadDocuments(ci, b, f, suffix)
	}
	return nil
}

// ReadDocuments decodes and validates one file's documents with the
// spoke's and hub's validator (meshconfig.DecodeYAML).
func (a *Analysis) ReadDocuments(ci *Cluster, data []byte, origin, suffix string) {
	a.Files++
	objs, errs := meshconfig.DecodeYAML(data, origin)
	a.Objects += len(objs)
	ci.objects = append(ci.objects, objs...)
	for _, e := range errs {
		if e.Foreign {
			a.Skipped++
			if e.Kind == "Service" && e.Name != "" {
				ns := e.Namespace
				if ns == "" {
					ns = meshconfig.DefaultNamespace
				}
				ci.services = append(ci.services, e.Name+"."+ns+".svc."+suffix)
			}
			continue
		}
		a.Findings = append(a.Findings, Finding{
			Severity: SevError, Check: "validation", Cluster: ci.Name,
			Where: fmt.Sprintf("%s#%d", e.Origin, e.Index), Object: objectName(e.Kind, e.Namespace, e.Name),
			Field: e.Field, Message: e.Reason,
		})
	}
}

func objectName(kind, namespace, name string) string {
	switch {
	case kind == "" && name == "":
		return ""
	case namespace == "":
		return strings.TrimSpace(kind + " " + name)
	}
	return kind + " " + meshconfig.Key(namespace, name)
}

// CrossChecks runs the checks that look at several objects: subsets,
// DestinationRule hosts, the hub's merge of the clusters (conflicts and
// ignored rules).
func (a *Analysis) CrossChecks(meshName, suffix string, clusters []*Cluster) {
	var (
		all   []*meshconfig.Object
		input []mesh.ClusterInput
		where = map[*meshconfig.Object]string{}
	)
	for _, c := range clusters {
		all = append(all, c.objects...)
		input = append(input, mesh.ClusterInput{Name: c.Name, Connected: true, Synced: true, DomainSuffix: suffix, Objects: c.objects})
		for _, o := range c.objects {
			where[o] = c.Name
		}
	}
	snap := (&mesh.Builder{MeshConfig: a.MeshConfig}).Build(meshName, input)
	a.rootNamespaceChecks(snap, all, where)

	// Routes to subsets: against every DestinationRule of the mesh, as
	// the hub merges them (meshconfig.Warnings, the admission webhook's
	// check, with every cluster's rules).
	drs := meshconfig.IndexDestinationRules(all, suffix)
	for _, o := range all {
		// Other kinds' warnings are ports without a protocol (sniffed).
		sev, check := SevError, "subset"
		if o.Kind.Kind != "VirtualService" {
			sev, check = SevWarning, "protocol"
		}
		for _, w := range meshconfig.Warnings(o, drs) {
			a.Findings = append(a.Findings, Finding{Severity: sev, Check: check, Cluster: where[o], Where: o.Origin,
				Object: o.Ref().String(), Field: w.Field, Message: strings.ReplaceAll(w.Reason, "in this cluster", "among the inputs")})
		}
	}

	// DestinationRules for hosts nothing defines.
	known := map[string]bool{}
	for h := range snap.Services {
		known[h] = true
	}
	for _, c := range clusters {
		for _, h := range c.services {
			known[h] = true
		}
	}
	for _, o := range all {
		dr, ok := o.Spec.(*networkingv1alpha3.DestinationRule)
		if !ok || strings.Contains(dr.GetHost(), "*") {
			continue
		}
		host := meshconfig.ResolveHost(dr.GetHost(), o.Namespace, suffix)
		if !known[host] {
			a.Findings = append(a.Findings, Finding{Severity: SevWarning, Check: "host", Cluster: where[o], Where: o.Origin,
				Object: o.Ref().String(), Field: "spec.host",
				Message: fmt.Sprintf("no Service or ServiceEntry among the inputs defines host %s (it may be a Service of a cluster)", host)})
		}
	}

	// The hub's merge: conflicts across clusters, and rules it ignores.
	origins := func(cluster, kind, key string) string {
		for _, c := range clusters {
			if c.Name != cluster {
				continue
			}
			for _, o := range c.objects {
				if o.Kind.Kind == kind && o.Key() == key {
					return o.Origin
				}
			}
		}
		return ""
	}
	for _, c := range snap.Conflicts {
		a.Findings = append(a.Findings, Finding{Severity: SevError, Check: "conflict", Cluster: c.LoserCluster,
			Where: origins(c.LoserCluster, c.Kind, c.Key), Object: c.Kind + " " + c.Key,
			Message: fmt.Sprintf("also defined in cluster %s (%s), differently: the hub uses %s's and ignores this one (%s)",
				c.WinnerCluster, origins(c.WinnerCluster, c.Kind, c.Key), c.WinnerCluster, c.Reason)})
	}
	byRef := map[string]*meshconfig.Object{} // as mesh.Config.Ref names them
	for _, c := range clusters {
		for _, o := range c.objects {
			byRef[c.Name+":"+o.Ref().String()] = o
		}
	}
	places := map[string]*findingPlace{}
	for ref, o := range byRef {
		places[ref] = &findingPlace{cluster: where[o], where: o.Origin, object: o.Ref().String()}
	}
	for _, p := range snap.Problems {
		f := Finding{Severity: SevError, Check: "merge", Object: p.Resource, Field: p.Field, Message: p.Reason}
		if pl := places[p.Resource]; pl != nil {
			f.Cluster, f.Where, f.Object = pl.cluster, pl.where, pl.object
		}
		a.Findings = append(a.Findings, f)
	}
	a.envoyFilterChecks(snap, places)
	sort.SliceStable(a.Findings, func(i, j int) bool {
		x, y := a.Findings[i], a.Findings[j]
		if x.Severity != y.Severity {
			return x.Severity == SevError
		}
		return x.Where < y.Where
	})
}

// rootNamespaceChecks warns of mesh-wide config left in istio-system when
// the MeshConfig names another root namespace: there it applies to
// istio-system only.
func (a *Analysis) rootNamespaceChecks(snap *mesh.Snapshot, all []*meshconfig.Object, where map[*meshconfig.Object]string) {
	root := snap.RootNamespace()
	if root == mesh.DefaultRootNamespace {
		return
	}
	for _, o := range all {
		if o.Namespace != mesh.DefaultRootNamespace {
			continue
		}
		var meshWide bool
		switch spec := o.Spec.(type) {
		case *networkingv1alpha3.Sidecar:
			meshWide = len(spec.GetWorkloadSelector().GetLabels()) == 0
		case *securityv1beta1.PeerAuthentication:
			meshWide = len(spec.GetSelector().GetMatchLabels()) == 0
		case *securityv1beta1.AuthorizationPolicy, *securityv1beta1.RequestAuthentication, *networkingv1alpha3.DestinationRule:
			meshWide = true
		}
		if meshWide {
			a.Findings = append(a.Findings, Finding{Severity: SevWarning, Check: "rootNamespace", Cluster: where[o], Where: o.Origin,
				Object: o.Ref().String(), Field: "metadata.namespace",
				Message: fmt.Sprintf("the MeshConfig's root namespace is %s: in %s this object is not mesh-wide, it applies to its own namespace only", root, mesh.DefaultRootNamespace)})
		}
	}
}
