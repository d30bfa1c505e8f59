package meshconfig

import (
	"fmt"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// ParseMeshConfig decodes an Istio MeshConfig (istio.io/api
// mesh/v1alpha1, the YAML of Istio's `mesh` ConfigMap key or of
// `meshConfig` in an IstioOperator) strictly: an unknown field or a value
// of the wrong type is an error naming the field (meshConfig.…). An empty
// document is an empty MeshConfig, which means Istio's defaults. It does
// not validate semantics: ValidateMeshConfig does.
func ParseMeshConfig(data []byte) (*meshv1alpha1.MeshConfig, error) {
	cfg := &meshv1alpha1.MeshConfig{}
	js, err := yamlToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("meshConfig: invalid YAML: %v", err)
	}
	if len(js) == 0 || string(js) == "null" {
		return cfg, nil
	}
	if field, reason := decodeSpec(js, cfg); field != "" {
		return nil, fmt.Errorf("%s: %s", "meshConfig"+field[len("spec"):], reason)
	}
	return cfg, nil
}
