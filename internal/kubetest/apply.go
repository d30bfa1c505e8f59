package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// applyTimeout bounds one Apply call, waits for CRDs included.
const applyTimeout = 2 * time.Minute

// fieldManager owns the fields Apply sets (server-side apply).
const fieldManager = "kubetest"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Apply creates or updates, as the admin and by server-side apply, every object in manifests
// (YAML or JSON, several documents each; a kind List is applied item by item). Namespaced objects
// without a namespace go to "default". A CustomResourceDefinition is waited for until Established
// before any later object, and before Apply returns. Any failure fails the test.
func (c *Cluster) Apply(t testing.TB, manifests ...[]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()
	if err := c.apply(ctx, manifests, false); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// ApplyDryRun is Apply with dryRun=All: the API server decodes, validates, defaults and admits
// every object as it would in Apply, and stores none. CustomResourceDefinitions are not waited for
// (a dry-run one is never established): Apply the CRDs, and any Namespace, the objects need first.
func (c *Cluster) ApplyDryRun(t testing.TB, manifests ...[]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()
	if err := c.apply(ctx, manifests, true); err != nil {
		t.Fatalf("apply (dry run): %v", err)
	}
}

func (c *Cluster) apply(ctx context.Context, manifests [][]byte, dryRun bool) error {
	objs, err := decodeAll(manifests)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.Admin)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.Admin)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	var pending []string // CRDs applied and not yet seen Established
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		isCRD := gvk.GroupKind() == schema.GroupKind{Group: crdGVR.Group, Kind: "CustomResourceDefinition"}
		if !isCRD && len(pending) > 0 {
			if err := waitEstablished(ctx, dyn, pending); err != nil {
				return err
			}
			pending = nil
			mapper.Reset()
		}
		mapping, err := restMapping(ctx, mapper, gvk)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(metav1.NamespaceDefault)
			}
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := ri.Apply(ctx, obj.GetName(), obj, opts); err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, objectKey(obj), err)
		}
		if isCRD && !dryRun {
			pending = append(pending, obj.GetName())
		}
	}
	return waitEstablished(ctx, dyn, pending)
}

// decodeAll splits manifests into objects, expanding lists and skipping empty documents.
func decodeAll(manifests [][]byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for i, m := range manifests {
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(m)))
		for doc := 1; ; doc++ {
			raw, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("manifest %d, document %d: %w", i+1, doc, err)
			}
			js, err := yaml.YAMLToJSON(raw)
			if err != nil {
				return nil, fmt.Errorf("manifest %d, document %d: %w", i+1, doc, err)
			}
			if len(bytes.TrimSpace(js)) == 0 || string(bytes.TrimSpace(js)) == "null" {
				continue
			}
			obj := &unstructured.Unstructured{}
			if err := obj.UnmarshalJSON(js); err != nil {
				return nil, fmt.Errorf("manifest %d, document %d: %w", i+1, doc, err)
			}
			if !obj.IsList() {
				objs = append(objs, obj)
				continue
			}
			err = obj.EachListItem(func(item runtime.Object) error {
				u, ok := item.(*unstructured.Unstructured)
				if !ok {
					return fmt.Errorf("list item of type %T", item)
				}
				objs = append(objs, u)
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("manifest %d, document %d: %w", i+1, doc, err)
			}
		}
	}
	return objs, nil
}

// restMapping resolves gvk, re-reading discovery while the kind is unknown: a CRD that just became
// Established can take a moment to be served.
func restMapping(ctx context.Context, mapper *restmapper.DeferredDiscoveryRESTMapper, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	for {
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			return mapping, nil
		}
		if !meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("mapping %s: %w", gvk, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("mapping %s: %w", gvk, err)
		case <-time.After(100 * time.Millisecond):
		}
		mapper.Reset()
	}
}

// waitEstablished polls the named CRDs until each has condition Established=True.
func waitEstablished(ctx context.Context, dyn dynamic.Interface, names []string) error {
	for _, name := range names {
		for {
			crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("CustomResourceDefinition %s: %w", name, err)
			}
			if hasCondition(crd, "Established") {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CustomResourceDefinition %s not Established: %w", name, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// hasCondition reports whether obj's status has condition typ with status True.
func hasCondition(obj *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// objectKey names obj as namespace/name, or name when cluster scoped.
func objectKey(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}
