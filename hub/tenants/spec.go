package tenants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/spiffeid"
)

// The declarative form of a mesh: one YAML document, the same in a file
// under state.dir/meshes, in a Secret's mesh.yaml and in `navectl mesh
// create -f`.
const (
	APIVersion = "nave.io/v1alpha1"
	Kind       = "Mesh"
)

// maxSpecSize bounds one spec document: the hub's status of a mesh holds
// a copy, and both fit in a Secret (1 MiB).
const maxSpecSize = 256 << 10

// Spec is what an operator says of a mesh: the declarative form, which a
// vendor may keep in git. A Spec is a plain value.
type Spec struct {
	Name        string
	TrustDomain string
	Limits      Limits
	// Config is the parsed and validated MeshConfig (never nil), with
	// trustDomain set to TrustDomain.
	Config *meshv1alpha1.MeshConfig
	// Networks is the parsed and validated MeshNetworks (never nil; no
	// networks when the document has none).
	Networks *meshv1alpha1.MeshNetworks
	// Raw is the document as given (what the store keeps).
	Raw []byte
}

// FieldError is a spec refused because of one field: Field is its path
// (spec.trustDomain, spec.meshConfig.rootNamespace), Reason why. A plain
// value.
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

var (
	topFields    = []string{"apiVersion", "kind", "metadata", "spec"}
	metaFields   = []string{"name", "labels", "annotations"}
	specFields   = []string{"trustDomain", "limits", "meshConfig", "meshNetworks"}
	limitsFields = []string{"objectsPerKind", "proxies", "spokes", "pushesPerSecond"}
)

// DecodeSpec decodes and validates one mesh document strictly: an unknown
// field, a value of the wrong type or a bad value is a *FieldError naming
// the field (metadata.name, spec.limits.proxies, spec.meshConfig.…). The
// MeshConfig is checked with meshconfig.ParseMeshConfig and
// ValidateMeshConfig, the MeshNetworks with ParseMeshNetworks and
// ValidateMeshNetworks. Trust-domain uniqueness across meshes is the
// Store's to check.
func DecodeSpec(data []byte) (*Spec, error) {
	if len(data) > maxSpecSize {
		return nil, fieldErr("", "mesh document of %d bytes: larger than %d", len(data), maxSpecSize)
	}
	if n := documents(data); n > 1 {
		return nil, fieldErr("", "%d YAML documents: one mesh per document", n)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fieldErr("", "invalid YAML: %v", err)
	}
	top, ferr := object(js, "", topFields)
	if ferr != nil {
		return nil, ferr
	}
	if top == nil {
		return nil, fieldErr("", "empty document: want apiVersion %s, kind %s, metadata.name and spec", APIVersion, Kind)
	}
	if v, ferr := str(top["apiVersion"], "apiVersion"); ferr != nil {
		return nil, ferr
	} else if v != APIVersion {
		return nil, fieldErr("apiVersion", "%q: want %s", v, APIVersion)
	}
	if v, ferr := str(top["kind"], "kind"); ferr != nil {
		return nil, ferr
	} else if v != Kind {
		return nil, fieldErr("kind", "%q: want %s", v, Kind)
	}
	meta, ferr := object(top["metadata"], "metadata", metaFields)
	if ferr != nil {
		return nil, ferr
	}
	s := &Spec{Raw: bytes.Clone(data)}
	if s.Name, ferr = str(meta["name"], "metadata.name"); ferr != nil {
		return nil, ferr
	}
	if err := ValidateName(s.Name); err != nil {
		return nil, fieldErr("metadata.name", "%v", err)
	}
	spec, ferr := object(top["spec"], "spec", specFields)
	if ferr != nil {
		return nil, ferr
	}
	if raw, ok := spec["trustDomain"]; ok {
		if s.TrustDomain, ferr = str(raw, "spec.trustDomain"); ferr != nil {
			return nil, ferr
		}
	}
	if s.Limits, ferr = decodeLimits(spec["limits"]); ferr != nil {
		return nil, ferr
	}
	if s.Config, ferr = decodeMeshField(spec, "meshConfig", "Istio's MeshConfig", &meshv1alpha1.MeshConfig{},
		meshconfig.ParseMeshConfig, meshconfig.ValidateMeshConfig); ferr != nil {
		return nil, ferr
	}
	if s.Networks, ferr = decodeMeshField(spec, "meshNetworks", "Istio's MeshNetworks: networks: {NAME: {endpoints, gateways}}", &meshv1alpha1.MeshNetworks{},
		meshconfig.ParseMeshNetworks, meshconfig.ValidateMeshNetworks); ferr != nil {
		return nil, ferr
	}
	switch {
	case s.TrustDomain == "" && s.Config.GetTrustDomain() == "":
		return nil, fieldErr("spec.trustDomain", "required (the mesh's SPIFFE trust domain, which no other mesh has)")
	case s.TrustDomain == "":
		s.TrustDomain = s.Config.GetTrustDomain()
	case s.Config.GetTrustDomain() != "" && s.Config.GetTrustDomain() != s.TrustDomain:
		return nil, fieldErr("spec.meshConfig.trustDomain", "%q differs from spec.trustDomain %q (give one, or both the same)",
			s.Config.GetTrustDomain(), s.TrustDomain)
	}
	if err := spiffeid.ValidateTrustDomain(s.TrustDomain); err != nil {
		return nil, fieldErr("spec.trustDomain", "%v", err)
	}
	for i, a := range s.Config.GetTrustDomainAliases() {
		if err := spiffeid.ValidateTrustDomain(a); err != nil {
			return nil, fieldErr(fmt.Sprintf("spec.meshConfig.trustDomainAliases[%d]", i), "%v", err)
		}
		if a == s.TrustDomain {
			return nil, fieldErr(fmt.Sprintf("spec.meshConfig.trustDomainAliases[%d]", i), "%q is the mesh's own trust domain", a)
		}
	}
	s.Config.TrustDomain = s.TrustDomain
	return s, nil
}

// documents counts the YAML documents of data that hold something other
// than blanks and comments.
func documents(data []byte) int {
	n, content := 0, false
	for line := range bytes.Lines(data) {
		line = bytes.TrimRight(line, "\r\n")
		if bytes.Equal(line, []byte("---")) || bytes.HasPrefix(line, []byte("--- ")) {
			if content {
				n++
			}
			content = false
			line = bytes.TrimPrefix(line, []byte("---"))
		}
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			content = true
		}
	}
	if content {
		n++
	}
	return n
}

// decodeMeshField decodes spec.<top>, an Istio mesh-wide message (what
// says which), with parse and validate; absent or null, it is empty.
func decodeMeshField[M any](spec map[string]json.RawMessage, top, what string, empty M,
	parse func([]byte) (M, error), validate func(M) error) (M, *FieldError) {
	raw, ok := spec[top]
	if !ok || string(raw) == "null" {
		return empty, nil
	}
	if raw[0] != '{' {
		return empty, fieldErr("spec."+top, "want a mapping (%s)", what)
	}
	m, err := parse(raw)
	if err != nil {
		return empty, meshConfigErr(err, top)
	}
	if err := validate(m); err != nil {
		return empty, meshConfigErr(err, top)
	}
	return m, nil
}

// meshConfigErr makes a FieldError of an error of shared/meshconfig,
// which starts with the field's path ("meshConfig.x: reason",
// "meshNetworks.networks[n].x: reason"; top is "meshConfig" or
// "meshNetworks"): the field goes under spec.
func meshConfigErr(err error, top string) *FieldError {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, top); ok {
		if path, reason, ok := strings.Cut(rest, ": "); ok && !strings.Contains(path, " ") {
			return &FieldError{Field: "spec." + top + path, Reason: reason}
		}
	}
	return &FieldError{Field: "spec." + top, Reason: msg}
}

func decodeLimits(raw json.RawMessage) (Limits, *FieldError) {
	m, ferr := object(raw, "spec.limits", limitsFields)
	if ferr != nil {
		return Limits{}, ferr
	}
	var l Limits
	for _, f := range []struct {
		name string
		dst  *int
	}{{"objectsPerKind", &l.ObjectsPerKind}, {"proxies", &l.Proxies}, {"spokes", &l.Spokes}} {
		raw, ok := m[f.name]
		if !ok {
			continue
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil {
			return Limits{}, fieldErr("spec.limits."+f.name, "want a number, got %s", jsonType(raw))
		}
		if v < 0 || v != math.Trunc(v) || v > math.MaxInt32 {
			return Limits{}, fieldErr("spec.limits."+f.name, "%v: want a whole number from 0 (the hub's default) to %d", v, math.MaxInt32)
		}
		*f.dst = int(v)
	}
	if raw, ok := m["pushesPerSecond"]; ok {
		if err := json.Unmarshal(raw, &l.PushesPerSecond); err != nil {
			return Limits{}, fieldErr("spec.limits.pushesPerSecond", "want a number, got %s", jsonType(raw))
		}
		if l.PushesPerSecond < 0 || math.IsInf(l.PushesPerSecond, 0) || math.IsNaN(l.PushesPerSecond) {
			return Limits{}, fieldErr("spec.limits.pushesPerSecond", "%v: want 0 (the hub's default) or more", l.PushesPerSecond)
		}
	}
	return l, nil
}

// object decodes raw as a JSON object whose keys are among allowed; a
// missing or null raw is an empty object.
func object(raw json.RawMessage, path string, allowed []string) (map[string]json.RawMessage, *FieldError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		where := path
		if where == "" {
			where = "document"
		}
		return nil, fieldErr(path, "want a mapping, got %s (in %s)", jsonType(raw), where)
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fieldErr(join(path, unknown[0]), "unknown field (known: %s)", strings.Join(allowed, ", "))
	}
	return m, nil
}

func str(raw json.RawMessage, path string) (string, *FieldError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", fieldErr(path, "required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fieldErr(path, "want a string, got %s", jsonType(raw))
	}
	return s, nil
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func jsonType(raw json.RawMessage) string {
	switch {
	case len(raw) == 0:
		return "nothing"
	case raw[0] == '{':
		return "a mapping"
	case raw[0] == '[':
		return "a list"
	case raw[0] == '"':
		return "a string"
	case raw[0] == 't' || raw[0] == 'f':
		return "a boolean"
	case raw[0] == 'n':
		return "null"
	}
	return "a number"
}

// ValidateName checks a mesh name: a DNS label (it is part of SPIFFE
// IDs, file and Secret names).
func ValidateName(name string) error {
	if name == "" {
		return errors.New("mesh name is empty")
	}
	if err := spiffeid.ValidateName(name); err != nil {
		return fmt.Errorf("mesh name %q: %w", name, err)
	}
	return nil
}

// EncodeSpec writes the declarative document of a mesh: what DecodeSpec
// reads back. Only the fields set are written.
func EncodeSpec(name, trustDomain string, limits Limits, meshConfigYAML []byte) ([]byte, error) {
	spec := map[string]any{"trustDomain": trustDomain}
	if limits != (Limits{}) {
		spec["limits"] = limits
	}
	if len(bytes.TrimSpace(meshConfigYAML)) > 0 {
		var mc any
		if err := yaml.Unmarshal(meshConfigYAML, &mc); err != nil {
			return nil, fieldErr("spec.meshConfig", "invalid YAML: %v", err)
		}
		if mc != nil {
			spec["meshConfig"] = mc
		}
	}
	return yaml.Marshal(map[string]any{
		"apiVersion": APIVersion,
		"kind":       Kind,
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	})
}
