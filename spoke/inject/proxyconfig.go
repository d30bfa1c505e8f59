package inject

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/spoke/admission"
)

// AnnotationProxyConfig is Istio's per-pod ProxyConfig: it overrides the
// mesh's defaultConfig field by field (proxyMetadata entry by entry).
const AnnotationProxyConfig = "proxy.istio.io/config"

// proxySettings is the ProxyConfig a pod's agent runs with: the mesh's
// defaultConfig under the pod's annotation.
type proxySettings struct {
	// drain is terminationDrainDuration; set says whether either gave it
	// (unset leaves the agent's default, Istio's 5 s).
	drain    time.Duration
	drainSet bool
	// hold is holdApplicationUntilProxyStarts as given (nil: unset).
	hold *bool
	// metadata is proxyMetadata.
	metadata map[string]string
}

// parseProxyConfig reads the pod's proxy.istio.io/config: a ProxyConfig in
// YAML or JSON. A field ProxyConfig does not have, or a value of the wrong
// type, refuses the pod naming it (the decoder of meshconfig.ParseMeshConfig,
// strict as it is).
func parseProxyConfig(ann map[string]string) (*meshv1alpha1.ProxyConfig, *refusal) {
	v, ok := ann[AnnotationProxyConfig]
	if !ok || strings.TrimSpace(v) == "" {
		return nil, nil
	}
	js, err := yaml.YAMLToJSON([]byte(v))
	if err != nil {
		return nil, refuse(AnnotationProxyConfig, "not a ProxyConfig in YAML or JSON: %v", err)
	}
	if string(js) == "null" {
		return &meshv1alpha1.ProxyConfig{}, nil
	}
	if !strings.HasPrefix(strings.TrimSpace(string(js)), "{") {
		return nil, refuse(AnnotationProxyConfig, "not a ProxyConfig: want an object of its fields")
	}
	// The MeshConfig's strict decoder names the field at fault: the
	// annotation is decoded as the mesh's defaultConfig would be.
	cfg, err := meshconfig.ParseMeshConfig(append(append([]byte(`{"defaultConfig":`), js...), '}'))
	if err != nil {
		reason := strings.TrimPrefix(err.Error(), "meshConfig.defaultConfig")
		reason = strings.TrimPrefix(reason, ".")
		return nil, refuse(AnnotationProxyConfig, "not a ProxyConfig (istio.io/api mesh/v1alpha1): %s", admission.Clip(reason))
	}
	pc := cfg.GetDefaultConfig()
	if pc == nil {
		pc = &meshv1alpha1.ProxyConfig{}
	}
	return pc, nil
}

// resolveProxyConfig is the pod's ProxyConfig over the mesh's
// defaultConfig (either may be nil), with the warnings for the fields
// given that nothing applies.
func resolveProxyConfig(mesh, pod *meshv1alpha1.ProxyConfig) (proxySettings, []string, *refusal) {
	var ps proxySettings
	var warnings []string
	for _, layer := range []struct {
		pc   *meshv1alpha1.ProxyConfig
		from string
	}{{mesh, "the mesh's defaultConfig"}, {pod, "annotation " + AnnotationProxyConfig}} {
		pc := layer.pc
		if pc == nil {
			continue
		}
		if d := pc.GetTerminationDrainDuration(); d != nil {
			if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
				if layer.pc == pod {
					return ps, nil, refuse(AnnotationProxyConfig, "terminationDrainDuration %s is not a duration of 0 or more", d.AsDuration())
				}
				warnings = append(warnings, fmt.Sprintf("%s: terminationDrainDuration %s is not a duration of 0 or more: ignored", layer.from, d.AsDuration()))
			} else {
				ps.drain, ps.drainSet = d.AsDuration(), true
			}
		}
		if h := pc.GetHoldApplicationUntilProxyStarts(); h != nil {
			ps.hold = new(bool)
			*ps.hold = h.GetValue()
		}
		for k, v := range pc.GetProxyMetadata() {
			if err := meshconfig.CheckProxyMetadataName(k); err != nil {
				if layer.pc == pod {
					return ps, nil, refuse(AnnotationProxyConfig, "proxyMetadata %q: %v", admission.Clip(k), err)
				}
				warnings = append(warnings, fmt.Sprintf("%s: proxyMetadata %q: %v: ignored", layer.from, k, err))
				continue
			}
			if ps.metadata == nil {
				ps.metadata = map[string]string{}
			}
			ps.metadata[k] = v
		}
		for _, f := range meshconfig.UnappliedProxyConfigFields(pc) {
			warnings = append(warnings, fmt.Sprintf("%s: ProxyConfig field %s is ignored: nave applies only %s (docs/injection.md)",
				layer.from, f, strings.Join(meshconfig.ProxyConfigFields, ", ")))
		}
	}
	if ps.hold != nil && !*ps.hold {
		warnings = append(warnings, "holdApplicationUntilProxyStarts false has no effect: the agent is a native sidecar whose startup probe "+
			"holds the app containers until it is ready (docs/injection.md)")
	}
	return ps, warnings, nil
}

// metadataJSON is proxyMetadata as the agent's proxyMetadata key.
func (ps proxySettings) metadataJSON() string {
	if len(ps.metadata) == 0 {
		return ""
	}
	b, _ := json.Marshal(ps.metadata) // a map of strings always encodes
	return string(b)
}

// metadataNames are proxyMetadata's names, sorted.
func (ps proxySettings) metadataNames() []string {
	return slices.Sorted(maps.Keys(ps.metadata))
}
