package kube

import "testing"

func TestPortProtocol(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name        string
		appProtocol *string
		want        string
	}{
		{"http", nil, "HTTP"},
		{"HTTP-web", nil, "HTTP"},
		{"http2-api", nil, "HTTP2"},
		{"https", nil, "HTTPS"},
		{"grpc", nil, "GRPC"},
		{"grpc-api", nil, "GRPC"},
		{"grpc-web", nil, "GRPC-Web"},
		{"grpc-web-ui", nil, "GRPC-Web"},
		{"tcp-db", nil, "TCP"},
		{"tls-x", nil, "TLS"},
		{"mongo", nil, "Mongo"},
		{"redis-cache", nil, "Redis"},
		{"mysql", nil, "MySQL"},
		// Undeclared: sniffed by the sidecars, as in Istio.
		{"metrics", nil, ""},
		{"", nil, ""},
		{"httpx", nil, ""},
		{"web", str("http"), "HTTP"},
		{"http", str("grpc"), "GRPC"},
		{"web", str("HTTP2"), "HTTP2"},
		{"web", str("kubernetes.io/h2c"), "HTTP2"},
		{"web", str("kubernetes.io/ws"), "HTTP"},
		{"web", str("kubernetes.io/wss"), "HTTPS"},
		// An appProtocol Istio does not know falls back to the name.
		{"http-web", str("example.com/custom"), "HTTP"},
		{"web", str("example.com/custom"), ""},
	}
	for _, tt := range tests {
		ap := "<nil>"
		if tt.appProtocol != nil {
			ap = *tt.appProtocol
		}
		if got := portProtocol(tt.name, tt.appProtocol); got != tt.want {
			t.Errorf("portProtocol(%q, %s) = %q, want %q", tt.name, ap, got, tt.want)
		}
	}
}
