package main

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/navemesh/nave/xds/ads"
)

type configKind struct {
	arg, short string
	head       string
	rows       func(r map[string]any) [][]string
}

// configKinds are proxy-config's kinds: the argument, the short type name
// the hub's /debug/config takes, and how a table shows one resource.
var configKinds = []configKind{
	{"clusters", "Cluster", "NAME\tDISCOVERY\tTRANSPORT", clusterRows},
	{"listeners", "Listener", "NAME\tADDRESS\tPORT\tFILTER CHAINS", listenerRows},
	{"routes", "RouteConfiguration", "NAME\tVIRTUAL HOST\tDOMAINS\tROUTES", routeRows},
	{"endpoints", "ClusterLoadAssignment", "CLUSTER\tENDPOINT\tLOCALITY\tHEALTH\tWEIGHT", endpointRows},
	{"secrets", "Secret", "NAME\tTYPE\tIDENTITY\tSERIAL\tNOT AFTER", secretRows},
}

func newProxyConfigCmd(stdout io.Writer) *cobra.Command {
	var af adminFlags
	args := make([]string, len(configKinds))
	for i, k := range configKinds {
		args[i] = k.arg
	}
	cmd := &cobra.Command{
		Use:   "proxy-config (" + strings.Join(args, "|") + ") PROXY",
		Short: "what the hub would send a connected proxy now, by xDS type (secrets without private keys)",
		Long: `proxy-config reads the hub's admin server and prints the resources the hub would
send PROXY (a connection ID, a node ID or a part of one; see navectl proxy-status) from
its mesh's current push context: clusters, listeners, routes, endpoints, or secrets
(the workload certificate last minted for the proxy and its mesh's roots; private keys
are never shown). -o json and -o yaml print the resources in full (protojson).`,
		Example: "  navectl proxy-config clusters reviews-v1-7d9f.bookinfo\n  navectl proxy-config routes sidecar~10.1.2.3~reviews-v1.bookinfo~bookinfo.svc.cluster.local -o yaml",
		ValidArgsFunction: func(cmd *cobra.Command, given []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			switch len(given) {
			case 0:
				return args, cobra.ShellCompDirectiveNoFileComp
			case 1:
				return af.completeProxies(cmd, toComplete)
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		Args: rangeArgs(2, 2, "a kind ("+strings.Join(args, ", ")+") and a PROXY"),
		RunE: func(cmd *cobra.Command, a []string) error {
			i := slices.IndexFunc(configKinds, func(k configKind) bool { return k.arg == a[0] })
			if i < 0 {
				return usageErr("%s: unknown kind %q: want one of %s", cmd.CommandPath(), a[0], strings.Join(args, ", "))
			}
			kind := configKinds[i]
			h, err := af.client(cmd)
			if err != nil {
				return err
			}
			var pc ads.ProxyConfig
			if err := h.get(cmd.Context(), "/debug/config", url.Values{"proxy": {a[1]}, "type": {kind.short}}, &pc); err != nil {
				return err
			}
			resources := pc.Resources[kind.short]
			if af.output != "table" {
				if resources == nil {
					resources = []json.RawMessage{}
				}
				return writeData(stdout, af.output, resources)
			}
			rs := make([]map[string]any, len(resources))
			for i, raw := range resources {
				if err := json.Unmarshal(raw, &rs[i]); err != nil {
					return fmt.Errorf("hub admin: a %s is not a JSON object: %w", kind.short, err)
				}
			}
			return writeConfigTable(stdout, kind, rs)
		},
	}
	af.register(cmd)
	return cmd
}

// writeConfigTable prints resources of one kind (protojson, decoded) as a
// table.
func writeConfigTable(out io.Writer, kind configKind, resources []map[string]any) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, kind.head)
	for _, r := range resources {
		for _, row := range kind.rows(r) {
			fmt.Fprintln(w, strings.Join(row, "\t"))
		}
	}
	return w.Flush()
}

// field walks r's nested objects by path; nil when a step is missing.
func field(r any, path ...string) any {
	for _, p := range path {
		m, ok := r.(map[string]any)
		if !ok {
			return nil
		}
		r = m[p]
	}
	return r
}

// str formats a field, "-" when absent.
func str(r any, path ...string) string {
	v := field(r, path...)
	if v == nil {
		return "-"
	}
	return fmt.Sprint(v)
}

func list(r any, path ...string) []any {
	l, _ := field(r, path...).([]any)
	return l
}

func clusterRows(r map[string]any) [][]string {
	disc := str(r, "type")
	if disc == "-" {
		disc = "STATIC" // protojson omits the default
		if field(r, "clusterType") != nil {
			disc = str(r, "clusterType", "name")
		}
	}
	transport := "plaintext"
	if field(r, "transportSocket") != nil {
		transport = str(r, "transportSocket", "name")
	}
	return [][]string{{str(r, "name"), disc, transport}}
}

func listenerRows(r map[string]any) [][]string {
	addr, port := str(r, "address", "socketAddress", "address"), str(r, "address", "socketAddress", "portValue")
	chains := fmt.Sprint(len(list(r, "filterChains")))
	if field(r, "apiListener") != nil {
		addr, port, chains = "(api listener)", "-", "-"
	}
	return [][]string{{str(r, "name"), addr, port, chains}}
}

func routeRows(r map[string]any) [][]string {
	var rows [][]string
	for _, vh := range list(r, "virtualHosts") {
		var domains []string
		for _, d := range list(vh, "domains") {
			domains = append(domains, fmt.Sprint(d))
		}
		if len(domains) > 3 {
			domains = append(domains[:3], fmt.Sprintf("+%d more", len(domains)-3))
		}
		rows = append(rows, []string{str(r, "name"), str(vh, "name"), strings.Join(domains, ","), fmt.Sprint(len(list(vh, "routes")))})
	}
	if rows == nil {
		rows = [][]string{{str(r, "name"), "-", "-", "0"}}
	}
	return rows
}

func endpointRows(r map[string]any) [][]string {
	var rows [][]string
	for _, le := range list(r, "endpoints") {
		loc := []string{}
		for _, k := range []string{"region", "zone", "subZone"} {
			if v := field(le, "locality", k); v != nil {
				loc = append(loc, fmt.Sprint(v))
			}
		}
		locality := strings.Join(loc, "/")
		if locality == "" {
			locality = "-"
		}
		for _, e := range list(le, "lbEndpoints") {
			addr := str(e, "endpoint", "address", "socketAddress", "address") + ":" + str(e, "endpoint", "address", "socketAddress", "portValue")
			health := str(e, "healthStatus")
			if health == "-" {
				health = "UNKNOWN"
			}
			weight := str(e, "loadBalancingWeight")
			if weight == "-" {
				weight = "1" // unset: the proxy takes 1 (the hub leaves 1 out)
			}
			rows = append(rows, []string{str(r, "clusterName"), addr, locality, health, weight})
		}
	}
	if rows == nil {
		rows = [][]string{{str(r, "clusterName"), "-", "-", "-", "-"}}
	}
	return rows
}

func secretRows(r map[string]any) [][]string {
	switch {
	case field(r, "tlsCertificate") != nil:
		id, serial, notAfter := certSummary(str(r, "tlsCertificate", "certificateChain", "inlineBytes"))
		return [][]string{{str(r, "name"), "certificate", id, serial, notAfter}}
	case field(r, "validationContext") != nil:
		_, serial, notAfter := certSummary(str(r, "validationContext", "trustedCa", "inlineBytes"))
		return [][]string{{str(r, "name"), "roots", "-", serial, notAfter}}
	}
	return [][]string{{str(r, "name"), "-", "-", "-", "-"}}
}

// certSummary describes the first certificate of base64 PEM bytes (as
// protojson writes bytes): its URI SAN, serial and expiry.
func certSummary(b64 string) (id, serial, notAfter string) {
	id, serial, notAfter = "-", "-", "-"
	pemBytes, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return
	}
	if len(cert.URIs) > 0 {
		id = cert.URIs[0].String()
	}
	return id, cert.SerialNumber.Text(16), cert.NotAfter.UTC().Format(time.RFC3339)
}
