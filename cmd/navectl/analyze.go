package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/navemesh/nave/cmd/navectl/analyze"
	"github.com/navemesh/nave/shared/meshconfig"
)

// localCluster names the cluster of analyze's positional inputs.
const localCluster = "local"

func newAnalyzeCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		clusters      []string
		meshName      string
		suffix        string
		failOnWarning bool
		output        string
		meshCfg       string
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
  - DestinationRules the hub ignores (a second one for a host in one namespace);
  - EnvoyFilter patches that fail on the config generated for a proxy they select;
  - with --meshconfig FILE, the mesh's Istio MeshConfig: refused fields and values
    (as the hub refuses them), and mesh-wide config left in istio-system when the
    MeshConfig names another root namespace; the checks above then see the mesh
    under that MeshConfig.
Positional inputs are one cluster, named "local". Exit status: 0 when nothing is
wrong or there are only warnings (1 with --fail-on-warning), 1 on errors, 2 on
usage errors.`,
		Example: `  navectl analyze manifests/
  kubectl get vs,dr,se -A -o yaml | navectl analyze -
  navectl analyze --cluster east=east/ --cluster west=west/ --fail-on-warning
  navectl analyze --meshconfig mesh.yaml manifests/`,
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
			an := analyze.New()
			if meshCfg != "" {
				if err := an.ReadMeshConfig(meshCfg); err != nil {
					return err
				}
			}
			var read []*analyze.Cluster
			for _, name := range order {
				ci := &analyze.Cluster{Name: name}
				for _, p := range inputs[name] {
					if err := an.ReadPath(ci, p, cmd.InOrStdin(), suffix); err != nil {
						return err
					}
				}
				read = append(read, ci)
			}
			an.CrossChecks(meshName, suffix, read)
			if output != "table" {
				if err := writeData(stdout, output, an); err != nil {
					return err
				}
			} else if err := writeAnalysis(stdout, an); err != nil {
				return err
			}
			errs, warns := an.Count(analyze.SevError), an.Count(analyze.SevWarning)
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
	cmd.Flags().StringVar(&meshCfg, "meshconfig", "", "FILE: the mesh's Istio MeshConfig (YAML); checked, and the analysis applies it")
	cmd.Flags().BoolVar(&failOnWarning, "fail-on-warning", false, "exit 1 on warnings too")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func writeAnalysis(out io.Writer, a *analyze.Analysis) error {
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
