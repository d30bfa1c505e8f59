// Package appprobe is the contract between the sidecar injector and
// nave-agent for application probes kept working in the mesh (decision
// 032): the injector rewrites an app container's httpGet, grpc and
// tcpSocket probes to httpGet on the agent's status port at Path(container,
// kind), and hands the originals to the agent as JSON (agentconfig's
// appProbes, NAVE_APP_PROBES: Istio's ISTIO_KUBE_APP_PROBERS format, ports
// as numbers); the agent serves each path by probing the pod itself.
//
// Parse is the only way the agent reads the JSON: it refuses anything but
// probes of the pod (no host other than loopback), at the known paths.
package appprobe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Kinds of probe: the last path segment, Istio's names.
const (
	Liveness  = "livez"
	Readiness = "readyz"
	Startup   = "startupz"
)

// Kinds lists the kinds.
var Kinds = []string{Liveness, Readiness, Startup}

// PathPrefix starts every rewritten probe's path.
const PathPrefix = "/app-health/"

// DefaultTimeoutSeconds is Kubernetes' default timeoutSeconds.
const DefaultTimeoutSeconds = 1

// maxTimeoutSeconds bounds a probe's timeout (an hour: beyond any probe
// period a kubelet would use).
const maxTimeoutSeconds = 3600

// Schemes of an HTTP probe.
const (
	SchemeHTTP  = "HTTP"
	SchemeHTTPS = "HTTPS"
)

// Path is where the agent serves container's probe of kind.
func Path(container, kind string) string { return PathPrefix + container + "/" + kind }

var pathPattern = regexp.MustCompile(`^/app-health/([^/]+)/(livez|readyz|startupz)$`)

// SplitPath returns the container and kind of a probe path, ok false when
// path is not one.
func SplitPath(path string) (container, kind string, ok bool) {
	m := pathPattern.FindStringSubmatch(path)
	if m == nil || len(validation.IsDNS1123Label(m[1])) != 0 {
		return "", "", false
	}
	return m[1], m[2], true
}

// Prober is one original probe: exactly one of HTTPGet, GRPC, TCPSocket,
// and the original probe's timeoutSeconds. A plain value.
type Prober struct {
	HTTPGet        *HTTPGet   `json:"httpGet,omitempty"`
	TCPSocket      *TCPSocket `json:"tcpSocket,omitempty"`
	GRPC           *GRPC      `json:"grpc,omitempty"`
	TimeoutSeconds int32      `json:"timeoutSeconds,omitempty"`
}

// HTTPGet is an httpGet probe with its port resolved to a number.
type HTTPGet struct {
	Path        string   `json:"path,omitempty"`
	Port        int      `json:"port"`
	Host        string   `json:"host,omitempty"`
	Scheme      string   `json:"scheme,omitempty"`
	HTTPHeaders []Header `json:"httpHeaders,omitempty"`
}

// Header is one header an HTTP probe sends.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// TCPSocket is a tcpSocket probe with its port resolved to a number.
type TCPSocket struct {
	Port int    `json:"port"`
	Host string `json:"host,omitempty"`
}

// GRPC is a grpc probe: grpc.health.v1 Check of Service on Port.
type GRPC struct {
	Port    int     `json:"port"`
	Service *string `json:"service,omitempty"`
}

// Probers maps probe paths (Path) to the original probes. A plain value.
type Probers map[string]*Prober

// Kind names the handler of p: http, grpc or tcp.
func (p *Prober) Kind() string {
	switch {
	case p.HTTPGet != nil:
		return "http"
	case p.GRPC != nil:
		return "grpc"
	default:
		return "tcp"
	}
}

// Timeout is the original probe's timeoutSeconds, Kubernetes' default when
// unset.
func (p *Prober) Timeout() int32 {
	if p.TimeoutSeconds <= 0 {
		return DefaultTimeoutSeconds
	}
	return p.TimeoutSeconds
}

// IsLoopbackHost reports whether host, a probe's host field, names the pod
// itself whatever its IP: empty, localhost or a loopback address.
func IsLoopbackHost(host string) bool {
	if host == "" || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Marshal encodes ps as the agent reads them (keys in order).
func (ps Probers) Marshal() (string, error) {
	b, err := json.Marshal(ps) // encoding/json sorts map keys
	return string(b), err
}

// Parse reads and checks probes as the injector writes them; "" is none.
// Every error names the probe path and the field.
func Parse(text string) (Probers, error) {
	if strings.TrimSpace(text) == "" {
		return Probers{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.DisallowUnknownFields()
	var ps Probers
	if err := dec.Decode(&ps); err != nil {
		return nil, fmt.Errorf("not a JSON object of probes by path: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not a JSON object of probes by path: text after the object")
	}
	paths := make([]string, 0, len(ps))
	for path := range ps {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		if err := check(path, ps[path]); err != nil {
			return nil, fmt.Errorf("probe %q: %w", path, err)
		}
	}
	return ps, nil
}

func check(path string, p *Prober) error {
	if _, _, ok := SplitPath(path); !ok {
		return fmt.Errorf("not a probe path: want %s<container>/<%s>", PathPrefix, strings.Join(Kinds, "|"))
	}
	if p == nil {
		return fmt.Errorf("no probe")
	}
	return p.Validate()
}

// Validate checks p: one handler, ports, a host of the pod itself, the
// scheme, path and headers of an HTTP probe, the timeout.
func (p *Prober) Validate() error {
	n := 0
	for _, set := range []bool{p.HTTPGet != nil, p.GRPC != nil, p.TCPSocket != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("has %d of httpGet, grpc and tcpSocket; want exactly one", n)
	}
	if p.TimeoutSeconds < 0 || p.TimeoutSeconds > maxTimeoutSeconds {
		return fmt.Errorf("timeoutSeconds %d: want 0 (the default, %d) to %d", p.TimeoutSeconds, DefaultTimeoutSeconds, maxTimeoutSeconds)
	}
	port := func(field string, v int) error {
		if v < 1 || v > 65535 {
			return fmt.Errorf("%s: %d is not a port number 1-65535", field, v)
		}
		return nil
	}
	switch {
	case p.HTTPGet != nil:
		h := p.HTTPGet
		if err := port("httpGet.port", h.Port); err != nil {
			return err
		}
		if !IsLoopbackHost(h.Host) {
			return fmt.Errorf("httpGet.host %q: the agent probes only its own pod (empty, localhost or a loopback address)", h.Host)
		}
		if !slices.Contains([]string{"", SchemeHTTP, SchemeHTTPS}, h.Scheme) {
			return fmt.Errorf("httpGet.scheme %q: want %s or %s", h.Scheme, SchemeHTTP, SchemeHTTPS)
		}
		if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
			return fmt.Errorf("httpGet.path %q: want an absolute path", h.Path)
		}
		if strings.ContainsAny(h.Path, " \r\n\t#") {
			return fmt.Errorf("httpGet.path %q: holds a space, a control character or a fragment", h.Path)
		}
		for i, hd := range h.HTTPHeaders {
			if !validHeaderName(hd.Name) || strings.ContainsAny(hd.Value, "\r\n\x00") {
				return fmt.Errorf("httpGet.httpHeaders[%d]: %q is not a valid header", i, hd.Name)
			}
		}
	case p.GRPC != nil:
		return port("grpc.port", p.GRPC.Port)
	default:
		if err := port("tcpSocket.port", p.TCPSocket.Port); err != nil {
			return err
		}
		if !IsLoopbackHost(p.TCPSocket.Host) {
			return fmt.Errorf("tcpSocket.host %q: the agent probes only its own pod (empty, localhost or a loopback address)", p.TCPSocket.Host)
		}
	}
	return nil
}

// validHeaderName reports whether s is an HTTP token (RFC 9110).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
