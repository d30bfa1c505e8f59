package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/navemesh/nave/hub/tenants"
)

// newMeshCmd is `navectl mesh`: the meshes (tenants) of a running hub,
// through its operator API (/api/v1/meshes).
func newMeshCmd(stdout io.Writer) *cobra.Command {
	cmd := newGroup("mesh")
	cmd.Short = "create, list, get, update and delete the meshes (tenants) of a running hub"
	cmd.Long = `mesh manages the meshes (tenants) of a running hub through its admin server
(the operator listener, with a vendor's operator certificate, to change them).
A mesh is a document (docs/meshes.md):

  apiVersion: nave.io/v1alpha1
  kind: Mesh
  metadata:
    name: acme
  spec:
    trustDomain: acme.example
    limits: {proxies: 2000}
    meshConfig:            # Istio's MeshConfig (docs/meshconfig.md)
      rootNamespace: acme-system
    meshNetworks:          # Istio's MeshNetworks (docs/multi-network.md)
      networks:
        net-2: {gateways: [{address: 192.0.2.10, port: 15443}]}`
	cmd.AddCommand(newMeshCreateCmd(stdout), newMeshListCmd(stdout), newMeshGetCmd(stdout), newMeshUpdateCmd(stdout), newMeshDeleteCmd(stdout))
	return cmd
}

// readSpec reads the -f file ("-": stdin).
func readSpec(cmd *cobra.Command, file string) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return b, nil
}

func newMeshCreateCmd(stdout io.Writer) *cobra.Command {
	var (
		af                  adminFlags
		file, td, meshCfgFn string
	)
	cmd := &cobra.Command{
		Use:   "create (-f FILE | NAME --trust-domain TD [--meshconfig FILE])",
		Short: "create a mesh: its CA is made and it is enrollable at once, on every replica within seconds",
		Example: "  navectl mesh create -f acme.yaml --hub-admin https://hub:15015 --operator-dir ~/.nave/vendor\n" +
			"  navectl mesh create acme --trust-domain acme.example --meshconfig acme-meshconfig.yaml",
		Args: rangeArgs(0, 1, "at most a mesh name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var doc []byte
			switch {
			case file != "" && (len(args) > 0 || td != "" || meshCfgFn != ""):
				return usageErr("%s: give -f FILE, or NAME --trust-domain TD [--meshconfig FILE], not both", cmd.CommandPath())
			case file != "":
				b, err := readSpec(cmd, file)
				if err != nil {
					return err
				}
				doc = b
			case len(args) == 1 && td != "":
				var mc []byte
				if meshCfgFn != "" {
					b, err := os.ReadFile(meshCfgFn)
					if err != nil {
						return fmt.Errorf("%s: --meshconfig: %w", cmd.CommandPath(), err)
					}
					mc = b
				}
				b, err := tenants.EncodeSpec(args[0], td, tenants.Limits{}, mc)
				if err != nil {
					return err
				}
				doc = b
			default:
				return usageErr("%s: give -f FILE, or NAME --trust-domain TD", cmd.CommandPath())
			}
			h, err := af.client(cmd)
			if err != nil {
				return err
			}
			var v tenants.View
			if err := h.do(cmd.Context(), http.MethodPost, tenants.APIPath, nil, doc, &v); err != nil {
				return fmt.Errorf("mesh create: %w", err)
			}
			if af.output != "table" {
				return writeData(stdout, af.output, v)
			}
			fmt.Fprintf(stdout, "mesh %s created (trust domain %s, uid %s)\n", v.Name, v.TrustDomain, v.UID)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the mesh's spec document (- for stdin)")
	cmd.Flags().StringVar(&td, "trust-domain", "", "with NAME: the mesh's trust domain (no other mesh's)")
	cmd.Flags().StringVar(&meshCfgFn, "meshconfig", "", "with NAME: a file holding the mesh's Istio MeshConfig (YAML)")
	af.register(cmd)
	return cmd
}

func newMeshListCmd(stdout io.Writer) *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list the meshes the operator may see",
		Args:  rangeArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := af.client(cmd)
			if err != nil {
				return err
			}
			var vs []tenants.View
			if err := h.get(cmd.Context(), tenants.APIPath, nil, &vs); err != nil {
				return fmt.Errorf("mesh list: %w", err)
			}
			if af.output != "table" {
				return writeData(stdout, af.output, vs)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPHASE\tTRUST DOMAIN\tGENERATION\tSPOKES\tAGE")
			now := time.Now()
			for _, v := range vs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", v.Name, v.Phase, v.TrustDomain, v.Generation, v.ConnectedSpokes, age(now, v.Created))
			}
			return tw.Flush()
		},
	}
	af.register(cmd)
	return cmd
}

func newMeshGetCmd(stdout io.Writer) *cobra.Command {
	var (
		af   adminFlags
		spec bool
	)
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "one mesh: phase, trust domain, limits, MeshConfig, connected spokes",
		Args:  rangeArgs(1, 1, "a mesh name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := af.client(cmd)
			if err != nil {
				return err
			}
			var v tenants.View
			if err := h.get(cmd.Context(), tenants.APIPath+"/"+url.PathEscape(args[0]), nil, &v); err != nil {
				return fmt.Errorf("mesh get: %w", err)
			}
			switch {
			case spec:
				_, err := io.WriteString(stdout, v.Spec)
				return err
			case af.output != "table":
				return writeData(stdout, af.output, v)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			for _, kv := range [][2]string{
				{"Name", v.Name}, {"UID", v.UID}, {"Phase", string(v.Phase)}, {"Trust domain", v.TrustDomain},
				{"Generation", strconv.FormatInt(v.Generation, 10)}, {"Created", v.Created.Format(time.RFC3339)},
				{"Connected spokes", strconv.Itoa(v.ConnectedSpokes)},
				{"Limits", fmt.Sprintf("objects/kind %d, proxies %d, spokes %d, pushes/s %g",
					v.Limits.ObjectsPerKind, v.Limits.Proxies, v.Limits.Spokes, v.Limits.PushesPerSecond)},
				{"MeshConfig", compactJSON(v.MeshConfig)},
			} {
				fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
			}
			for _, k := range slices.Sorted(maps.Keys(v.Usage)) {
				fmt.Fprintf(tw, "Usage %s:\t%g\n", k, v.Usage[k])
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&spec, "spec", false, "print the mesh's spec document (to edit and give to mesh update -f)")
	af.register(cmd)
	return cmd
}

func newMeshUpdateCmd(stdout io.Writer) *cobra.Command {
	var (
		af   adminFlags
		file string
	)
	cmd := &cobra.Command{
		Use:     "update -f FILE",
		Short:   "replace a mesh's spec (limits, MeshConfig); its trust domain cannot change",
		Example: "  navectl mesh get acme --spec > acme.yaml; $EDITOR acme.yaml; navectl mesh update -f acme.yaml",
		Args:    rangeArgs(0, 0, "no arguments (the name is the spec's)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErr("%s: -f FILE is required", cmd.CommandPath())
			}
			doc, err := readSpec(cmd, file)
			if err != nil {
				return err
			}
			s, err := tenants.DecodeSpec(doc)
			if err != nil {
				return fmt.Errorf("mesh update: %s: %w", file, err)
			}
			h, err := af.client(cmd)
			if err != nil {
				return err
			}
			var v tenants.View
			if err := h.do(cmd.Context(), http.MethodPut, tenants.APIPath+"/"+s.Name, nil, doc, &v); err != nil {
				return fmt.Errorf("mesh update: %w", err)
			}
			if af.output != "table" {
				return writeData(stdout, af.output, v)
			}
			fmt.Fprintf(stdout, "mesh %s updated (generation %d)\n", v.Name, v.Generation)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the mesh's new spec document (- for stdin)")
	af.register(cmd)
	return cmd
}

func newMeshDeleteCmd(stdout io.Writer) *cobra.Command {
	var (
		af            adminFlags
		keepCA, force bool
	)
	cmd := &cobra.Command{
		Use:   "delete NAME [--keep-ca] [--force]",
		Short: "delete a mesh: its spokes and proxies are disconnected, its tokens and certificates refused, its state purged",
		Long: `delete deletes a mesh: every replica stops serving it within seconds (its spokes and
proxies are disconnected, its tokens and certificates refused), then its enrollment
state and, unless --keep-ca, its CA are destroyed. A mesh created again with its name
inherits nothing of it (its CA only if kept). A mesh with connected spokes is deleted
only with --force.`,
		Args: rangeArgs(1, 1, "a mesh name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := af.client(cmd)
			if err != nil {
				return err
			}
			q := url.Values{}
			if keepCA {
				q.Set("keepCA", "true")
			}
			if force {
				q.Set("force", "true")
			}
			var v tenants.View
			err = h.do(cmd.Context(), http.MethodDelete, tenants.APIPath+"/"+url.PathEscape(args[0]), q, nil, &v)
			var ae *apiError
			if errors.As(err, &ae) && ae.status == http.StatusConflict {
				var body tenants.APIError
				if jerr := json.Unmarshal(ae.body, &body); jerr == nil && body.ConnectedSpokes > 0 {
					return fmt.Errorf("mesh delete: mesh %s has %d connected spoke(s): deleting it disconnects them; run again with --force to delete it anyway",
						args[0], body.ConnectedSpokes)
				}
			}
			if err != nil {
				return fmt.Errorf("mesh delete: %w", err)
			}
			if af.output != "table" {
				return writeData(stdout, af.output, v)
			}
			ca := "its CA is destroyed"
			if v.KeepCA {
				ca = "its CA is kept"
			}
			fmt.Fprintf(stdout, "mesh %s is being deleted (%s); it is gone once purged\n", v.Name, ca)
			return nil
		},
	}
	cmd.Flags().BoolVar(&keepCA, "keep-ca", false, "keep the mesh's CA in the store (a mesh created again with this name gets it back)")
	cmd.Flags().BoolVar(&force, "force", false, "delete the mesh even with spokes connected")
	af.register(cmd)
	return cmd
}

// compactJSON is raw on one line.
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
