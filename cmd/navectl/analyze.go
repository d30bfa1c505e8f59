package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// Finding severities.
const (
	sevError   = "error"
	sevWarning = "warning"
)

// finding is one problem analyze reports: where (file and document), what
// object, which field, and why.
type finding struct {
	Severity string `json:"severity"`
	// Check names the check: validation, subset, host, conflict, merge.
	Check   string `json:"check"`
	Cluster string `json:"cluster,omitempty"`
	// Where is "file#document"; Object "Kind namespace/name".
	Where   string `json:"where,omitempty"`
	Object  string `json:"object,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// analysis is analyze's result.
type analysis struct {
	Files    int       `json:"files"`
	Objects  int       `json:"objects"`
	Skipped  int       `json:"skipped"` // documents of other APIs
	Findings []finding `json:"findings"`
}

func (a *analysis) count(sev string) int {
	n := 0
	for _, f := range a.Findings {
		if f.Severity == sev {
			n++
		}
	}
	return n
}

// localCluster names the cluster of analyze's positional inputs.
const localCluster = "local"

// clusterInput is the config analyze read for one cluster.
type clusterInput struct {
	name    string
	objects []*meshconfig.Object
	// services are the hostnames of the Kubernetes Services among the
	// inputs.
	services []string
}

func newAnalyzeCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		clusters      []string
		meshName      string
		suffix        string
		failOnWarning bool
		output        string
	)
	cmd := &cobra.Command{
		Use:   "analyze [FILE|DIR|-]... [--cluster NAME=FILE|DIR]...",
		Short: "validate mesh config offline as the spoke and hub do, plus checks across objects and clusters",
		Long: `analyze reads mesh config (YAML files, directories of them read recursively, or
- for standard input) and reports:
  - every document the spoke would reject, by the validator the spoke and the hub
    use (documents of other APIs, such as Deployments, are skipped);
  - routes to a subset no DestinationRule defines for the destination's host;
  - DestinationRules for a host that no Service or ServiceEntry among the inputs
    defines (a warning: the host may be a Service of a cluster);
  - objects defined differently in several clusters, decided by the hub's rule
    (oldest creation time wins, then the cluster name), with --cluster NAME=PATH
    given once per cluster (repeat it for several paths of one cluster);
  - DestinationRules the hub ignores (a second one for a host in one namespace).
Positional inputs are one cluster, named "local". Exit status: 0 when nothing is
wrong or there are only warnings (1 with --fail-on-warning), 1 on errors, 2 on
usage errors.`,
		Example: `  navectl analyze manifests/
  kubectl get vs,dr,se -A -o yaml | navectl analyze -
  navectl analyze --cluster east=east/ --cluster west=west/ --fail-on-warning`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(cmd, output); err != nil {
				return err
			}
			inputs := map[string][]string{}
			var order []string
			add := func(cluster, path string) {
				if _, ok := inputs[cluster]; !ok {
					order = append(order, cluster)
				}
				inputs[cluster] = append(inputs[cluster], path)
			}
			for _, a := range args {
				add(localCluster, a)
			}
			for _, c := range clusters {
				name, path, ok := strings.Cut(c, "=")
				if !ok || name == "" || path == "" {
					return usageErr("%s: --cluster %q: want NAME=FILE or NAME=DIR", cmd.CommandPath(), c)
				}
				add(name, path)
			}
			if len(order) == 0 {
				return usageErr("%s: want files, directories, - (standard input) or --cluster NAME=PATH", cmd.CommandPath())
			}
			if err := meshconfig.CheckDomainSuffix(suffix); err != nil {
				return usageErr("%s: --domain-suffix %q: %v", cmd.CommandPath(), suffix, err)
			}
			an := &analysis{Findings: []finding{}}
			var read []clusterInput
			for _, name := range order {
				ci := clusterInput{name: name}
				for _, p := range inputs[name] {
					if err := an.readPath(&ci, p, cmd.InOrStdin(), suffix); err != nil {
						return err
					}
				}
				read = append(read, ci)
			}
			an.crossChecks(meshName, suffix, read)
			if output != "table" {
				if err := writeData(stdout, output, an); err != nil {
					return err
				}
			} else if err := writeAnalysis(stdout, an); err != nil {
				return err
			}
			errs, warns := an.count(sevError), an.count(sevWarning)
			fmt.Fprintf(stderr, "analyzed %d objects in %d files (%d other documents skipped): %d errors, %d warnings\n",
				an.Objects, an.Files, an.Skipped, errs, warns)
			if errs > 0 || (failOnWarning && warns > 0) {
				return errFindings
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&clusters, "cluster", nil, "NAME=FILE|DIR: config of cluster NAME (repeat for more paths and more clusters)")
	cmd.Flags().StringVar(&meshName, "mesh", "default", "the mesh the clusters form (named in messages)")
	cmd.Flags().StringVar(&suffix, "domain-suffix", meshconfig.DefaultDomainSuffix, "the clusters' DNS suffix: short host names are completed with it")
	cmd.Flags().BoolVar(&failOnWarning, "fail-on-warning", false, "exit 1 on warnings too")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// readPath reads a file, a directory (its .yaml, .yml and .json files,
// recursively, in name order) or "-" into ci.
func (a *analysis) readPath(ci *clusterInput, path string, stdin io.Reader, suffix string) error {
	if path == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("standard input: %w", err)
		}
		a.readDocuments(ci, b, "<stdin>", suffix)
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
		a.readDocuments(ci, b, path, suffix)
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
		a.readDocuments(ci, b, f, suffix)
	}
	return nil
}

// readDocuments decodes and validates one file's documents with the
// spoke's and hub's validator (meshconfig.DecodeYAML).
func (a *analysis) readDocuments(ci *clusterInput, data []byte, origin, suffix string) {
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
		a.Findings = append(a.Findings, finding{
			Severity: sevError, Check: "validation", Cluster: ci.name,
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

// crossChecks runs the checks that look at several objects: subsets,
// DestinationRule hosts, the hub's merge of the clusters (conflicts and
// ignored rules).
func (a *analysis) crossChecks(meshName, suffix string, clusters []clusterInput) {
	var (
		all   []*meshconfig.Object
		input []mesh.ClusterInput
		where = map[*meshconfig.Object]string{}
	)
	for _, c := range clusters {
		all = append(all, c.objects...)
		input = append(input, mesh.ClusterInput{Name: c.name, Connected: true, Synced: true, DomainSuffix: suffix, Objects: c.objects})
		for _, o := range c.objects {
			where[o] = c.name
		}
	}
	snap := mesh.Build(meshName, input)

	// Routes to subsets: against every DestinationRule of the mesh, as
	// the hub merges them (meshconfig.Warnings, the admission webhook's
	// check, with every cluster's rules).
	drs := meshconfig.IndexDestinationRules(all, suffix)
	for _, o := range all {
		for _, w := range meshconfig.Warnings(o, drs) {
			a.Findings = append(a.Findings, finding{Severity: sevError, Check: "subset", Cluster: where[o], Where: o.Origin,
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
			a.Findings = append(a.Findings, finding{Severity: sevWarning, Check: "host", Cluster: where[o], Where: o.Origin,
				Object: o.Ref().String(), Field: "spec.host",
				Message: fmt.Sprintf("no Service or ServiceEntry among the inputs defines host %s (it may be a Service of a cluster)", host)})
		}
	}

	// The hub's merge: conflicts across clusters, and rules it ignores.
	origins := func(cluster, kind, key string) string {
		for _, c := range clusters {
			if c.name != cluster {
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
		a.Findings = append(a.Findings, finding{Severity: sevError, Check: "conflict", Cluster: c.LoserCluster,
			Where: origins(c.LoserCluster, c.Kind, c.Key), Object: c.Kind + " " + c.Key,
			Message: fmt.Sprintf("also defined in cluster %s (%s), differently: the hub uses %s's and ignores this one (%s)",
				c.WinnerCluster, origins(c.WinnerCluster, c.Kind, c.Key), c.WinnerCluster, c.Reason)})
	}
	byRef := map[string]*meshconfig.Object{} // as mesh.Config.Ref names them
	for _, c := range clusters {
		for _, o := range c.objects {
			byRef[c.name+":"+o.Ref().String()] = o
		}
	}
	for _, p := range snap.Problems {
		f := finding{Severity: sevError, Check: "merge", Object: p.Resource, Field: p.Field, Message: p.Reason}
		if o := byRef[p.Resource]; o != nil {
			f.Cluster, f.Where, f.Object = where[o], o.Origin, o.Ref().String()
		}
		a.Findings = append(a.Findings, f)
	}
	sort.SliceStable(a.Findings, func(i, j int) bool {
		x, y := a.Findings[i], a.Findings[j]
		if x.Severity != y.Severity {
			return x.Severity == sevError
		}
		return x.Where < y.Where
	})
}

func writeAnalysis(out io.Writer, a *analysis) error {
	if len(a.Findings) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SEVERITY\tCHECK\tCLUSTER\tWHERE\tOBJECT\tFIELD\tMESSAGE")
	for _, f := range a.Findings {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Severity, f.Check, dash(f.Cluster), dash(f.Where), dash(f.Object), dash(f.Field), f.Message)
	}
	return w.Flush()
}
