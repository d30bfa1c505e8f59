package meshconfig

import (
	"fmt"

	"google.golang.org/protobuf/proto"
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
	if err := parseMeshMessage(data, "meshConfig", cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseMeshMessage decodes the YAML of a mesh-wide Istio message into m
// strictly; errors name the field under top ("meshConfig.x: reason").
// An empty document leaves m empty.
func parseMeshMessage(data []byte, top string, m proto.Message) error {
	js, err := yamlToJSON(data)
	if err != nil {
		return fmt.Errorf("%s: invalid YAML: %v", top, err)
	}
	if len(js) == 0 || string(js) == "null" {
		return nil
	}
	if field, reason := decodeSpec(js, m); field != "" {
		return fmt.Errorf("%s: %s", top+field[len("spec"):], reason)
	}
	return nil
}
