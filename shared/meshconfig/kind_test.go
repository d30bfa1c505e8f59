package meshconfig

import (
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/typeurl"
)

func TestKinds(t *testing.T) {
	var names []string
	for _, k := range Kinds() {
		names = append(names, k.Kind)
		got, ok := KindByTypeURL(k.TypeURL)
		if !ok || got != k {
			t.Errorf("KindByTypeURL(%s) = %v, %v", k.TypeURL, got, ok)
		}
		if spec := k.New(); typeurl.Of(spec) != k.TypeURL {
			t.Errorf("%s: New() makes a %T, not a %s", k.Kind, spec, k.TypeURL)
		}
		if k.New() == k.New() {
			t.Errorf("%s: New() returns a shared spec", k.Kind)
		}
		for _, v := range k.Versions {
			if got, err := KindFor(k.Group+"/"+v, k.APIKind); err != nil || got != k {
				t.Errorf("KindFor(%s/%s, %s) = %v, %v", k.Group, v, k.Kind, got, err)
			}
		}
		if k.Registry != (k.Group == GroupRegistry) {
			t.Errorf("%s: Registry = %v in group %s", k.Kind, k.Registry, k.Group)
		}
	}
	want := "VirtualService,DestinationRule,Gateway,ServiceEntry,WorkloadEntry,WorkloadGroup,Sidecar,EnvoyFilter," +
		"PeerAuthentication,RequestAuthentication,AuthorizationPolicy,Telemetry," +
		"GatewayClass,KubernetesGateway,HTTPRoute,GRPCRoute,TCPRoute,TLSRoute,ReferenceGrant,Service,Workload"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("Kinds() = %s, want %s", got, want)
	}
	Kinds()[0] = nil
	if Kinds()[0] == nil {
		t.Error("Kinds() returns the package's own slice")
	}
	if vs, _ := KindFor("networking.istio.io/v1alpha3", "VirtualService"); vs.TypeURL != "type.googleapis.com/istio.networking.v1alpha3.VirtualService" {
		t.Errorf("VirtualService type URL = %s", vs.TypeURL)
	}
	if ap, _ := KindFor("security.istio.io/v1", "AuthorizationPolicy"); ap.TypeURL != "type.googleapis.com/istio.security.v1beta1.AuthorizationPolicy" {
		t.Errorf("AuthorizationPolicy type URL = %s", ap.TypeURL)
	}
	if _, ok := KindByTypeURL("type.googleapis.com/istio.extensions.v1alpha1.WasmPlugin"); ok {
		t.Error("KindByTypeURL found WasmPlugin")
	}
}

func TestKindForErrors(t *testing.T) {
	tests := []struct{ apiVersion, kind, want string }{
		{"networking.istio.io/v2", "VirtualService", `apiVersion "networking.istio.io/v2" is not supported for VirtualService (supported versions: v1, v1beta1, v1alpha3)`},
		{"security.istio.io/v1alpha3", "PeerAuthentication", "supported versions: v1, v1beta1"},
		{"networking.istio.io/v1", "EnvoyFilter", `apiVersion "networking.istio.io/v1" is not supported for EnvoyFilter (supported versions: v1alpha3)`},
		{"networking.istio.io/v1", "Telemetry", `kind "Telemetry" is not supported in networking.istio.io`},
		{"networking.istio.io/v1", "PeerAuthentication", `kind "PeerAuthentication" is not supported in networking.istio.io`},
		{"apps/v1", "Deployment", `apiVersion "apps/v1" is not supported`},
		{"v1", "Service", `apiVersion "v1" is not of the form group/version`},
		{"", "Service", `apiVersion "" is not of the form group/version`},
		{"nave.io/v2", "Service", `apiVersion "nave.io/v2" is not supported for Service`},
	}
	for _, tt := range tests {
		_, err := KindFor(tt.apiVersion, tt.kind)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("KindFor(%q, %q) = %v, want an error containing %q", tt.apiVersion, tt.kind, err, tt.want)
		}
	}
}
