package tenants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/navemesh/nave/shared/admin"
)

// APIPath is where the operator API serves the meshes.
const APIPath = "/api/v1/meshes"

// View is a mesh as the operator API shows it. A plain value.
type View struct {
	Name        string    `json:"name"`
	UID         string    `json:"uid"`
	Generation  int64     `json:"generation"`
	Created     time.Time `json:"created"`
	TrustDomain string    `json:"trustDomain"`
	Phase       Phase     `json:"phase"`
	KeepCA      bool      `json:"keepCA,omitempty"`
	// Limits are the limits in force: the spec's, defaults filled in.
	Limits Limits `json:"limits"`
	// MeshConfig is the mesh's Istio MeshConfig (proto JSON).
	MeshConfig json.RawMessage `json:"meshConfig,omitempty"`
	// MeshNetworks is the mesh's Istio MeshNetworks (proto JSON), if it
	// has networks.
	MeshNetworks json.RawMessage `json:"meshNetworks,omitempty"`
	// ConnectedSpokes counts the spokes connected to the replica that
	// answered.
	ConnectedSpokes int `json:"connectedSpokes"`
	// Usage is what the hub reports of the mesh against its limits
	// (APIOptions.Usage): e.g. proxies, spokes, objects of the largest
	// kind, pushes per second now.
	Usage map[string]float64 `json:"usage,omitempty"`
	// Spec is the mesh's spec document as stored (for get, update -f).
	Spec string `json:"spec,omitempty"`
}

// APIError is the body of a refusal: Error says why; Field names the
// spec field at fault, if one is; ConnectedSpokes is set on a delete
// refused because spokes are connected. A plain value.
type APIError struct {
	Error           string `json:"error"`
	Field           string `json:"field,omitempty"`
	ConnectedSpokes int    `json:"connectedSpokes,omitempty"`
}

// APIOptions are what the operator API asks the hub. Nil funcs count
// nothing; the funcs are called from concurrent requests.
type APIOptions struct {
	// ConnectedSpokes counts the spokes of mesh connected to this
	// replica: a delete with some is refused without force.
	ConnectedSpokes func(mesh string) int
	// Usage reports the mesh's use of its limits (its per-mesh metrics,
	// by name), for get.
	Usage func(mesh string) map[string]float64
}

// maxBodySize bounds a request's spec document.
const maxBodySize = maxSpecSize

// RegisterAPI serves the operator API of the meshes on adm (its operator
// listener, else its admin listener):
//
//	GET    /api/v1/meshes          every mesh the operator may see
//	POST   /api/v1/meshes          create (body: the spec document, YAML or JSON)
//	GET    /api/v1/meshes/{name}   one mesh, with its spec
//	PUT    /api/v1/meshes/{name}   update (body: the spec document)
//	DELETE /api/v1/meshes/{name}?keepCA=true&force=true
//
// A tenant's operator (a mesh-scoped certificate) sees only its mesh and
// changes nothing; the vendor's operators (and callers on a listener
// without operator authentication) see and change every mesh.
func (s *Service) RegisterAPI(adm *admin.Server, opts APIOptions) {
	h := &api{s: s, opts: opts}
	adm.HandleAPI("GET "+APIPath, http.HandlerFunc(h.list))
	adm.HandleAPI("POST "+APIPath, http.HandlerFunc(h.create))
	adm.HandleAPI("GET "+APIPath+"/{name}", http.HandlerFunc(h.get))
	adm.HandleAPI("PUT "+APIPath+"/{name}", http.HandlerFunc(h.update))
	adm.HandleAPI("DELETE "+APIPath+"/{name}", http.HandlerFunc(h.delete))
}

type api struct {
	s    *Service
	opts APIOptions
}

func (a *api) view(ctx context.Context, m *Mesh, withSpec bool) View {
	v := View{Name: m.Name, UID: m.UID, Generation: m.Generation, Created: m.Created, TrustDomain: m.TrustDomain,
		Phase: m.Phase, KeepCA: m.KeepCA, Limits: m.Limits}
	if m.Config != nil {
		if b, err := protojson.Marshal(m.Config); err == nil {
			v.MeshConfig = b
		}
	}
	if len(m.Networks.GetNetworks()) > 0 {
		if b, err := protojson.Marshal(m.Networks); err == nil {
			v.MeshNetworks = b
		}
	}
	if a.opts.ConnectedSpokes != nil {
		v.ConnectedSpokes = a.opts.ConnectedSpokes(m.Name)
	}
	if withSpec {
		if a.opts.Usage != nil {
			v.Usage = a.opts.Usage(m.Name)
		}
		if b, err := a.s.store.b.get(ctx, kindSpec, m.Name); err == nil {
			v.Spec = string(b.data)
		}
	}
	return v
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	out := []View{}
	for _, m := range a.s.registry.List() {
		if admin.Visible(r, m.Name) {
			out = append(out, a.view(r.Context(), m, false))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	m, ok := a.s.registry.Get(name)
	if !ok || !admin.Visible(r, name) {
		// A tenant learns nothing of another mesh, not even that it exists.
		writeJSON(w, http.StatusNotFound, APIError{Error: fmt.Sprintf("mesh %s: %v", name, ErrNotFound)})
		return
	}
	writeJSON(w, http.StatusOK, a.view(r.Context(), m, true))
}

// vendor refuses a mutation by a tenant's operator.
func vendor(w http.ResponseWriter, r *http.Request) bool {
	if sc, ok := admin.ScopeOf(r); ok && !sc.Vendor {
		writeJSON(w, http.StatusForbidden, APIError{Error: "creating, updating and deleting meshes is for the vendor's operators only"})
		return false
	}
	return true
}

func (a *api) create(w http.ResponseWriter, r *http.Request) {
	if !vendor(w, r) {
		return
	}
	doc, ok := readBody(w, r)
	if !ok {
		return
	}
	m, err := a.s.Create(r.Context(), doc)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, a.view(r.Context(), m, true))
}

func (a *api) update(w http.ResponseWriter, r *http.Request) {
	if !vendor(w, r) {
		return
	}
	doc, ok := readBody(w, r)
	if !ok {
		return
	}
	m, err := a.s.Update(r.Context(), r.PathValue("name"), doc)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a.view(r.Context(), m, true))
}

func (a *api) delete(w http.ResponseWriter, r *http.Request) {
	if !vendor(w, r) {
		return
	}
	name := r.PathValue("name")
	q := r.URL.Query()
	keepCA, err1 := boolParam(q.Get("keepCA"))
	force, err2 := boolParam(q.Get("force"))
	if err := errors.Join(err1, err2); err != nil {
		writeJSON(w, http.StatusBadRequest, APIError{Error: err.Error()})
		return
	}
	if _, ok := a.s.registry.Get(name); !ok {
		// Perhaps recorded by another replica a moment ago.
		a.s.refreshNow(r.Context())
	}
	if m, ok := a.s.registry.Get(name); ok && m.Phase == Active && !force && a.opts.ConnectedSpokes != nil {
		if n := a.opts.ConnectedSpokes(name); n > 0 {
			writeJSON(w, http.StatusConflict, APIError{
				Error:           fmt.Sprintf("mesh %s has %d connected spoke(s) (on this replica): deleting it disconnects them; give force to delete it anyway", name, n),
				ConnectedSpokes: n,
			})
			return
		}
	}
	m, err := a.s.Delete(r.Context(), name, keepCA)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, a.view(r.Context(), m, false))
}

func boolParam(v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%q: want true or false", v)
	}
	return b, nil
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	doc, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodySize))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, APIError{Error: "reading the spec: " + err.Error()})
		return nil, false
	}
	return doc, true
}

// writeErr answers a failed mutation: a bad spec names its field.
func writeErr(w http.ResponseWriter, err error) {
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		writeJSON(w, http.StatusBadRequest, APIError{Error: err.Error(), Field: fe.Field})
	case errors.Is(err, ErrExists), errors.Is(err, ErrDeleting), errors.Is(err, ErrConflict):
		writeJSON(w, http.StatusConflict, APIError{Error: err.Error()})
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, APIError{Error: err.Error()})
	default:
		writeJSON(w, http.StatusInternalServerError, APIError{Error: err.Error()})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
