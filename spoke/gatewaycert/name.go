package gatewaycert

import (
	"fmt"
	"strings"

	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// The forms of a credentialName (Istio's, pilot/pkg/model/credentials).
const (
	// kubernetesPrefix names a Secret in the gateway's namespace:
	// kubernetes://NAME (or kubernetes://NS/NAME, which Istio accepts only
	// for NS the gateway's namespace). A bare NAME means the same.
	kubernetesPrefix = "kubernetes://"
	// gatewayPrefix is a Gateway API certificateRef:
	// kubernetes-gateway://NS/NAME, allowed across namespaces by a
	// ReferenceGrant in NS.
	gatewayPrefix = "kubernetes-gateway://"
)

// Ref is one requested SDS name resolved to the Secret it reads. Its
// fields are plain values.
type Ref struct {
	// Resource is the SDS name as requested (the secret's name in the
	// answer).
	Resource string
	// Namespace and Name are the Secret's.
	Namespace, Name string
	// GatewayAPI is the kubernetes-gateway:// form.
	GatewayAPI bool
	// CAOnly: the name ends in "-cacert", the CA bundle that validates a
	// MUTUAL server's clients: the Secret NAME-cacert, or, when it does
	// not exist, the CA keys of the Secret NAME (Istio's convention).
	CAOnly bool
}

// Key is the Secret's namespace/name.
func (r Ref) Key() string { return r.Namespace + "/" + r.Name }

// caFallback is the Secret whose CA keys a CAOnly ref reads when its own
// Secret does not exist.
func (r Ref) caFallback() string {
	return r.Namespace + "/" + strings.TrimSuffix(r.Name, xdsbootstrap.CACertSuffix)
}

// ParseName resolves an SDS name requested by a workload of namespace
// own. Names with another scheme, or without a namespace where one is
// required, are an error.
func ParseName(resource, own string) (Ref, error) {
	r := Ref{Resource: resource, Namespace: own}
	rest := resource
	switch {
	case strings.HasPrefix(resource, gatewayPrefix):
		r.GatewayAPI = true
		ns, name, ok := strings.Cut(strings.TrimPrefix(resource, gatewayPrefix), "/")
		if !ok || ns == "" || name == "" {
			return Ref{}, fmt.Errorf("%q: a kubernetes-gateway:// name is kubernetes-gateway://NAMESPACE/NAME", resource)
		}
		r.Namespace, rest = ns, name
	case strings.HasPrefix(resource, kubernetesPrefix):
		rest = strings.TrimPrefix(resource, kubernetesPrefix)
		if ns, name, ok := strings.Cut(rest, "/"); ok {
			r.Namespace, rest = ns, name
		}
	case strings.Contains(resource, "://"):
		return Ref{}, fmt.Errorf("%q: not a Kubernetes Secret name (NAME, kubernetes://NAME or kubernetes-gateway://NAMESPACE/NAME)", resource)
	}
	if r.Namespace == "" || rest == "" || strings.Contains(rest, "/") {
		return Ref{}, fmt.Errorf("%q: not a Secret's name", resource)
	}
	r.Name = rest
	r.CAOnly = strings.HasSuffix(rest, xdsbootstrap.CACertSuffix)
	return r, nil
}
