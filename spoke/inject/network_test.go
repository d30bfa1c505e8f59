package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/navemesh/nave/shared/meshconfig"
)

// agentEnv returns the environment of the container running nave-agent.
func agentEnvOf(t *testing.T, pod *corev1.Pod) map[string]corev1.EnvVar {
	t.Helper()
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if env := envOf(&cs[i]); env["NAVE_MODE"].Value != "" {
				return env
			}
		}
	}
	t.Fatal("no container runs nave-agent")
	return nil
}

// TestInjectedNetwork: the proxy's network (the agent's network key,
// node metadata NETWORK) is the pod's topology.istio.io/network label,
// else what Options.Network says of its namespace (its label, else the
// spoke's network); the pod is labelled with it, as Istio's injector
// does; without a network nothing is set.
func TestInjectedNetwork(t *testing.T) {
	networks := map[string]string{"east": "net-ns"}
	in := newTestInjector(t, func(o *Options) {
		o.Network = func(ns string) string {
			if nw, ok := networks[ns]; ok {
				return nw
			}
			return "net-spoke"
		}
	})
	for _, tc := range []struct {
		name, namespace, pod, want string
	}{
		{"sidecar, spoke's network", "shop", minimalPod, "net-spoke"},
		{"sidecar, namespace's label", "east", minimalPod, "net-ns"},
		{"sidecar, pod's label", "east", "metadata: {name: web, labels: {topology.istio.io/network: net-pod}}\nspec: {containers: [{name: app, image: a}]}\n", "net-pod"},
		{"grpc-agent", "east", "metadata: {name: c, annotations: {inject.istio.io/templates: grpc-agent}}\nspec: {containers: [{name: a, image: a}]}\n", "net-ns"},
		{"gateway", "shop", gatewayPod("inject.istio.io/templates: gateway", ""), "net-spoke"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, pod, _ := review(t, in, podRequest(t, tc.namespace, []byte(tc.pod)))
			if pod == nil {
				t.Fatal("refused")
			}
			if got := agentEnvOf(t, pod)["NAVE_NETWORK"].Value; got != tc.want {
				t.Errorf("NAVE_NETWORK = %q, want %q", got, tc.want)
			}
			if got := pod.Labels[meshconfig.NetworkLabel]; got != tc.want {
				t.Errorf("pod label %s = %q, want %q", meshconfig.NetworkLabel, got, tc.want)
			}
		})
	}

	t.Run("no network", func(t *testing.T) {
		_, pod, _ := review(t, newTestInjector(t, nil), podRequest(t, "shop", []byte(minimalPod)))
		if pod == nil {
			t.Fatal("refused")
		}
		if _, ok := agentEnvOf(t, pod)["NAVE_NETWORK"]; ok {
			t.Error("NAVE_NETWORK set without a network")
		}
		if _, ok := pod.Labels[meshconfig.NetworkLabel]; ok {
			t.Error("the pod is labelled with a network without one")
		}
	})
}
