package xdsbootstrap

// Environment variables grpc-go's CSM observability plugin
// (google.golang.org/grpc/stats/opentelemetry/csm) reads when it is
// enabled: the mesh (csm.mesh_id), the workload's canonical service
// (csm.workload_canonical_service, and what it sends its peers for
// csm.remote_workload_canonical_service) and, on GKE and GCE only, the
// workload's name. The service labels (csm.service_name,
// csm.service_namespace_name) come from the hub's clusters instead
// (metadata com.google.csm.telemetry_labels).
const (
	EnvCSMMeshID           = "CSM_MESH_ID"
	EnvCSMWorkloadName     = "CSM_WORKLOAD_NAME"
	EnvCSMCanonicalService = "CSM_CANONICAL_SERVICE_NAME"
)

// CSMEnv is the environment a proxyless gRPC workload of mesh, named
// workload (its Deployment's name, or the pod's), with canonical service
// canonicalService, gives grpc-go's CSM observability plugin so its
// metrics carry the mesh's labels. Empty values are left out (the plugin
// reports "unknown").
func CSMEnv(mesh, workload, canonicalService string) map[string]string {
	env := map[string]string{}
	for name, value := range map[string]string{EnvCSMMeshID: mesh, EnvCSMWorkloadName: workload, EnvCSMCanonicalService: canonicalService} {
		if value != "" {
			env[name] = value
		}
	}
	return env
}

// Labels a workload's canonical service and revision come from, in the
// order Istio reads them.
var (
	CanonicalNameLabels     = []string{"service.istio.io/canonical-name", "app.kubernetes.io/name", "app"}
	CanonicalRevisionLabels = []string{"service.istio.io/canonical-revision", "app.kubernetes.io/version", "version"}
)

// CanonicalService is a workload's canonical service name as Istio
// derives it from its labels, fallback when none is set.
func CanonicalService(labels map[string]string, fallback string) string {
	for _, l := range CanonicalNameLabels {
		if v := labels[l]; v != "" {
			return v
		}
	}
	return fallback
}

// CanonicalRevision is a workload's canonical revision as Istio derives
// it from its labels, "latest" when none is set.
func CanonicalRevision(labels map[string]string) string {
	for _, l := range CanonicalRevisionLabels {
		if v := labels[l]; v != "" {
			return v
		}
	}
	return "latest"
}
