package meshconfig

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultDomainSuffix is the DNS suffix of a cluster's service hostnames
// (name.namespace.svc.<suffix>) unless its spoke says otherwise, as in
// Kubernetes and Istio.
const DefaultDomainSuffix = "cluster.local"

// CheckDomainSuffix checks that s can be a cluster's DNS suffix: a
// lowercase DNS subdomain.
func CheckDomainSuffix(s string) error {
	if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
		return fmt.Errorf("domain suffix %q is not a DNS subdomain: %s", s, strings.Join(errs, "; "))
	}
	return nil
}

// ResolveHost completes a short host name of config in namespace with a
// cluster's domain suffix ("reviews" in "shop" is
// reviews.shop.svc.<suffix>), as Istio does. Names with a dot or a
// wildcard are returned as they are.
func ResolveHost(host, namespace, suffix string) string {
	if host == "" || strings.Contains(host, ".") || strings.Contains(host, "*") {
		return host
	}
	return host + "." + namespace + ".svc." + suffix
}
