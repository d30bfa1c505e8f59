package inject

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// csmEnv is the environment grpc-go's CSM observability plugin reads, for
// the app containers of a proxyless pod of mesh (xdsbootstrap.CSMEnv):
// the mesh, the pod's canonical service and its workload name, as the
// injector names them for its canonical labels. Sorted by name.
func csmEnv(pod *corev1.Pod, mesh string) []corev1.EnvVar {
	name, _ := canonical(pod)
	env := xdsbootstrap.CSMEnv(mesh, workloadName(pod), name)
	out := make([]corev1.EnvVar, 0, len(env))
	for k, v := range env {
		out = append(out, corev1.EnvVar{Name: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
