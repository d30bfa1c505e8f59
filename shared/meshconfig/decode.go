package meshconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
func decodeDocument(doc document) (*Object, *ObjectError) {
	if !utf8.Valid(doc.data) {
		return nil, &ObjectError{Reason: "document is not UTF-8 text (binary data?)"}
	}
	if !hasContent(doc.data) {
		return nil, nil
	}
	js, err := yamlToJSON(doc.data)
	if err != nil {
		return nil, &ObjectError{Reason: "invalid YAML: " + fileLines(err.Error(), doc.line)}
	}
	if string(js) == "null" {
		return nil, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, &ObjectError{Reason: fmt.Sprintf("document is %s, not a mapping", jsonTypeName(js))}
	}

	apiVersion, aerr := stringField(top, "apiVersion")
	kindName, kerr := stringField(top, "kind")
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
	case kerr != nil:
		oerr.Field, oerr.Reason = "kind", kerr.Error()
		return nil, oerr
	}
	kind, err := KindFor(apiVersion, kindName)
	if err != nil {
		oerr.Reason = err.Error()
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

	spec := kind.New()
	if raw, ok := top["spec"]; ok && string(raw) != "null" {
		if field, reason := decodeSpec(raw, spec); reason != "" {
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
			js, err = nil, fmt.Errorf("the YAML parser failed: %v", r)
		}
	}()
	return yaml.YAMLToJSONStrict(data)
}

var yamlLineRE = regexp.MustCompile(`\bline (\d+)\b`)

// fileLines rewrites "line N" in a YAML error, counted from the start of
// its document, to the line of the file.
func fileLines(msg string, firstLine int) string {
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	return yamlLineRE.ReplaceAllStringFunc(msg, func(s string) string {
		n, err := strconv.Atoi(strings.TrimPrefix(s, "line "))
		if err != nil {
			return s
		}
		return "line " + strconv.Itoa(n+firstLine-1)
	})
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
