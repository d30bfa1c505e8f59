package tenants

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/navemesh/nave/hub/ca"
)

// The Secrets a kubernetes store keeps in the hub's namespace, each
// labelled LabelKind=<its kind> so that a list reads only its kind.
const (
	// LabelKind says which of a mesh's objects a Secret is: spec, status
	// or seeded. A Secret holding a mesh's spec that a vendor applies
	// (from git) must carry LabelKind=spec.
	LabelKind = "nave.io/tenant"
	// SpecKey is the data key of a spec Secret: the mesh document.
	SpecKey = "mesh.yaml"

	statusKey = "status.json"
)

// secretPrefix names a kind's Secret: nave-mesh-<name> holds the spec,
// nave-meshstatus-<name> the status, nave-meshseed-<name> the seed mark.
// A mesh name is a DNS label, so the three never collide.
var secretPrefix = map[string]string{kindSpec: "nave-mesh-", kindStatus: "nave-meshstatus-", kindSeeded: "nave-meshseed-"}

// secretBackend keeps the meshes in Secrets of one namespace, through
// hub/ca's SecretClient. The API server arbitrates: a create of an
// existing name fails with AlreadyExists, an update or delete with a
// resourceVersion precondition fails with Conflict. Safe for concurrent
// use.
type secretBackend struct {
	client    ca.SecretClient
	namespace string
}

func (b *secretBackend) secretName(kind, name string) string { return secretPrefix[kind] + name }

func (b *secretBackend) where(kind, name string) string {
	return "secret " + b.namespace + "/" + b.secretName(kind, name)
}

func dataKey(kind string) string {
	if kind == kindSpec {
		return SpecKey
	}
	return statusKey
}

func (b *secretBackend) list(ctx context.Context, kind string) ([]blob, error) {
	secs, err := b.client.List(ctx, b.namespace, LabelKind+"="+kind)
	if err != nil {
		return nil, b.apiError("list", "", err)
	}
	out := make([]blob, 0, len(secs))
	for i := range secs {
		name, ok := strings.CutPrefix(secs[i].Name, secretPrefix[kind])
		if !ok || name == "" {
			continue
		}
		out = append(out, blob{name: name, data: secs[i].Data[dataKey(kind)], version: secs[i].ResourceVersion})
	}
	return out, nil
}

func (b *secretBackend) get(ctx context.Context, kind, name string) (blob, error) {
	sec, err := b.client.Get(ctx, b.namespace, b.secretName(kind, name))
	if apierrors.IsNotFound(err) {
		return blob{}, fmt.Errorf("%s: %w", b.where(kind, name), errNotFound)
	}
	if err != nil {
		return blob{}, b.apiError("get", b.secretName(kind, name), err)
	}
	return blob{name: name, data: sec.Data[dataKey(kind)], version: sec.ResourceVersion}, nil
}

func (b *secretBackend) secret(kind, name string, data []byte, version string) *ca.Secret {
	sec := &ca.Secret{Name: b.secretName(kind, name), Namespace: b.namespace, ResourceVersion: version,
		Labels: map[string]string{
			"app.kubernetes.io/part-of": "nave",
			LabelKind:                   kind,
			"nave.io/mesh":              name,
		}}
	if kind != kindSeeded {
		sec.Data = map[string][]byte{dataKey(kind): data}
	}
	if kind != kindSpec {
		sec.Labels["app.kubernetes.io/managed-by"] = "nave-hub"
	}
	return sec
}

func (b *secretBackend) create(ctx context.Context, kind, name string, data []byte) error {
	err := b.client.Create(ctx, b.secret(kind, name, data, ""))
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: %w", b.where(kind, name), errExists)
	}
	if err != nil {
		return b.apiError("create", b.secretName(kind, name), err)
	}
	return nil
}

func (b *secretBackend) update(ctx context.Context, kind, name string, data []byte, version string) error {
	err := b.client.Update(ctx, b.secret(kind, name, data, version))
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("%s: %w", b.where(kind, name), errConflict)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %w", b.where(kind, name), errNotFound)
	case err != nil:
		return b.apiError("update", b.secretName(kind, name), err)
	}
	return nil
}

// remove deletes the Secret. With a version, it first checks that the
// Secret is still at it: a narrow window remains between that read and
// the delete (SecretClient.Delete has no precondition), which the
// callers' rules make harmless — a purged mesh's records are removed
// only by the replica holding its purge claim, and its name cannot be
// created again until its status is gone.
func (b *secretBackend) remove(ctx context.Context, kind, name, version string) error {
	if version != "" {
		cur, err := b.get(ctx, kind, name)
		switch {
		case errors.Is(err, errNotFound):
			return nil
		case err != nil:
			return err
		case cur.version != version:
			return fmt.Errorf("%s: %w", b.where(kind, name), errConflict)
		}
	}
	err := b.client.Delete(ctx, b.namespace, b.secretName(kind, name))
	if err != nil && !apierrors.IsNotFound(err) {
		return b.apiError("delete", b.secretName(kind, name), err)
	}
	return nil
}

// apiError names the Secret (or, for a list, the namespace) and the verb
// of a failed request, and for a refusal says what the hub's identity
// lacks.
func (b *secretBackend) apiError(verb, name string, err error) error {
	what := "secret " + b.namespace + "/" + name
	if name == "" {
		what = "secrets of namespace " + b.namespace
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("meshes: %s: %s: %w (the hub's identity needs get, create, update, delete and list on secrets in namespace %s: deploy/hub/rbac.yaml)",
			what, verb, err, b.namespace)
	}
	return fmt.Errorf("meshes: %s: %s: %w", what, verb, err)
}
