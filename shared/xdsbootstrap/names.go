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
	// CACertSuffix ends the SDS name of the CA bundle that validates a
	// MUTUAL gateway server's clients: credentialName + CACertSuffix
	// (Istio's "-cacert" convention). The agent that serves a gateway's
	// credentialName secrets resolves it (docs/gateways.md).
	CACertSuffix = "-cacert"
	// CertificateProviderInstance is the certificate provider instance a proxyless
	// gRPC workload's security config names (gRFC A29); the bootstrap's
	// certificate_providers define it.
	CertificateProviderInstance = "default"
	// ServerListenerPrefix is grpc-go's default
	// server_listener_resource_name_template without its "%s".
	ServerListenerPrefix = "grpc/server?xds.resource.listening_address="
)

// Node metadata keys the hub reads (xds/proxy aliases them): Istio's where
// Istio has one, plus nave's MESH.
const (
	MetaMesh           = "MESH"
	MetaNamespace      = "NAMESPACE"
	MetaLabels         = "LABELS"
	MetaServiceAccount = "SERVICE_ACCOUNT"
	MetaInstanceIPs    = "INSTANCE_IPS"
	MetaNetwork        = "NETWORK"
	MetaClusterID      = "CLUSTER_ID"
	MetaGenerator      = "GENERATOR"
	// MetaName and MetaNodeName are the pod's (or VM's) name and the node
	// it runs on, as Istio's agent sends them; the hub does not read them.
	MetaName     = "NAME"
	MetaNodeName = "NODE_NAME"
	// MetaAnnotations are the pod's annotations (Istio's key); the hub does
	// not read them.
	MetaAnnotations = "ANNOTATIONS"
	// MetaSDSCluster names the cluster of the proxy's bootstrap that
	// serves its workload secrets ("default", "ROOTCA") by SDS: a local
	// agent (SDSCluster). Absent, the proxy asks the hub for them over ADS.
	MetaSDSCluster = "SDS_CLUSTER"
	// MetaHomeReplica is the replica of the hub the bootstrap lists first,
	// its namespace's home (HomeOrder; decision 051): a replica holding
	// the proxy while its home is ready sheds it, so that it returns
	// there. Absent when the bootstrap lists no replicas. nave's key.
	MetaHomeReplica = "NAVE_HOME_REPLICA"
	// GeneratorGRPC, as MetaGenerator, marks a proxyless gRPC client.
	GeneratorGRPC = "grpc"
)
