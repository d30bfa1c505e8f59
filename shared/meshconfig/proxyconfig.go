package meshconfig

import (
	"errors"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// ProxyConfigFields are the ProxyConfig fields (JSON names) nave applies,
// in the mesh's defaultConfig and a pod's proxy.istio.io/config: the
// injector and nave-agent read them.
var ProxyConfigFields = []string{"terminationDrainDuration", "holdApplicationUntilProxyStarts", "proxyMetadata"}

// UnappliedProxyConfigFields lists the fields pc sets that nave does not
// apply (not in ProxyConfigFields), sorted by JSON name.
func UnappliedProxyConfigFields(pc *meshv1alpha1.ProxyConfig) []string {
	if pc == nil {
		return nil
	}
	var out []string
	pc.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !slices.Contains(ProxyConfigFields, fd.JSONName()) {
			out = append(out, fd.JSONName())
		}
		return true
	})
	slices.Sort(out)
	return out
}

// ProxyMetadataPrefixReserved starts the environment variables of
// nave-agent's own configuration, which no proxyMetadata entry may set.
const ProxyMetadataPrefixReserved = "NAVE_"

// CheckProxyMetadataName says why name cannot be a proxyMetadata entry:
// each is an environment variable of the agent's container.
func CheckProxyMetadataName(name string) error {
	switch {
	case name == "":
		return errors.New("an empty name")
	case strings.ContainsAny(name, "= \t\r\n"):
		return errors.New("a name with '=' or white space is no environment variable")
	case strings.HasPrefix(name, ProxyMetadataPrefixReserved):
		return errors.New("names of nave-agent's own configuration (" + ProxyMetadataPrefixReserved + "*) are set by the injector")
	}
	return nil
}
