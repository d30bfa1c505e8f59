// Package xdsbootstrap writes grpc-go's xDS bootstrap (gRFC A27, with A65's
// "tls" channel credentials and the certificate providers of A29), for the
// demo client and for tests that run grpc-go xDS clients and servers
// against the hub.
package xdsbootstrap

import "encoding/json"

// Bootstrap is the part of the bootstrap format nave fills in.
type Bootstrap struct {
	XDSServers []Server `json:"xds_servers"`
	Node       Node     `json:"node"`
	// CertificateProviders are the certificate-provider instances the
	// hub's config names (gen.GRPCCertificateProvider) for mTLS between
	// workloads.
	CertificateProviders map[string]CertificateProvider `json:"certificate_providers,omitempty"`
	// ServerListenerResourceNameTemplate names an xDS server's listener
	// (gen.GRPCServerListenerPrefix + "%s").
	ServerListenerResourceNameTemplate string `json:"server_listener_resource_name_template,omitempty"`
}

// Server is one xDS server (the hub).
type Server struct {
	ServerURI      string         `json:"server_uri"`
	ChannelCreds   []ChannelCreds `json:"channel_creds"`
	ServerFeatures []string       `json:"server_features"`
}

// ChannelCreds are "insecure", or "tls" with Config.
type ChannelCreds struct {
	Type   string    `json:"type"`
	Config *TLSFiles `json:"config,omitempty"`
}

// TLSFiles configure "tls" channel credentials (gRFC A65): the CA the hub's
// certificate must chain to, and the client's certificate and key.
type TLSFiles struct {
	CACertificateFile string `json:"ca_certificate_file"`
	CertificateFile   string `json:"certificate_file"`
	PrivateKeyFile    string `json:"private_key_file"`
}

// Node is the xDS node the hub sees.
type Node struct {
	ID       string         `json:"id"`
	Metadata map[string]any `json:"metadata,omitempty"`
	// Locality is where the client runs: the hub balances its calls by
	// locality (DestinationRule localityLbSetting) from it.
	Locality *Locality `json:"locality,omitempty"`
}

// Locality is a node's region, zone and subzone.
type Locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	SubZone string `json:"sub_zone,omitempty"`
}

// CertificateProvider is grpc-go's file_watcher plugin.
type CertificateProvider struct {
	PluginName string      `json:"plugin_name"`
	Config     FileWatcher `json:"config"`
}

// FileWatcher names a workload's certificate files; grpc re-reads them
// every RefreshInterval.
type FileWatcher struct {
	CertificateFile   string `json:"certificate_file"`
	PrivateKeyFile    string `json:"private_key_file"`
	CACertificateFile string `json:"ca_certificate_file"`
	RefreshInterval   string `json:"refresh_interval"`
}

// New is a bootstrap for one hub at serverURI (xDS v3), dialled over TLS
// with tls, or in plain text when tls is nil.
func New(serverURI, nodeID string, metadata map[string]any, tls *TLSFiles) *Bootstrap {
	creds := ChannelCreds{Type: "insecure"}
	if tls != nil {
		creds = ChannelCreds{Type: "tls", Config: tls}
	}
	return &Bootstrap{
		XDSServers: []Server{{ServerURI: serverURI, ChannelCreds: []ChannelCreds{creds}, ServerFeatures: []string{"xds_v3"}}},
		Node:       Node{ID: nodeID, Metadata: metadata},
	}
}

// WithFallback adds a second xDS server at serverURI, the spoke's fallback
// server, with the first one's channel credentials, and returns b. grpc-go
// uses it only while the first is unreachable (gRFC A71); an empty
// serverURI adds nothing.
//
// With TLS the CA file must hold the roots of both servers, the hub's
// serving CA and the mesh's (the spoke serves its cluster certificate,
// valid for its fallback.serverNames): grpc-go v1.85 builds one set of
// channel credentials per credentials type, the last server's, and uses
// it for every server of the bootstrap, so per-server CA files would have
// the hub verified with the spoke's roots (docs/fallback.md).
func (b *Bootstrap) WithFallback(serverURI string) *Bootstrap {
	if serverURI == "" {
		return b
	}
	s := b.XDSServers[0]
	s.ServerURI = serverURI
	b.XDSServers = append(b.XDSServers, s)
	return b
}

// WithFileWatcher adds the certificate provider instance name reading the
// workload certificate files, and returns b.
func (b *Bootstrap) WithFileWatcher(name, certFile, keyFile, caFile, refresh string) *Bootstrap {
	if b.CertificateProviders == nil {
		b.CertificateProviders = map[string]CertificateProvider{}
	}
	b.CertificateProviders[name] = CertificateProvider{PluginName: "file_watcher", Config: FileWatcher{
		CertificateFile: certFile, PrivateKeyFile: keyFile, CACertificateFile: caFile, RefreshInterval: refresh}}
	return b
}

// WithServerListenerTemplate sets the server listener name template, and
// returns b.
func (b *Bootstrap) WithServerListenerTemplate(template string) *Bootstrap {
	b.ServerListenerResourceNameTemplate = template
	return b
}

// WithLocality sets the node's locality (all empty: none), and returns b.
func (b *Bootstrap) WithLocality(region, zone, subzone string) *Bootstrap {
	if region == "" && zone == "" && subzone == "" {
		b.Node.Locality = nil
		return b
	}
	b.Node.Locality = &Locality{Region: region, Zone: zone, SubZone: subzone}
	return b
}

// JSON is the bootstrap's contents.
func (b *Bootstrap) JSON() ([]byte, error) { return json.Marshal(b) }

// WithFallbackServer lists another xDS server after the first: grpc-go
// (gRFC A71) uses it only while the first cannot be reached and a resource
// it needs is not cached, and returns to the first as soon as it answers
// (docs/fallback.md). tls nil connects without TLS.
func (b *Bootstrap) WithFallbackServer(serverURI string, tls *TLSFiles) *Bootstrap {
	creds := ChannelCreds{Type: "insecure"}
	if tls != nil {
		creds = ChannelCreds{Type: "tls", Config: tls}
	}
	b.XDSServers = append(b.XDSServers, Server{ServerURI: serverURI, ChannelCreds: []ChannelCreds{creds}, ServerFeatures: []string{"xds_v3"}})
	return b
}
