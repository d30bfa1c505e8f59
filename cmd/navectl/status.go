package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// meshView is one element of the hub's /debug/meshes.
type meshView struct {
	Mesh string `json:"mesh"`
	// Phase is the mesh's in the hub's registry: Active, or Deleting.
	Phase     string              `json:"phase"`
	Version   uint64              `json:"version"`
	BuiltAt   time.Time           `json:"builtAt"`
	Clusters  []mesh.ClusterState `json:"clusters"`
	Services  int                 `json:"services"`
	Conflicts []mesh.Conflict     `json:"conflicts"`
	Problems  []mesh.Problem      `json:"problems"`
}

// statusReport is what navectl status prints.
type statusReport struct {
	Meshes []meshStatus `json:"meshes"`
	// Replicas is the hub's /debug/replicas as it answers, when it has one.
	Replicas any `json:"replicas,omitempty"`
}

type meshStatus struct {
	Mesh string `json:"mesh"`
	// Phase is set while the mesh is not Active (being deleted).
	Phase string `json:"phase,omitempty"`
	// Version is the push context's version; 0 while the mesh has none.
	Version   uint64          `json:"version"`
	Services  int             `json:"services"`
	Clusters  []clusterStatus `json:"clusters"`
	Conflicts []mesh.Conflict `json:"conflicts,omitempty"`
	Problems  []mesh.Problem  `json:"problems,omitempty"`
}

// Cluster states as navectl status names them.
const (
	stateConnected = "connected"
	stateSyncing   = "syncing" // connected, initial state not complete
	stateStale     = "stale"
	stateWithdrawn = "withdrawn"
	stateMissing   = "missing"
)

type clusterStatus struct {
	Cluster string `json:"cluster"`
	// State is connected, syncing, stale, withdrawn or missing.
	State string `json:"state"`
	// LastSync is when the spoke last sent anything.
	LastSync   *time.Time             `json:"lastSync,omitempty"`
	Resources  int                    `json:"resources"`
	Rejected   []meshconfig.Rejection `json:"rejected,omitempty"`
	WithdrawAt *time.Time             `json:"withdrawAt,omitempty"`
	Reason     string                 `json:"reason,omitempty"`
	Peer       string                 `json:"peer,omitempty"`
}

func newStatusCmd(stdout io.Writer) *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "meshes, their clusters (connected, stale, withdrawn, missing), rejected config and hub replicas",
		Long: `status reads the hub's admin server and prints every mesh, the clusters of each
(connected, syncing, stale, withdrawn or missing; last sync; resources and rejected
resources), cross-cluster conflicts and config problems, and the hub replicas when
the hub reports them.`,
		Example: "  navectl status --hub-admin http://127.0.0.1:15014\n  navectl status -o yaml",
		Args:    rangeArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := af.client(cmd)
			if err != nil {
				return err
			}
			var (
				meshes []meshView
				spokes []ingest.ClusterStatus
			)
			if err := h.get(cmd.Context(), "/debug/meshes", nil, &meshes); err != nil {
				return err
			}
			if err := h.get(cmd.Context(), "/debug/spokes", nil, &spokes); err != nil {
				return err
			}
			rep := buildStatus(meshes, spokes)
			var replicas any
			switch err := h.get(cmd.Context(), "/debug/replicas", nil, &replicas); {
			case errors.Is(err, errNotServed), errors.Is(err, errForbidden):
			case err != nil:
				return err
			default:
				rep.Replicas = replicas
			}
			if af.output != "table" {
				return writeData(stdout, af.output, rep)
			}
			return writeStatus(stdout, rep, time.Now())
		},
	}
	af.register(cmd)
	return cmd
}

// buildStatus joins the hub's meshes and clusters.
func buildStatus(meshes []meshView, spokes []ingest.ClusterStatus) statusReport {
	byMesh := map[string]*meshStatus{}
	rep := statusReport{}
	get := func(name string) *meshStatus {
		if m := byMesh[name]; m != nil {
			return m
		}
		byMesh[name] = &meshStatus{Mesh: name, Clusters: []clusterStatus{}}
		return byMesh[name]
	}
	for _, m := range meshes {
		ms := get(m.Mesh)
		ms.Version, ms.Services, ms.Conflicts, ms.Problems = m.Version, m.Services, m.Conflicts, m.Problems
		if m.Phase != "" && m.Phase != "Active" {
			ms.Phase = m.Phase
		}
	}
	for _, s := range spokes {
		ms := get(s.Mesh)
		cs := clusterStatus{Cluster: s.Cluster, Rejected: s.Rejected, Peer: s.Peer}
		for _, n := range s.Resources {
			cs.Resources += n
		}
		if !s.LastMessageAt.IsZero() {
			t := s.LastMessageAt
			cs.LastSync = &t
		}
		switch {
		case s.Withdrawn != nil:
			cs.State, cs.Reason = stateWithdrawn, s.Withdrawn.Reason
			t := s.Withdrawn.At
			cs.WithdrawAt = &t
		case s.Missing != nil:
			cs.State = stateMissing
		case s.Connected && s.Synced:
			cs.State = stateConnected
		case s.Connected:
			cs.State = stateSyncing
		default:
			cs.State, cs.WithdrawAt = stateStale, s.WithdrawAt
		}
		ms.Clusters = append(ms.Clusters, cs)
	}
	for _, m := range byMesh {
		sort.Slice(m.Clusters, func(i, j int) bool { return m.Clusters[i].Cluster < m.Clusters[j].Cluster })
		rep.Meshes = append(rep.Meshes, *m)
	}
	sort.Slice(rep.Meshes, func(i, j int) bool { return rep.Meshes[i].Mesh < rep.Meshes[j].Mesh })
	return rep
}

// writeStatus prints the report as tables; ages are relative to now.
func writeStatus(out io.Writer, rep statusReport, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MESH\tVERSION\tCLUSTERS\tSERVICES\tCONFLICTS\tPROBLEMS")
	for _, m := range rep.Meshes {
		name := m.Mesh
		if m.Phase != "" {
			name += " (" + m.Phase + ")"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\n", name, m.Version, len(m.Clusters), m.Services, len(m.Conflicts), len(m.Problems))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintln(w, "MESH\tCLUSTER\tSTATE\tLAST SYNC\tRESOURCES\tREJECTED\tNOTE")
	for _, m := range rep.Meshes {
		for _, c := range m.Clusters {
			last := "-"
			if c.LastSync != nil {
				last = age(now, *c.LastSync)
			}
			note := "-"
			switch c.State {
			case stateStale:
				if c.WithdrawAt != nil {
					note = "withdrawn in " + age(*c.WithdrawAt, now)
				}
			case stateWithdrawn:
				if c.WithdrawAt != nil {
					note = "withdrawn " + age(now, *c.WithdrawAt) + " ago: " + c.Reason
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", m.Mesh, c.Cluster, c.State, last, c.Resources, len(c.Rejected), note)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	var details []string
	for _, m := range rep.Meshes {
		for _, c := range m.Clusters {
			for _, r := range c.Rejected {
				details = append(details, fmt.Sprintf("rejected  %s/%s: %s", m.Mesh, c.Cluster, rejectionText(r)))
			}
		}
		for _, c := range m.Conflicts {
			details = append(details, fmt.Sprintf("conflict  %s: %s %s: %s's definition wins over %s's: %s", m.Mesh, c.Kind, c.Key, c.WinnerCluster, c.LoserCluster, c.Reason))
		}
		for _, p := range m.Problems {
			details = append(details, fmt.Sprintf("problem   %s: %s: %s: %s", m.Mesh, p.Resource, p.Field, p.Reason))
		}
	}
	if len(details) > 0 {
		fmt.Fprintln(out)
		for _, d := range details {
			fmt.Fprintln(out, d)
		}
	}
	if rep.Replicas != nil {
		fmt.Fprintln(out)
		return writeGeneric(out, "REPLICAS", rep.Replicas)
	}
	return nil
}

// writeGeneric prints a JSON value the hub reports in a form navectl does
// not know (a list of objects becomes a table of their scalar fields).
func writeGeneric(out io.Writer, title string, v any) error {
	list, ok := v.([]any)
	if !ok {
		fmt.Fprintf(out, "%s: %v\n", title, v)
		return nil
	}
	var cols []string
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			for k, val := range m {
				switch val.(type) {
				case map[string]any, []any:
					continue
				}
				if !slices.Contains(cols, k) {
					cols = append(cols, k)
				}
			}
		}
	}
	sort.Strings(cols)
	fmt.Fprintln(out, title)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, strings.ToUpper(strings.Join(cols, "\t")))
	for _, e := range list {
		m, _ := e.(map[string]any)
		row := make([]string, len(cols))
		for i, c := range cols {
			row[i] = "-"
			if val, ok := m[c]; ok && val != nil {
				row[i] = fmt.Sprint(val)
			}
		}
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	return w.Flush()
}

// rejectionText formats a rejection as the hub's error for it reads.
func rejectionText(r meshconfig.Rejection) string {
	e := meshconfig.ObjectError{Origin: r.File, Index: r.Index, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, Field: r.Field, Reason: r.Reason}
	if r.File == "" {
		e.Index = -1
	}
	return e.Error()
}
