package envoysim

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Telemetry is what a request is reported through: the access logs and
// tracing of the filter that handled it, and the names of the filters it
// passed (network, then HTTP). It is a plain value.
type Telemetry struct {
	AccessLogs     []*accesslogv3.AccessLog
	Tracing        *hcmv3.HttpConnectionManager_Tracing
	NetworkFilters []string
	HTTPFilters    []string
	// HTTPFilterConfigs are the HTTP filters' typed configs by name.
	HTTPFilterConfigs map[string]*anypb.Any
}

// LogLine renders what a file access log writes for the request, as
// Envoy's substitution formatter would for the commands a request's
// fields answer (method, path, protocol, authority, headers, the
// upstream cluster, the route, the downstream address); commands only a
// real connection answers (times, bytes, codes, flags) are "-". JSON
// formats render their fields in sorted order. An error says why the log
// is not a file log this can render.
func LogLine(al *accesslogv3.AccessLog, r Request, res Result) (string, error) {
	f := new(filev3.FileAccessLog)
	if err := al.GetTypedConfig().UnmarshalTo(f); err != nil {
		return "", fmt.Errorf("access log %s is not a file access log: %w", al.GetName(), err)
	}
	sf := f.GetLogFormat()
	if js := sf.GetJsonFormat(); js != nil {
		var parts []string
		keys := make([]string, 0, len(js.GetFields()))
		for k := range js.GetFields() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%q:%q", k, substitute(js.GetFields()[k].GetStringValue(), r, res)))
		}
		return "{" + strings.Join(parts, ",") + "}\n", nil
	}
	return substitute(sf.GetTextFormatSource().GetInlineString(), r, res), nil
}

var command = regexp.MustCompile(`%([A-Z_]+)(\(([^)]*)\))?%`)

func substitute(format string, r Request, res Result) string {
	return command.ReplaceAllStringFunc(format, func(m string) string {
		sub := command.FindStringSubmatch(m)
		switch sub[1] {
		case "REQ":
			for _, h := range strings.Split(sub[3], "?") {
				if v := header(h, r); v != "" {
					return v
				}
			}
			return "-"
		case "PROTOCOL":
			if r.Method != "" {
				return "HTTP/1.1"
			}
		case "UPSTREAM_CLUSTER", "UPSTREAM_CLUSTER_RAW":
			if len(res.Clusters) > 0 {
				return res.Clusters[0].Name
			}
			if len(res.TCP) > 0 {
				return res.TCP[0].Name
			}
		case "ROUTE_NAME":
			if n := res.Route.GetName(); n != "" {
				return n
			}
		case "DOWNSTREAM_REMOTE_ADDRESS":
			if r.SourceIP != "" {
				return r.SourceIP
			}
		case "DOWNSTREAM_LOCAL_ADDRESS":
			return fmt.Sprintf("%s:%d", r.IP, r.Port)
		}
		return "-"
	})
}

// header answers REQ(name): the pseudo-headers from the request's
// fields, others from its headers.
func header(name string, r Request) string {
	switch strings.ToLower(name) {
	case ":method":
		return r.Method
	case ":path":
		return r.Path
	case ":authority", "host":
		return r.Authority
	}
	return r.Headers[strings.ToLower(name)]
}
