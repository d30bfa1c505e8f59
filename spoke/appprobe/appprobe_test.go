package appprobe

import (
	"strings"
	"testing"
)

func TestParseRoundTrip(t *testing.T) {
	svc := "shop.Cart"
	in := Probers{
		Path("web", Liveness):  {HTTPGet: &HTTPGet{Path: "/healthz?full=1", Port: 8080, Scheme: SchemeHTTPS, HTTPHeaders: []Header{{Name: "X-Probe", Value: "1"}}}, TimeoutSeconds: 3},
		Path("web", Readiness): {GRPC: &GRPC{Port: 9090, Service: &svc}},
		Path("db", Startup):    {TCPSocket: &TCPSocket{Port: 5432, Host: "127.0.0.1"}},
	}
	text, err := in.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out, err := Parse(text)
	if err != nil {
		t.Fatalf("Parse(%s): %v", text, err)
	}
	if len(out) != 3 || out[Path("web", Liveness)].HTTPGet.Port != 8080 || *out[Path("web", Readiness)].GRPC.Service != svc ||
		out[Path("db", Startup)].TCPSocket.Port != 5432 || out[Path("web", Liveness)].Timeout() != 3 || out[Path("db", Startup)].Timeout() != DefaultTimeoutSeconds {
		t.Errorf("round trip: %s", text)
	}
	if k := out[Path("web", Readiness)].Kind(); k != "grpc" {
		t.Errorf("kind %q", k)
	}
	if ps, err := Parse(""); err != nil || len(ps) != 0 {
		t.Errorf("empty: %v %v", ps, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{`[]`, "not a JSON object"},
		{`{} {}`, "text after the object"},
		{`{"/app-health/web/livez":{"httpGet":{"port":80},"unknown":1}}`, "unknown field"},
		{`{"/healthz/ready":{"httpGet":{"port":80}}}`, `probe "/healthz/ready": not a probe path`},
		{`{"/app-health/Web/livez":{"httpGet":{"port":80}}}`, "not a probe path"},
		{`{"/app-health/web/deadz":{"httpGet":{"port":80}}}`, "not a probe path"},
		{`{"/app-health/web/livez":null}`, "no probe"},
		{`{"/app-health/web/livez":{}}`, "has 0 of"},
		{`{"/app-health/web/livez":{"httpGet":{"port":80},"tcpSocket":{"port":80}}}`, "has 2 of"},
		{`{"/app-health/web/livez":{"httpGet":{"port":0}}}`, "httpGet.port: 0"},
		{`{"/app-health/web/livez":{"httpGet":{"port":"http"}}}`, "not a JSON object"},
		{`{"/app-health/web/livez":{"httpGet":{"port":80,"host":"example.com"}}}`, "only its own pod"},
		{`{"/app-health/web/livez":{"httpGet":{"port":80,"scheme":"FTP"}}}`, "httpGet.scheme"},
		{`{"/app-health/web/livez":{"httpGet":{"port":80,"path":"healthz"}}}`, "absolute path"},
		{`{"/app-health/web/livez":{"httpGet":{"port":80,"httpHeaders":[{"name":"a b","value":"x"}]}}}`, "httpHeaders[0]"},
		{`{"/app-health/web/livez":{"httpGet":{"port":80,"httpHeaders":[{"name":"X","value":"a\r\nb"}]}}}`, "httpHeaders[0]"},
		{`{"/app-health/web/livez":{"tcpSocket":{"port":70000}}}`, "tcpSocket.port"},
		{`{"/app-health/web/livez":{"tcpSocket":{"port":80,"host":"10.1.1.1"}}}`, "tcpSocket.host"},
		{`{"/app-health/web/livez":{"grpc":{"port":-1}}}`, "grpc.port"},
		{`{"/app-health/web/livez":{"grpc":{"port":80},"timeoutSeconds":-1}}`, "timeoutSeconds"},
	} {
		_, err := Parse(c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s): %v; want an error with %q", c.text, err, c.want)
		}
	}
}

func TestSplitPath(t *testing.T) {
	if c, k, ok := SplitPath("/app-health/web-1/readyz"); !ok || c != "web-1" || k != Readiness {
		t.Errorf("got %q %q %v", c, k, ok)
	}
	for _, p := range []string{"/app-health/web/readyz/", "/app-health//readyz", "/app-health/../readyz", "/app-health/a/b/readyz", "app-health/web/readyz"} {
		if _, _, ok := SplitPath(p); ok {
			t.Errorf("%q is a probe path", p)
		}
	}
}

func TestIsLoopbackHost(t *testing.T) {
	for h, want := range map[string]bool{"": true, "localhost": true, "LocalHost": true, "127.0.0.1": true, "127.1.2.3": true, "::1": true, "[::1]": true,
		"10.0.0.1": false, "example.com": false, "0.0.0.0": false} {
		if got := IsLoopbackHost(h); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v", h, got)
		}
	}
}

// FuzzParse: Parse never panics, and what it accepts re-encodes to text
// it accepts again with the same probes.
func FuzzParse(f *testing.F) {
	f.Add(`{"/app-health/web/livez":{"httpGet":{"path":"/healthz","port":8080,"scheme":"HTTP","httpHeaders":[{"name":"X-A","value":"b"}]},"timeoutSeconds":2}}`)
	f.Add(`{"/app-health/web/readyz":{"grpc":{"port":9090,"service":"x"}},"/app-health/db/startupz":{"tcpSocket":{"port":5432}}}`)
	f.Add(`{"/app-health/web/livez":{"httpGet":{"port":80,"host":"example.com"}}}`)
	f.Fuzz(func(t *testing.T, text string) {
		ps, err := Parse(text)
		if err != nil {
			return
		}
		again, err := ps.Marshal()
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", text, err)
		}
		ps2, err := Parse(again)
		if err != nil || len(ps2) != len(ps) {
			t.Fatalf("accepted %q, re-encoded as %q, which parses to %v (%v)", text, again, ps2, err)
		}
		for path, p := range ps2 {
			if p.Kind() != ps[path].Kind() || p.Timeout() != ps[path].Timeout() {
				t.Fatalf("probe %s changed in the round trip", path)
			}
		}
	})
}
