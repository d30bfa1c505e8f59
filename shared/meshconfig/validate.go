package meshconfig

import (
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/types/known/durationpb"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"

	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/shared/typeurl"
)

// Validate checks an object against a practical subset of Istio's own
// rules (and nave's, for registry kinds). It returns nil or an
// *ObjectError whose Field is the path of the first offending field, like
// spec.http[0].route[1].weight, with Origin set to the object's and Index -1.
func Validate(o *Object) error {
	if err := validate(o); err != nil {
		return err
	}
	return nil
}

// validate is Validate with a concrete result, so that a nil result is a
// nil error.
func validate(o *Object) *ObjectError {
	oerr := &ObjectError{Origin: o.Origin, Index: -1, Namespace: o.Namespace, Name: o.Name}
	if o.Kind == nil {
		oerr.Field, oerr.Reason = "kind", "kind is missing"
		return oerr
	}
	oerr.Kind = o.Kind.Kind
	var c checker
	validateMetadata(&c, o)
	if c.err == nil {
		validateSpec(&c, o)
	}
	if c.err == nil {
		return nil
	}
	oerr.Field, oerr.Reason = c.err.field, c.err.reason
	oerr.bound()
	return oerr
}

func validateMetadata(c *checker, o *Object) {
	if reason := dns1123Subdomain(o.Name); reason != "" {
		c.fail("metadata.name", "name %s", reason)
	}
	if reason := dns1123Label(o.Namespace); reason != "" {
		c.fail("metadata.namespace", "namespace %s", reason)
	}
	checkLabels(c, "metadata.labels", o.Labels)
	for _, k := range sortedMapKeys(o.Annotations) {
		if reason := qualifiedName(k); reason != "" {
			c.fail(path("metadata.annotations").key(k), "%s", reason)
		}
	}
}

func validateSpec(c *checker, o *Object) {
	if o.Spec == nil {
		c.fail("spec", "spec is missing")
		return
	}
	if got := typeurl.Of(o.Spec); got != o.Kind.TypeURL {
		c.fail("spec", "spec is a %s, want %s", got, o.Kind.TypeURL)
		return
	}
	p := path("spec")
	switch s := o.Spec.(type) {
	case *networkingv1alpha3.VirtualService:
		validateVirtualService(c, p, s)
	case *networkingv1alpha3.DestinationRule:
		validateDestinationRule(c, p, s)
	case *networkingv1alpha3.Gateway:
		validateGateway(c, p, s)
	case *networkingv1alpha3.ServiceEntry:
		validateServiceEntry(c, p, s)
	case *networkingv1alpha3.WorkloadEntry:
		validateWorkloadEntry(c, p, s, true)
	case *networkingv1alpha3.WorkloadGroup:
		validateWorkloadGroup(c, p, s)
	case *networkingv1alpha3.Sidecar:
		validateSidecar(c, p, s)
	case *networkingv1alpha3.EnvoyFilter:
		validateEnvoyFilter(c, p, s)
	case *securityv1beta1.PeerAuthentication:
		validatePeerAuthentication(c, p, s)
	case *securityv1beta1.RequestAuthentication:
		validateRequestAuthentication(c, p, s)
	case *securityv1beta1.AuthorizationPolicy:
		validateAuthorizationPolicy(c, p, s)
	case *telemetryv1alpha1.Telemetry:
		validateTelemetry(c, p, s)
	case *meshconfigv1.Service:
		validateRegistryService(c, p, s)
	case *meshconfigv1.Workload:
		validateRegistryWorkload(c, p, s)
	default:
		if o.Kind.GatewayAPI {
			validateGatewayAPI(c, p, o)
			return
		}
		c.fail("spec", "no validation for %s", o.Kind.TypeURL)
	}
}

// checker keeps the first failure of a validation; later ones are
// dropped, so validators need not return early (they must still be
// nil-safe, which generated getters are).
type checker struct{ err *fieldError }

type fieldError struct{ field, reason string }

func (c *checker) fail(p path, format string, args ...any) {
	if c.err == nil {
		c.err = &fieldError{field: string(p), reason: fmt.Sprintf(format, args...)}
	}
}

// path is a field path: spec.http[0].match[1].headers[x-user].
type path string

func (p path) field(name string) path { return p + "." + path(name) }
func (p path) index(i int) path       { return p + "[" + path(strconv.Itoa(i)) + "]" }
func (p path) key(k string) path      { return p + "[" + path(k) + "]" }

func checkLabels(c *checker, p path, labels map[string]string) {
	for _, k := range sortedMapKeys(labels) {
		if reason := qualifiedName(k); reason != "" {
			c.fail(p.key(k), "label %s", reason)
		}
		if reason := labelValue(labels[k]); reason != "" {
			c.fail(p.key(k), "label value %s", reason)
		}
	}
}

func checkPort(c *checker, p path, n uint32) {
	if n < 1 || n > 65535 {
		c.fail(p, "port %d is out of range 1-65535", n)
	}
}

// checkDuration checks a duration that must be at least 1ms when set.
func checkDuration(c *checker, p path, d *durationpb.Duration) {
	if d == nil {
		return
	}
	if err := d.CheckValid(); err != nil {
		c.fail(p, "invalid duration: %v", err)
		return
	}
	if v := d.AsDuration(); v < minDuration {
		c.fail(p, "duration %s is shorter than %s", v, minDuration)
	}
}

func checkPercent(c *checker, p path, v float64) {
	if !(v >= 0 && v <= 100) {
		c.fail(p, "percentage %v is out of range 0-100", v)
	}
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
