package xdsbootstrap

// Names a bootstrap shares with the config the hub generates: defined
// here, where both the bootstraps (written by the agent and navectl) and
// the generators (xds/gen, which alias them) can reach them.
const (
	// WorkloadCertSecret is the SDS secret holding a proxy's own workload
	// certificate and key (Istio's name).
	WorkloadCertSecret = "default"
	// RootCASecret is the SDS secret holding the mesh's roots (Istio's
	// name).
	RootCASecret = "ROOTCA"
	// CertificateProviderInstance is the certificate provider instance a proxyless
	// gRPC workload's security config names (gRFC A29); the bootstrap's
	// certificate_providers define it.
	CertificateProviderInstance = "default"
	// ServerListenerPrefix is grpc-go's default
	// server_listener_resource_name_template without its "%s".
	ServerListenerPrefix = "grpc/server?xds.resource.listening_address="
)
