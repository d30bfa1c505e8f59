package main

import (
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/tenants"
	"github.com/navemesh/nave/shared/admin"
)

// meshHub serves the meshes API of a hub's tenants Service (a dir store)
// on a plain admin server, as a hub without an operator listener does.
func meshHub(t *testing.T, spokes map[string]int) (*tenants.Service, string) {
	t.Helper()
	store, err := tenants.OpenStore(ca.StoreDir, t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := tenants.New(t.Context(), store, tenants.Options{})
	if err != nil {
		t.Fatal(err)
	}
	adm := admin.New(slog.New(slog.DiscardHandler), admin.NewRegistry())
	s.RegisterAPI(adm, tenants.APIOptions{
		ConnectedSpokes: func(m string) int { return spokes[m] },
		Usage:           func(string) map[string]float64 { return map[string]float64{"proxies": 12} },
	})
	srv := httptest.NewServer(adm.Handler())
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func TestMeshCommands(t *testing.T) {
	s, url := meshHub(t, map[string]int{"acme": 3})
	dir := t.TempDir()
	file := filepath.Join(dir, "acme.yaml")
	doc := "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: acme}\nspec:\n  trustDomain: acme.example\n  meshConfig: {rootNamespace: acme-system}\n"
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	hub := "--hub-admin=" + url

	if r := navectlRun(t, "mesh", "create", "-f", file, hub); r.code != 0 || !strings.Contains(r.stdout, "mesh acme created") {
		t.Fatalf("create -f: %+v", r)
	}
	if r := navectlRun(t, "mesh", "create", "beta", "--trust-domain", "beta.example", hub); r.code != 0 {
		t.Fatalf("create NAME: %+v", r)
	}
	r := navectlRun(t, "mesh", "create", "gamma", "--trust-domain", "acme.example", hub)
	if r.code != 1 || !strings.Contains(r.stderr, "spec.trustDomain: \"acme.example\" is mesh acme's") {
		t.Errorf("create with a taken trust domain: %+v", r)
	}
	r = navectlRun(t, "mesh", "list", hub)
	if r.code != 0 || !strings.Contains(r.stdout, "NAME") || !strings.Contains(r.stdout, "acme") || !strings.Contains(r.stdout, "beta.example") {
		t.Errorf("list: %+v", r)
	}
	r = navectlRun(t, "mesh", "get", "acme", hub)
	if r.code != 0 || !strings.Contains(r.stdout, "Connected spokes:  3") || !strings.Contains(r.stdout, "acme-system") ||
		!strings.Contains(r.stdout, `{"trustDomain":"acme.example","rootNamespace":"acme-system"}`) ||
		!regexp.MustCompile(`Usage proxies: +12\n`).MatchString(r.stdout) {
		t.Errorf("get: %+v", r)
	}
	r = navectlRun(t, "mesh", "get", "acme", "--spec", hub)
	if r.code != 0 || r.stdout != doc {
		t.Errorf("get --spec: %+v", r)
	}

	bad := strings.Replace(doc, "rootNamespace", "rootNamespase", 1)
	if r := navectlRunInput(t, bad, "mesh", "update", "-f", "-", hub); r.code != 1 || !strings.Contains(r.stderr, "spec.meshConfig.rootNamespase") {
		t.Errorf("update with a bad field: %+v", r)
	}
	if r := navectlRunInput(t, strings.Replace(doc, "acme-system", "acme-root", 1), "mesh", "update", "-f", "-", hub); r.code != 0 ||
		!strings.Contains(r.stdout, "generation 2") {
		t.Errorf("update: %+v", r)
	}

	r = navectlRun(t, "mesh", "delete", "acme", hub)
	if r.code != 1 || !strings.Contains(r.stderr, "3 connected spoke(s)") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("delete with connected spokes: %+v", r)
	}
	if !s.Registry().Hosted("acme") {
		t.Fatal("a refused delete deleted the mesh")
	}
	if r := navectlRun(t, "mesh", "delete", "acme", "--force", "--keep-ca", hub); r.code != 0 || !strings.Contains(r.stdout, "its CA is kept") {
		t.Errorf("delete --force: %+v", r)
	}
	if m, _ := s.Registry().Get("acme"); m == nil || m.Phase != tenants.Deleting || !m.KeepCA {
		t.Errorf("after delete: %+v", m)
	}
	if r := navectlRun(t, "mesh", "create", hub); r.code != 2 {
		t.Errorf("create without a spec: %+v", r)
	}
}
