package admission

import (
	"context"
	"sync/atomic"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/navemesh/nave/shared/meshconfig"
)

// ValidatePath is where the validation webhook is served, as
// deploy/spoke/webhook.yaml registers it.
const ValidatePath = "/validate"

// origin names an object decoded from a review in errors (never shown:
// denials are built from the error's fields).
const origin = "admission"

// notLoaded is the warning for a route to a subset while the spoke has
// not yet loaded the cluster's DestinationRules.
const notLoaded = "subsets not checked: the spoke has not loaded this cluster's DestinationRules yet"

// Validator is the validation webhook: it decodes the object of a CREATE
// or UPDATE with shared/meshconfig's decoder and validator — the ones the
// file source and the hub use — and denies an invalid object with the
// field and the reason; a valid object is admitted with
// meshconfig.Warnings against the cluster's DestinationRules (Update).
// Other operations are admitted unchecked. Safe for concurrent use.
type Validator struct {
	suffix string
	rules  atomic.Pointer[meshconfig.DestinationRules]
}

// NewValidator returns a Validator for a cluster whose domain suffix is
// suffix (short host names in config are completed with it).
func NewValidator(suffix string) *Validator { return &Validator{suffix: suffix} }

// Update gives the Validator the cluster's valid objects, as the spoke's
// source publishes them; only the DestinationRules are kept (indexed).
// Until the first Update, routes to subsets get a warning saying they
// were not checked.
func (v *Validator) Update(objs []*meshconfig.Object) {
	v.rules.Store(meshconfig.IndexDestinationRules(objs, v.suffix))
}

// Review answers one admission request.
func (v *Validator) Review(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return Allow()
	}
	if len(req.Object.Raw) == 0 {
		return Deny("the review of a "+string(req.Operation)+" holds no object", "", "")
	}
	objs, errs := meshconfig.DecodeYAML(req.Object.Raw, origin)
	if len(errs) > 0 {
		return denyObject(errs[0])
	}
	if len(objs) != 1 {
		return Deny("the review's object is not one config object", "", "")
	}
	o := objs[0]
	rules := v.rules.Load()
	if rules == nil && o.Kind.Kind == "VirtualService" {
		// Any subset would be reported as undefined: say that it was not
		// checked instead.
		if len(meshconfig.Warnings(o, meshconfig.IndexDestinationRules(nil, v.suffix))) > 0 {
			return Allow(notLoaded)
		}
		return Allow()
	}
	var warnings []string
	for _, w := range meshconfig.Warnings(o, rules) {
		warnings = append(warnings, w.String())
	}
	return Allow(warnings...)
}

// denyObject denies with the error the decoder or validator gave: kind,
// namespace/name, field and reason, without the origin.
func denyObject(err *meshconfig.ObjectError) *admissionv1.AdmissionResponse {
	e := *err
	e.Origin, e.Index = "", -1
	return Deny(e.Error(), e.Field, e.Reason)
}
