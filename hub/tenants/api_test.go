package tenants_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/tenants"
	"github.com/navemesh/nave/shared/admin"
)

// apiHub serves the meshes API of a Service on a dir store, on an
// operator handler whose scope is the request's X-Scope header
// ("vendor" or a mesh), and on the plain admin handler.
func apiHub(t *testing.T, spokes map[string]int) (s *tenants.Service, operator, plain *httptest.Server) {
	store, err := tenants.OpenStore(ca.StoreDir, t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	s = newService(t, store, tenants.Options{Seeds: []tenants.Seed{{Name: "default", TrustDomain: "cluster.local"}}})
	adm := admin.New(slog.New(slog.DiscardHandler), admin.NewRegistry())
	s.RegisterAPI(adm, tenants.APIOptions{ConnectedSpokes: func(mesh string) int { return spokes[mesh] }})
	operator = httptest.NewServer(adm.OperatorHandler(func(r *http.Request) (admin.Scope, error) {
		switch sc := r.Header.Get("X-Scope"); sc {
		case "":
			return admin.Scope{}, errors.New("no certificate")
		case "vendor":
			return admin.Scope{Operator: "v", Vendor: true}, nil
		default:
			return admin.Scope{Operator: "t", Mesh: sc}, nil
		}
	}))
	plain = httptest.NewServer(adm.Handler())
	t.Cleanup(operator.Close)
	t.Cleanup(plain.Close)
	return s, operator, plain
}

func call(t *testing.T, srv *httptest.Server, scope, method, path string, body []byte, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if scope != "" {
		req.Header.Set("X-Scope", scope)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

func TestAPI(t *testing.T) {
	spokes := map[string]int{"acme": 2}
	s, op, plain := apiHub(t, spokes)

	var v tenants.View
	if code := call(t, op, "vendor", "POST", tenants.APIPath, []byte(acmeSpec), &v); code != http.StatusCreated ||
		v.Name != "acme" || v.Generation != 1 || v.Spec != acmeSpec || !strings.Contains(string(v.MeshConfig), "acme-system") {
		t.Fatalf("create: %d %+v", code, v)
	}
	var e tenants.APIError
	if code := call(t, op, "vendor", "POST", tenants.APIPath, spec("bad", "acme.example"), &e); code != http.StatusBadRequest ||
		e.Field != "spec.trustDomain" {
		t.Errorf("create with a taken trust domain: %d %+v", code, e)
	}
	if code := call(t, op, "vendor", "POST", tenants.APIPath, []byte(acmeSpec), &e); code != http.StatusConflict {
		t.Errorf("create again: %d %+v", code, e)
	}

	// A tenant's operator sees only its mesh and changes nothing.
	var list []tenants.View
	if code := call(t, op, "acme", "GET", tenants.APIPath, nil, &list); code != http.StatusOK || len(list) != 1 || list[0].Name != "acme" ||
		list[0].ConnectedSpokes != 2 {
		t.Errorf("tenant list: %d %+v", code, list)
	}
	if code := call(t, op, "acme", "GET", tenants.APIPath+"/default", nil, &e); code != http.StatusNotFound {
		t.Errorf("tenant reading another mesh: %d %+v", code, e)
	}
	for _, m := range []struct{ method, path string }{{"POST", tenants.APIPath}, {"PUT", tenants.APIPath + "/acme"}, {"DELETE", tenants.APIPath + "/acme"}} {
		if code := call(t, op, "acme", m.method, m.path, []byte(acmeSpec), &e); code != http.StatusForbidden {
			t.Errorf("tenant %s %s: %d %+v", m.method, m.path, code, e)
		}
	}
	if code := call(t, op, "", "GET", tenants.APIPath, nil, nil); code != http.StatusUnauthorized {
		t.Errorf("unauthenticated: %d", code)
	}
	// Without operator authentication (a hub with no operator listener)
	// the admin listener serves everything.
	if code := call(t, plain, "", "GET", tenants.APIPath, nil, &list); code != http.StatusOK || len(list) != 2 {
		t.Errorf("plain list: %d %+v", code, list)
	}

	updated := strings.Replace(acmeSpec, "acme-system", "acme-root", 1)
	if code := call(t, op, "vendor", "PUT", tenants.APIPath+"/acme", []byte(updated), &v); code != http.StatusOK || v.Generation != 2 {
		t.Errorf("update: %d %+v", code, v)
	}
	bad := strings.Replace(acmeSpec, "rootNamespace", "rootNamespaec", 1)
	if code := call(t, op, "vendor", "PUT", tenants.APIPath+"/acme", []byte(bad), &e); code != http.StatusBadRequest ||
		e.Field != "spec.meshConfig.rootNamespaec" {
		t.Errorf("update with a bad MeshConfig: %d %+v", code, e)
	}
	if m, _ := s.Registry().Get("acme"); m.Generation != 2 || m.Config.GetRootNamespace() != "acme-root" {
		t.Errorf("after a refused update: %+v", m)
	}
	// meshNetworks: shown with the mesh; a bad one refused with its field.
	withNets := updated + "  meshNetworks: {networks: {net-b: {gateways: [{address: 192.0.2.9, port: 15443}]}}}\n"
	if code := call(t, op, "vendor", "PUT", tenants.APIPath+"/acme", []byte(withNets), &v); code != http.StatusOK ||
		!strings.Contains(string(v.MeshNetworks), "192.0.2.9") {
		t.Errorf("update with meshNetworks: %d %+v", code, v)
	}
	badNets := updated + "  meshNetworks: {networks: {net-b: {endpoints: [{fromCidr: 10.0.0.0/99}]}}}\n"
	if code := call(t, op, "vendor", "PUT", tenants.APIPath+"/acme", []byte(badNets), &e); code != http.StatusBadRequest ||
		e.Field != "spec.meshNetworks.networks[net-b].endpoints[0].fromCidr" {
		t.Errorf("update with a bad meshNetworks CIDR: %d %+v", code, e)
	}
	var without tenants.View
	if code := call(t, op, "vendor", "PUT", tenants.APIPath+"/acme", []byte(updated), &without); code != http.StatusOK || len(without.MeshNetworks) != 0 {
		t.Errorf("update without meshNetworks: %d, networks %s", code, without.MeshNetworks)
	}

	if code := call(t, op, "vendor", "DELETE", tenants.APIPath+"/acme", nil, &e); code != http.StatusConflict || e.ConnectedSpokes != 2 ||
		!strings.Contains(e.Error, "force") {
		t.Errorf("delete with connected spokes: %d %+v", code, e)
	}
	if code := call(t, op, "vendor", "DELETE", tenants.APIPath+"/acme?force=true&keepCA=true", nil, &v); code != http.StatusAccepted ||
		v.Phase != tenants.Deleting || !v.KeepCA {
		t.Errorf("forced delete: %d %+v", code, v)
	}
	if s.Registry().Hosted("acme") {
		t.Error("a deleted mesh is still hosted")
	}
	if code := call(t, op, "vendor", "DELETE", tenants.APIPath+"/nope", nil, &e); code != http.StatusNotFound {
		t.Errorf("delete of a missing mesh: %d %+v", code, e)
	}
}
