package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/xds/ads"
)

// defaultHubAdmin is the hub's admin.listen default.
const defaultHubAdmin = "http://127.0.0.1:15014"

// errNotServed is returned by hubClient.get for a debug view the hub does
// not have (an older hub, or a feature it lacks); errForbidden for one the
// operator may not read (a vendor-only view asked by a tenant's operator).
var (
	errNotServed = errors.New("not served by this hub")
	errForbidden = errors.New("not for this operator")
)

// hubClient reads a hub's admin debug views. Safe for concurrent use.
type hubClient struct {
	base *url.URL
	http *http.Client
}

// adminFlags are the flags of a command that reads a hub's admin server.
type adminFlags struct {
	hubAdmin    string
	operatorDir string
	timeout     time.Duration
	output      string
}

func (a *adminFlags) register(cmd *cobra.Command) {
	def := os.Getenv("NAVE_HUB_ADMIN")
	if def == "" {
		def = defaultHubAdmin
	}
	cmd.Flags().StringVar(&a.hubAdmin, "hub-admin", def, "URL of the hub's admin server (its admin.listen; $NAVE_HUB_ADMIN)")
	cmd.Flags().StringVar(&a.operatorDir, "operator-dir", os.Getenv("NAVE_OPERATOR_DIR"),
		"directory of an operator certificate (navectl operator issue) for a hub's operator listener (admin.operatorListen, an https:// --hub-admin; $NAVE_OPERATOR_DIR)")
	cmd.Flags().DurationVar(&a.timeout, "timeout", 10*time.Second, "how long to wait for the hub")
	cmd.Flags().StringVarP(&a.output, "output", "o", "table", "output format: table, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
}

// client checks the flags and returns a client for the hub's admin server.
func (a *adminFlags) client(cmd *cobra.Command) (*hubClient, error) {
	if err := checkOutput(cmd, a.output); err != nil {
		return nil, err
	}
	u, err := url.Parse(a.hubAdmin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErr("%s: --hub-admin %q: want an http:// or https:// URL such as %s", cmd.CommandPath(), a.hubAdmin, defaultHubAdmin)
	}
	client := &http.Client{Timeout: a.timeout}
	if a.operatorDir != "" {
		if u.Scheme != "https" {
			return nil, usageErr("%s: --operator-dir is for an https:// --hub-admin (the hub's admin.operatorListen), got %s", cmd.CommandPath(), a.hubAdmin)
		}
		cfg, err := operatorTLS(a.operatorDir)
		if err != nil {
			return nil, err
		}
		client.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	return &hubClient{base: u, http: client}, nil
}

func checkOutput(cmd *cobra.Command, output string) error {
	switch output {
	case "table", "json", "yaml":
		return nil
	}
	return usageErr("%s: --output %q: want table, json or yaml", cmd.CommandPath(), output)
}

// get decodes the JSON of the admin path (with query) into v.
func (h *hubClient) get(ctx context.Context, path string, query url.Values, v any) error {
	return h.do(ctx, http.MethodGet, path, query, nil, v)
}

// apiError is a refusal by the hub: the path asked, the reason the hub
// gave (else its HTTP status) and the body it sent.
type apiError struct {
	path, reason string
	status       int
	body         []byte
}

func (e *apiError) Error() string { return "hub admin " + e.path + ": " + e.reason }

// do sends a request with body (nil: none) to the admin path (with query)
// and decodes the JSON it answers into v (nil: ignored). A refusal is an
// *apiError holding the hub's reason.
func (h *hubClient) do(ctx context.Context, method, path string, query url.Values, body []byte, v any) error {
	u := *h.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/yaml")
	}
	resp, err := h.http.Do(req)
	if err != nil {
		return fmt.Errorf("hub admin: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("hub admin %s: %w", path, err)
	}
	if resp.StatusCode/100 != 2 {
		ae := &apiError{path: path, reason: resp.Status, status: resp.StatusCode, body: data}
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(e.Error, "no debug view") {
				return fmt.Errorf("%s: %w", path, errNotServed)
			}
			if resp.StatusCode == http.StatusForbidden {
				return fmt.Errorf("hub admin %s: %s: %w", path, e.Error, errForbidden)
			}
			ae.reason = e.Error
			return ae
		}
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			return fmt.Errorf("%s: %w", path, errNotServed)
		}
		return ae
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("hub admin %s: not the JSON expected: %w", path, err)
	}
	return nil
}

// writeData prints v as JSON or YAML.
func writeData(w io.Writer, format string, v any) error {
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	_, err = w.Write(append(js, '\n'))
	return err
}

// age formats how long before now t was, as kubectl does: 5s, 3m, 2h, 4d;
// "-" for a zero time.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// completeProxies completes a proxy argument with the connection IDs of
// the proxies the hub has connected (shell completion; errors complete
// nothing).
func (a *adminFlags) completeProxies(cmd *cobra.Command, toComplete string) ([]string, cobra.ShellCompDirective) {
	h, err := a.client(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var conns []ads.ConnStatus
	if err := h.get(cmd.Context(), "/debug/syncz", nil, &conns); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, c := range conns {
		if strings.HasPrefix(c.ID, toComplete) {
			out = append(out, c.ID+"\t"+c.Mesh+" "+c.ProxyType)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
