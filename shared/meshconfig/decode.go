package meshconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// topLevelFields are the keys a document may hold. status is accepted
// and ignored: it is what a cluster reports, not configuration.
var topLevelFields = []string{"apiVersion", "kind", "metadata", "spec", "status"}

// ignoredMetadataFields are Kubernetes ObjectMeta fields that an exported
// object ("kubectl get -o yaml") carries and that mean nothing here.
var ignoredMetadataFields = []string{
	"uid", "resourceVersion", "generation", "generateName", "selfLink",
	"managedFields", "ownerReferences", "finalizers",
	"deletionTimestamp", "deletionGracePeriodSeconds",
}

// DecodeYAML splits a multi-document YAML stream and decodes and validates
// every document. A bad document never stops the others: it yields an
// *ObjectError (Origin is origin, Index the document's 0-based index) and
// the rest still decode. Empty and comment-only documents are skipped
// silently. Every returned object has passed Validate and has its Version
// set; its Origin is "origin#index".
func DecodeYAML(data []byte, origin string) ([]*Object, []*ObjectError) {
	var (
		objs []*Object
		errs []*ObjectError
	)
	for _, doc := range splitDocuments(data) {
		o, oerr := decodeDocument(doc)
		if oerr != nil {
			oerr.Origin, oerr.Index = origin, doc.index
			oerr.bound()
			errs = append(errs, oerr)
			continue
		}
		if o == nil {
			continue
		}
		o.Origin = origin + "#" + strconv.Itoa(doc.index)
		if err := validate(o); err != nil {
			err.Origin, err.Index = origin, doc.index
			errs = append(errs, err)
			continue
		}
		o.Version = o.ComputeVersion()
		objs = append(objs, o)
	}
	return objs, errs
}

// decodeDocument turns one document into an Object, or nil for an empty
// document. Errors carry whatever of kind and name was readable.
//
// A document that does not name one of the kinds nave knows may be any
// file at all (a key, a token, a kubeconfig), so its errors quote none of
// it: they say where it is (its first line) and why, in nave's words.
// Once a document names a known kind it is config, and errors name its
// fields and may quote its values, as any config error does.
func decodeDocument(doc document) (*Object, *ObjectError) {
	if !utf8.Valid(doc.data) {
		return nil, &ObjectError{Reason: fmt.Sprintf("line %d: document is not UTF-8 text (binary data?)", doc.line)}
	}
	if !hasContent(doc.data) {
		return nil, nil
	}
	js, err := yamlToJSON(doc.data)
	if err != nil {
		return nil, &ObjectError{Reason: "invalid YAML: " + yamlReason(err.Error(), doc.line)}
	}
	if string(js) == "null" {
		return nil, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, &ObjectError{Reason: fmt.Sprintf("line %d: document is %s, not a mapping", doc.line, jsonTypeName(js))}
	}

	kindName, kerr := stringField(top, "kind")
	if kerr == nil && slices.Contains(otherIstioKinds, kindName) {
		meta, _ := decodeMetadata(top["metadata"])
		reason := RefusedKindReasons[kindName]
		if reason == "" {
			reason = fmt.Sprintf("%s is an Istio kind nave does not support (it supports %s)", kindName, strings.Join(kindNames(), ", "))
		}
		return nil, &ObjectError{Kind: kindName, Namespace: meta.namespace, Name: meta.name, Reason: fmt.Sprintf("line %d: %s", doc.line, reason)}
	}
	if kerr == nil && !isKindName(kindName) {
		kerr = fmt.Errorf("its kind is not one nave accepts (%s)", strings.Join(kindNames(), ", "))
	}
	apiVersion, aerr := stringField(top, "apiVersion")
	if group, _, _ := strings.Cut(apiVersion, "/"); kerr != nil && kindName != "" && aerr == nil && group == GroupGatewayAPI {
		// A Gateway API kind nave does not implement (BackendTLSPolicy,
		// ListenerSet, UDPRoute, ...): said so, as the Kubernetes source
		// does, rather than as a foreign document.
		meta, _ := decodeMetadata(top["metadata"])
		var supported []string
		for _, k := range kinds {
			if k.GatewayAPI {
				supported = append(supported, k.APIKind)
			}
		}
		return nil, &ObjectError{Kind: kindName, Namespace: meta.namespace, Name: meta.name, Field: "kind",
			Reason: fmt.Sprintf("line %d: %s is a Gateway API kind nave does not support: the object has no effect (it supports %s)",
				doc.line, kindName, strings.Join(supported, ", "))}
	}
	if kerr != nil {
		return nil, &ObjectError{Field: "kind", Reason: fmt.Sprintf("line %d: not a config object: %v", doc.line, kerr),
			Foreign: aerr == nil && foreignAPI(apiVersion)}
	}

	oerr := &ObjectError{Kind: kindName}
	meta, merr := decodeMetadata(top["metadata"])
	oerr.Namespace, oerr.Name = meta.namespace, meta.name

	var unknown []string
	for k := range top {
		if !slices.Contains(topLevelFields, k) {
			unknown = append(unknown, k)
		}
	}
	switch {
	case len(unknown) > 0:
		slices.Sort(unknown)
		oerr.Field, oerr.Reason = unknown[0], fmt.Sprintf("unknown field %q (a document holds %s)",
			unknown[0], strings.Join(topLevelFields[:4], ", "))
		return nil, oerr
	case aerr != nil:
		oerr.Field, oerr.Reason = "apiVersion", aerr.Error()
		return nil, oerr
	}
	kind, err := KindFor(apiVersion, kindName)
	if err != nil {
		oerr.Reason, oerr.Foreign = err.Error(), foreignAPI(apiVersion)
		return nil, oerr
	}
	if kind.Registry {
		oerr.Reason = fmt.Sprintf("%s is produced by the spoke's registry, not accepted in config files", kind.Kind)
		return nil, oerr
	}
	if merr != nil {
		oerr.Field, oerr.Reason = merr.field, merr.reason
		return nil, oerr
	}
	if kind.ClusterScoped {
		// As kubectl does, a namespace on a cluster-scoped object is
		// ignored: the object is the cluster's.
		meta.namespace = ClusterNamespace
		oerr.Namespace = meta.namespace
	}

	spec := kind.New()
	if raw, ok := top["spec"]; ok && string(raw) != "null" {
		decode := decodeSpec
		if kind.GatewayAPI {
			decode = func(raw json.RawMessage, spec proto.Message) (string, string) {
				return decodeGatewayAPISpec(kind, raw, spec)
			}
		}
		if field, reason := decode(raw, spec); reason != "" {
			oerr.Field, oerr.Reason = field, reason
			return nil, oerr
		}
	}
	return &Object{
		Kind:         kind,
		Name:         meta.name,
		Namespace:    meta.namespace,
		Labels:       meta.labels,
		Annotations:  meta.annotations,
		CreationTime: meta.created,
		Spec:         spec,
	}, nil
}

// yamlToJSON converts one document, duplicate keys being an error. The
// parser is third-party code fed untrusted bytes: a panic in it becomes
// an error for this document instead of taking the process down.
func yamlToJSON(data []byte) (js []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			// The panic value may hold the input: it is not quoted.
			js, err = nil, errors.New("the YAML parser failed on this document")
		}
	}()
	return yaml.YAMLToJSONStrict(data)
}

var (
	yamlLineRE  = regexp.MustCompile(`\bline (\d+)\b`)
	yamlQuoteRE = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'[^']*'|`[^`]*`")
)

// yamlProblems rewords the YAML parser's messages that quote the input
// (a key, a value, an anchor's name) in nave's words. The parser's other
// messages are fixed text, such as "did not find expected ',' or ']'".
var yamlProblems = []struct {
	re     *regexp.Regexp
	reason string
}{
	{regexp.MustCompile(`^key .* already set in map$`), "a key is repeated in one mapping"},
	{regexp.MustCompile(`^cannot (unmarshal|decode) `), "a value does not match its tag"},
	{regexp.MustCompile(`^(invalid|unsupported) map key`), "a mapping key is a list or a mapping"},
	{regexp.MustCompile(`^unknown anchor `), "an alias names an unknown anchor"},
	{regexp.MustCompile(`^anchor .* value contains itself$`), "an anchor's value contains itself"},
}

// yamlReason turns a YAML error into a reason that gives lines of the file
// (the parser counts from the start of the document, which starts at
// firstLine) and quotes nothing of the input. A problem the parser gives
// no line for is placed at the document's first line.
func yamlReason(msg string, firstLine int) string {
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	var out []string
	for part := range strings.SplitSeq(msg, "\n") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		line := 0
		if m := yamlLineRE.FindStringSubmatchIndex(part); m != nil && m[0] == 0 {
			line, _ = strconv.Atoi(part[m[2]:m[3]])
			part = strings.TrimPrefix(strings.TrimSpace(part[m[1]:]), ": ")
		}
		problem := ""
		for _, p := range yamlProblems {
			if p.re.MatchString(part) {
				problem = p.reason
				break
			}
		}
		if problem == "" {
			// Unknown text: keep it, but not what it quotes beyond one
			// character (the parser quotes syntax like ':' or ']').
			problem = yamlQuoteRE.ReplaceAllStringFunc(part, func(q string) string {
				if len(q) <= 3 {
					return q
				}
				return q[:1] + "…" + q[len(q)-1:]
			})
		}
		if line > 0 {
			out = append(out, fmt.Sprintf("line %d: %s", line+firstLine-1, problem))
		} else {
			out = append(out, fmt.Sprintf("in the document from line %d: %s", firstLine, problem))
		}
	}
	if len(out) == 0 {
		return fmt.Sprintf("in the document from line %d", firstLine)
	}
	return strings.Join(out, "; ")
}

func jsonTypeName(js []byte) string {
	switch t := bytes.TrimSpace(js); {
	case len(t) == 0:
		return "empty"
	case t[0] == '[':
		return "a list"
	case t[0] == '"':
		return "a string"
	case t[0] == '{':
		return "a mapping"
	case t[0] == 't' || t[0] == 'f':
		return "a boolean"
	case t[0] == 'n':
		return "null"
	default:
		return "a number"
	}
}

// quoteHint suggests quoting a scalar that YAML did not read as a string:
// y, yes, on, no, off are booleans to it, 1.10 a number.
func quoteHint(raw json.RawMessage) string {
	switch jsonTypeName(raw) {
	case "a boolean", "a number":
		return " (quote it: YAML reads y, yes, on, off, no and numbers as non-strings)"
	}
	return ""
}

// stringField reads a required string at the top of a document.
func stringField(top map[string]json.RawMessage, key string) (string, error) {
	raw, ok := top[key]
	if !ok || string(raw) == "null" {
		return "", fmt.Errorf("%s is required", key)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s must be a string, not %s%s", key, jsonTypeName(raw), quoteHint(raw))
	}
	if s == "" {
		return "", fmt.Errorf("%s is required", key)
	}
	return s, nil
}

type metadata struct {
	name, namespace     string
	labels, annotations map[string]string
	created             time.Time
}

type metadataError struct{ field, reason string }

// decodeMetadata reads what it can even when it fails, so that errors
// about the document name it.
func decodeMetadata(raw json.RawMessage) (metadata, *metadataError) {
	m := metadata{namespace: DefaultNamespace}
	if len(raw) == 0 || string(raw) == "null" {
		return m, &metadataError{"metadata.name", "name is required"}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return m, &metadataError{"metadata", fmt.Sprintf("metadata must be a mapping, not %s", jsonTypeName(raw))}
	}
	var first *metadataError
	fail := func(field, format string, args ...any) {
		if first == nil {
			first = &metadataError{field, fmt.Sprintf(format, args...)}
		}
	}
	if v, ok := fields["name"]; ok && json.Unmarshal(v, &m.name) != nil {
		fail("metadata.name", "name must be a string, not %s%s", jsonTypeName(v), quoteHint(v))
	}
	if v, ok := fields["namespace"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &m.namespace); err != nil {
			fail("metadata.namespace", "namespace must be a string, not %s%s", jsonTypeName(v), quoteHint(v))
		}
		if m.namespace == "" {
			m.namespace = DefaultNamespace
		}
	}
	if m.name == "" {
		fail("metadata.name", "name is required")
	}
	var err *metadataError
	if m.labels, err = stringMap(fields["labels"], "metadata.labels"); err != nil {
		fail(err.field, "%s", err.reason)
	}
	if m.annotations, err = stringMap(fields["annotations"], "metadata.annotations"); err != nil {
		fail(err.field, "%s", err.reason)
	}
	if v, ok := fields["creationTimestamp"]; ok && string(v) != "null" {
		var s string
		if json.Unmarshal(v, &s) != nil {
			fail("metadata.creationTimestamp", "creationTimestamp must be an RFC 3339 time string, not %s", jsonTypeName(v))
		} else if t, perr := time.Parse(time.RFC3339, s); perr != nil {
			fail("metadata.creationTimestamp", "creationTimestamp %q is not an RFC 3339 time", s)
		} else {
			m.created = t
		}
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch {
		case k == "name" || k == "namespace" || k == "labels" || k == "annotations" || k == "creationTimestamp":
		case slices.Contains(ignoredMetadataFields, k):
		default:
			fail("metadata."+k, "unknown field %q", k)
		}
	}
	return m, first
}

// stringMap decodes a map of strings; a null or absent map is nil.
func stringMap(raw json.RawMessage, field string) (map[string]string, *metadataError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var vals map[string]json.RawMessage
	if err := json.Unmarshal(raw, &vals); err != nil {
		return nil, &metadataError{field, fmt.Sprintf("must be a mapping, not %s", jsonTypeName(raw))}
	}
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make(map[string]string, len(vals))
	for _, k := range keys {
		var s string
		if err := json.Unmarshal(vals[k], &s); err != nil {
			return nil, &metadataError{field + "[" + k + "]", fmt.Sprintf("value must be a string, not %s%s", jsonTypeName(vals[k]), quoteHint(vals[k]))}
		}
		out[k] = s
	}
	return out, nil
}

// foreignAPI reports whether apiVersion names an API group that holds no
// config nave reads, such as Kubernetes' core group ("v1") or "apps/v1":
// a document of it is some other object, not mistaken config.
func foreignAPI(apiVersion string) bool {
	group, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return apiVersion != "" // "v1": the core group
	}
	return group != GroupRegistry && group != GroupGatewayAPI && group != "istio.io" && !strings.HasSuffix(group, ".istio.io")
}

// otherIstioKinds are Istio's config kinds that nave does not support:
// fixed names, so an error may name them.
var otherIstioKinds = []string{"ProxyConfig", "WasmPlugin"}

// RefusedKindReasons says why nave refuses some of otherIstioKinds, for
// every source to give the same reason.
var RefusedKindReasons = map[string]string{
	"WasmPlugin": "WasmPlugin is not supported: nave's agent does not fetch Wasm modules (docs/decisions/040-envoyfilter-and-wasmplugin.md); " +
		"an EnvoyFilter can insert Envoy's wasm filter with a module the proxy already has",
	"ProxyConfig": "ProxyConfig is not supported: give a proxy's settings in the mesh's MeshConfig defaultConfig " +
		"or the pod's proxy.istio.io/config annotation (docs/injection.md)",
}

// isKindName reports whether name is the kind of one of nave's kinds, of
// any group.
func isKindName(name string) bool {
	return slices.ContainsFunc(kinds, func(k *Kind) bool { return k.APIKind == name })
}

// kindNames lists the kinds accepted in config files.
func kindNames() []string {
	var names []string
	for _, k := range kinds {
		if !k.Registry && !slices.Contains(names, k.APIKind) {
			names = append(names, k.APIKind)
		}
	}
	return names
}
