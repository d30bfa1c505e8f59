package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/navemesh/nave/xds/ads"
)

// proxyTypes are the xDS types in column order: short type name (as the
// hub's /debug/syncz keys them) and column title.
var proxyTypes = []struct{ short, column string }{
	{"Cluster", "CDS"},
	{"Listener", "LDS"},
	{"ClusterLoadAssignment", "EDS"},
	{"RouteConfiguration", "RDS"},
	{"Secret", "SDS"},
}

// syncState is the state of one type of one proxy; ok is false for a
// type the proxy has not subscribed to.
func syncState(ts ads.TypeStatus, ok bool) string {
	if !ok {
		return ads.SyncNotSent
	}
	return ts.SyncState()
}

// proxyStatus is one proxy in navectl proxy-status's json and yaml.
type proxyStatus struct {
	ads.ConnStatus
	// States maps a short type name to its sync state.
	States map[string]string `json:"states"`
}

func newProxyStatusCmd(stdout io.Writer) *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "proxy-status [PROXY]",
		Short: "every connected proxy's sync state per xDS type: SYNCED, NOT SENT, STALE or NACKED",
		Long: `proxy-status reads the hub's admin server and prints, for every proxy connected to
it, the sync state of each xDS type: SYNCED (the proxy ACKed the last version sent),
NOT SENT (nothing of the type was sent), STALE (sent, not answered yet) or NACKED (the
proxy refused the last version sent). With PROXY (a connection ID, a node ID or a
part of one), it prints that proxy's types in detail, NACK reasons included.`,
		Example: "  navectl proxy-status\n  navectl proxy-status reviews-v1-7d9f.bookinfo -o json",
		Args:    rangeArgs(0, 1, "at most one PROXY"),
		ValidArgsFunction: func(cmd *cobra.Command, given []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(given) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return af.completeProxies(cmd, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := af.client(cmd)
			if err != nil {
				return err
			}
			var conns []ads.ConnStatus
			if err := h.get(cmd.Context(), "/debug/syncz", nil, &conns); err != nil {
				return err
			}
			if len(args) == 1 {
				c, err := findProxy(conns, args[0])
				if err != nil {
					return err
				}
				conns = []ads.ConnStatus{c}
			}
			out := proxyStatuses(conns)
			switch {
			case af.output != "table":
				return writeData(stdout, af.output, out)
			case len(args) == 1:
				return writeProxyDetail(stdout, out[0], time.Now())
			}
			return writeProxyStatus(stdout, out)
		},
	}
	af.register(cmd)
	return cmd
}

// findProxy picks the proxy name names, as the hub's /debug/config does
// (ads.FindProxy).
func findProxy(conns []ads.ConnStatus, name string) (ads.ConnStatus, error) {
	i, err := ads.FindProxy(name, len(conns), func(i int) (string, string, bool) {
		return conns[i].ID, conns[i].NodeID, conns[i].NameTable
	})
	if err != nil {
		return ads.ConnStatus{}, fmt.Errorf("%w (see navectl proxy-status)", err)
	}
	return conns[i], nil
}

// proxyStatuses adds each proxy's sync state per type.
func proxyStatuses(conns []ads.ConnStatus) []proxyStatus {
	out := make([]proxyStatus, len(conns))
	for i, c := range conns {
		out[i] = proxyStatus{ConnStatus: c, States: map[string]string{}}
		if c.NameTable {
			// A pod's agent's stream for the name table (DNS proxying):
			// none of the proxy types is served on it.
			out[i].ProxyType = "name-table"
			for _, t := range proxyTypes {
				out[i].States[t.short] = "-"
			}
			continue
		}
		for _, t := range proxyTypes {
			ts, ok := c.Types[t.short]
			out[i].States[t.short] = syncState(ts, ok)
		}
	}
	return out
}

func writeProxyStatus(out io.Writer, ps []proxyStatus) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head := []string{"NAME", "MESH", "TYPE"}
	for _, t := range proxyTypes {
		head = append(head, t.column)
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, p := range ps {
		row := []string{p.ID, p.Mesh, p.ProxyType}
		for _, t := range proxyTypes {
			row = append(row, p.States[t.short])
		}
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	return w.Flush()
}

func writeProxyDetail(out io.Writer, p proxyStatus, now time.Time) error {
	mode := "state of the world"
	if p.Delta {
		mode = "delta"
	}
	fmt.Fprintf(out, "Proxy:      %s\nNode:       %s\nMesh:       %s\nType:       %s\n", p.ID, p.NodeID, p.Mesh, p.ProxyType)
	if p.Namespace != "" {
		fmt.Fprintf(out, "Namespace:  %s\n", p.Namespace)
	}
	fmt.Fprintf(out, "ADS:        %s, connected %s ago", mode, age(now, p.ConnectedAt))
	if p.Peer != "" {
		fmt.Fprintf(out, " from %s", p.Peer)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TYPE\tSTATE\tSUBSCRIBED\tSENT\tRESOURCES\tACKED\tNACKED\tSENT AGO")
	var reasons []string
	for _, t := range proxyTypes {
		ts := p.Types[t.short]
		sub := fmt.Sprint(ts.Subscribed)
		if ts.Wildcard {
			sub = "*"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", t.column, p.States[t.short], sub, dash(ts.SentVersion), ts.SentResources,
			dash(ts.AckedVersion), dash(ts.NackedVersion), age(now, ts.SentAt))
		if ts.NackReason != "" {
			reasons = append(reasons, fmt.Sprintf("%s NACK of %s: %s", t.column, ts.NackedVersion, ts.NackReason))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, r := range reasons {
		fmt.Fprintln(out, r)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
