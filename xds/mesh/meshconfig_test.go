package mesh

import (
	"testing"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// TestMeshConfigChangeIsConfigChange: a MeshConfig that differs (by value)
// is a config change; nil, empty and an equal copy are not.
func TestMeshConfigChangeIsConfigChange(t *testing.T) {
	build := func(cfg *meshv1alpha1.MeshConfig) *Snapshot {
		return (&Builder{MeshConfig: cfg}).Build("m", nil)
	}
	for _, tc := range []struct {
		name       string
		prev, next *meshv1alpha1.MeshConfig
		change     bool
	}{
		{"nil and empty", nil, &meshv1alpha1.MeshConfig{}, false},
		{"equal copies", &meshv1alpha1.MeshConfig{RootNamespace: "r"}, &meshv1alpha1.MeshConfig{RootNamespace: "r"}, false},
		{"root namespace", nil, &meshv1alpha1.MeshConfig{RootNamespace: "r"}, true},
		{"aliases", &meshv1alpha1.MeshConfig{}, &meshv1alpha1.MeshConfig{TrustDomainAliases: []string{"a.example"}}, true},
		{"trust domain", nil, &meshv1alpha1.MeshConfig{TrustDomain: "t.example"}, true},
	} {
		if d := DiffSnapshots(build(tc.prev), build(tc.next)); d.Config != tc.change {
			t.Errorf("%s: config change %v, want %v", tc.name, d.Config, tc.change)
		}
	}
}

func TestMeshConfigDefaults(t *testing.T) {
	s := Build("m", nil)
	if s.RootNamespace() != DefaultRootNamespace || !s.AutoMTLS() || !s.OutboundAllowAny() || s.ConnectTimeout() != DefaultConnectTimeout ||
		s.LocalityLbSetting() != nil || s.HasClusterLocal() || s.TrustDomain != DefaultTrustDomain || len(s.TrustDomainAliases()) != 0 {
		t.Errorf("a snapshot without MeshConfig does not have Istio's defaults")
	}
	s = (&Builder{TrustDomain: "ca.example", MeshConfig: &meshv1alpha1.MeshConfig{
		TrustDomainAliases: []string{"ca.example", "old.example", "old.example"},
		ServiceSettings: []*meshv1alpha1.MeshConfig_ServiceSettings{
			{Settings: &meshv1alpha1.MeshConfig_ServiceSettings_Settings{ClusterLocal: true}, Hosts: []string{"*.local.svc.cluster.local"}},
			{Settings: &meshv1alpha1.MeshConfig_ServiceSettings_Settings{ClusterLocal: false}, Hosts: []string{"db.local.svc.cluster.local"}},
		},
	}}).Build("m", nil)
	if got := s.TrustDomainAliases(); len(got) != 1 || got[0] != "old.example" {
		t.Errorf("aliases %v, want [old.example] (the mesh's own left out, duplicates once)", got)
	}
	for host, want := range map[string]bool{"a.local.svc.cluster.local": true, "db.local.svc.cluster.local": false, "a.other.svc.cluster.local": false} {
		if s.ClusterLocal(host) != want {
			t.Errorf("ClusterLocal(%s) = %v, want %v (the last matching entry wins)", host, !want, want)
		}
	}
}
