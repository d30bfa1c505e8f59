package meshconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	sigsjson "sigs.k8s.io/json"
)

// GatewayController is nave's Gateway API controller name: a
// GatewayClass whose spec.controllerName it is belongs to nave, and a
// route's parent statuses nave writes carry it.
const GatewayController = "nave.io/gateway-controller"

// GatewayNameLabel is the label of a Gateway's pods (Istio's, and the
// Gateway API's for deployed gateways): its value is the Gateway's name.
const GatewayNameLabel = "gateway.networking.k8s.io/gateway-name"

// The Gateway API kinds keep their spec as the Gateway API project's Go
// type, serialized as canonical JSON in a one-field wrapper message (see
// shared/meshconfig/v1/gatewayapi.proto). These functions move a spec in
// and out of its wrapper.

// decodeGatewayAPISpec decodes a document's spec into the Gateway API Go
// type of kind k, strictly (an unknown or duplicate field is an error,
// field names are case-sensitive), and stores its canonical JSON in spec,
// the kind's wrapper message.
func decodeGatewayAPISpec(k *Kind, raw json.RawMessage, spec proto.Message) (field, reason string) {
	goSpec := k.newGo()
	strict, err := sigsjson.UnmarshalStrict(raw, goSpec)
	if err != nil {
		var fe sigsjson.FieldError
		if errors.As(err, &fe) && fe.FieldPath() != "" {
			return "spec." + fe.FieldPath(), cleanJSONError(err)
		}
		return "spec", cleanJSONError(err)
	}
	if len(strict) > 0 {
		var fe sigsjson.FieldError
		if errors.As(strict[0], &fe) && fe.FieldPath() != "" {
			// The message quotes the whole path; the field says it already.
			path := fe.FieldPath()
			fe.SetFieldPath(path[strings.LastIndexAny(path, ".]")+1:])
			return "spec." + path, cleanJSONError(strict[0])
		}
		return "spec", cleanJSONError(strict[0])
	}
	if err := setGatewayAPISpec(spec, goSpec); err != nil {
		return "spec", err.Error()
	}
	return "", ""
}

// cleanJSONError drops the "json: " prefix of encoding/json's messages.
func cleanJSONError(err error) string { return strings.TrimPrefix(err.Error(), "json: ") }

// WrapGatewayAPISpec returns the wrapper message of kind k holding goSpec,
// a pointer to the kind's Gateway API spec type (a *gatewayv1.HTTPRouteSpec
// for HTTPRoute): how a source that already has the Go type (the
// Kubernetes source) builds an object's spec.
func WrapGatewayAPISpec(k *Kind, goSpec any) (proto.Message, error) {
	if !k.GatewayAPI {
		return nil, fmt.Errorf("%s is not a Gateway API kind", k.Kind)
	}
	spec := k.New()
	if err := setGatewayAPISpec(spec, goSpec); err != nil {
		return nil, fmt.Errorf("%s spec: %w", k.Kind, err)
	}
	return spec, nil
}

// GatewayAPISpec decodes the spec of a Gateway API object into a new
// value of the kind's Go type and returns it: a *gatewayv1.HTTPRouteSpec
// for an HTTPRoute, a *gatewayv1.GatewaySpec for a KubernetesGateway.
func GatewayAPISpec(o *Object) (any, error) {
	if !o.Kind.GatewayAPI {
		return nil, fmt.Errorf("%s is not a Gateway API kind", o.Kind.Kind)
	}
	goSpec := o.Kind.newGo()
	js := gatewayAPIJSON(o.Spec)
	if len(js) == 0 {
		return goSpec, nil
	}
	if err := json.Unmarshal(js, goSpec); err != nil {
		return nil, fmt.Errorf("%s spec: %w", o.Ref(), err)
	}
	return goSpec, nil
}

// setGatewayAPISpec stores goSpec's canonical JSON in the wrapper message.
func setGatewayAPISpec(spec proto.Message, goSpec any) error {
	js, err := json.Marshal(goSpec)
	if err != nil {
		return err
	}
	m := spec.ProtoReflect()
	m.Set(jsonField(m), protoreflect.ValueOfBytes(js))
	return nil
}

// gatewayAPIJSON returns the JSON held by a wrapper message.
func gatewayAPIJSON(spec proto.Message) []byte {
	if spec == nil {
		return nil
	}
	m := spec.ProtoReflect()
	return m.Get(jsonField(m)).Bytes()
}

// jsonField is the wrapper messages' one field, "json".
func jsonField(m protoreflect.Message) protoreflect.FieldDescriptor {
	return m.Descriptor().Fields().ByName("json")
}
