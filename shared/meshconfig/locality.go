package meshconfig

import "strings"

// LocalityLabel is Istio's workload label that states a workload's
// locality as region.zone.subzone (dots: a label value cannot hold
// slashes). It wins over the node's topology labels.
const LocalityLabel = "istio-locality"

// ParseLocalityLabel reads an istio-locality label value
// ("region.zone.subzone", trailing parts optional; a fourth dot stays in
// the subzone).
func ParseLocalityLabel(v string) (region, zone, subzone string) {
	region, rest, _ := strings.Cut(v, ".")
	zone, subzone, _ = strings.Cut(rest, ".")
	return region, zone, subzone
}
