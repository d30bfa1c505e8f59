package ca

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// SecretPrefix starts the name of the Secret a SecretStore keeps mesh m's
// blobs in: nave-ca-<m>.
const SecretPrefix = "nave-ca-"

// Secret is what the hub reads and writes of a Kubernetes core/v1 Secret.
type Secret struct {
	Name, Namespace string
	Labels          map[string]string
	Data            map[string][]byte
	// Immutable asks the API server to refuse every later change of Data
	// (set on Create).
	Immutable bool
	// ResourceVersion is the version read; an Update that sets it applies
	// only to that version (else Conflict).
	ResourceVersion string
	// Created is when the API server created the Secret (read only).
	Created time.Time
}

// SecretClient is the part of the Kubernetes core/v1 API the hub keeps
// its state with: a SecretStore gets and creates; hub/enroll's store also
// updates and lists. NewSecretClient returns one for an API server; tests
// may use another.
type SecretClient interface {
	// Get returns the Secret namespace/name, or an error for which
	// apierrors.IsNotFound holds if there is none.
	Get(ctx context.Context, namespace, name string) (*Secret, error)
	// Create creates secret (of type Opaque) in its namespace, or returns
	// an error for which apierrors.IsAlreadyExists holds if one of that
	// name exists.
	Create(ctx context.Context, secret *Secret) error
	// Update replaces secret (of type Opaque) — only its version
	// ResourceVersion, if set (else an error for which
	// apierrors.IsConflict holds) — or returns an error for which
	// apierrors.IsNotFound holds if there is none.
	Update(ctx context.Context, secret *Secret) error
	// List returns the Secrets of namespace that match labelSelector
	// (Kubernetes' syntax; "" matches all), reading every page.
	List(ctx context.Context, namespace, labelSelector string) ([]Secret, error)
	// Delete deletes the Secret namespace/name, or returns an error for
	// which apierrors.IsNotFound holds if there is none.
	Delete(ctx context.Context, namespace, name string) error
}

// defaultTimeout bounds one request of a SecretClient whose rest.Config
// sets no timeout, so that a hub does not hang at start on an API server
// that does not answer.
const defaultTimeout = 30 * time.Second

// NewSecretClient returns a SecretClient for the API server cfg reaches.
// It is a REST client of core/v1 Secrets alone, speaking JSON into a
// struct of its own: the hub links neither the typed clientset (every API
// group) nor k8s.io/api/core/v1 (every core type). The scheme knows only
// metav1.Status, so that the API server's refusals keep their reason
// (NotFound, AlreadyExists, Forbidden).
func NewSecretClient(cfg *rest.Config) (SecretClient, error) {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, coreV1)
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &coreV1
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return restSecrets{rc}, nil
}

var coreV1 = schema.GroupVersion{Version: "v1"}

// secretJSON is a core/v1 Secret on the wire, as much of it as Secret
// holds. encoding/json writes []byte in base64, as the API does.
type secretJSON struct {
	APIVersion string            `json:"apiVersion,omitempty"`
	Kind       string            `json:"kind,omitempty"`
	Metadata   secretMetaJSON    `json:"metadata"`
	Type       string            `json:"type,omitempty"`
	Immutable  *bool             `json:"immutable,omitempty"`
	Data       map[string][]byte `json:"data,omitempty"`
}

type secretMetaJSON struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	CreationTimestamp *time.Time        `json:"creationTimestamp,omitempty"`
}

// secretListJSON is a core/v1 SecretList on the wire.
type secretListJSON struct {
	Metadata struct {
		Continue string `json:"continue,omitempty"`
	} `json:"metadata"`
	Items []secretJSON `json:"items"`
}

func (w *secretJSON) secret() Secret {
	s := Secret{Name: w.Metadata.Name, Namespace: w.Metadata.Namespace, Labels: w.Metadata.Labels, Data: w.Data,
		Immutable: w.Immutable != nil && *w.Immutable, ResourceVersion: w.Metadata.ResourceVersion}
	if w.Metadata.CreationTimestamp != nil {
		s.Created = *w.Metadata.CreationTimestamp
	}
	return s
}

func wireSecret(s *Secret) secretJSON {
	w := secretJSON{APIVersion: "v1", Kind: "Secret", Type: "Opaque", Data: s.Data}
	w.Metadata = secretMetaJSON{Name: s.Name, Namespace: s.Namespace, Labels: s.Labels, ResourceVersion: s.ResourceVersion}
	if s.Immutable {
		w.Immutable = &s.Immutable
	}
	return w
}

// listPageSize is how many Secrets one List request asks for.
const listPageSize = 500

type restSecrets struct{ rc *rest.RESTClient }

func (r restSecrets) Get(ctx context.Context, namespace, name string) (*Secret, error) {
	res := r.rc.Get().Namespace(namespace).Resource("secrets").Name(name).Do(ctx)
	// Error, unlike Raw, decodes the API server's Status: its message says
	// why.
	if err := res.Error(); err != nil {
		return nil, err
	}
	b, _ := res.Raw()
	var w secretJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("decoding secret %s/%s: %w", namespace, name, err)
	}
	s := w.secret()
	return &s, nil
}

func (r restSecrets) Create(ctx context.Context, s *Secret) error {
	body, err := json.Marshal(wireSecret(s))
	if err != nil {
		return err
	}
	return r.rc.Post().Namespace(s.Namespace).Resource("secrets").Body(body).Do(ctx).Error()
}

func (r restSecrets) Update(ctx context.Context, s *Secret) error {
	body, err := json.Marshal(wireSecret(s))
	if err != nil {
		return err
	}
	return r.rc.Put().Namespace(s.Namespace).Resource("secrets").Name(s.Name).Body(body).Do(ctx).Error()
}

func (r restSecrets) Delete(ctx context.Context, namespace, name string) error {
	return r.rc.Delete().Namespace(namespace).Resource("secrets").Name(name).Do(ctx).Error()
}

func (r restSecrets) List(ctx context.Context, namespace, labelSelector string) ([]Secret, error) {
	var out []Secret
	cont := ""
	for {
		req := r.rc.Get().Namespace(namespace).Resource("secrets").Param("limit", strconv.Itoa(listPageSize))
		if labelSelector != "" {
			req = req.Param("labelSelector", labelSelector)
		}
		if cont != "" {
			req = req.Param("continue", cont)
		}
		res := req.Do(ctx)
		if err := res.Error(); err != nil {
			return nil, err
		}
		b, _ := res.Raw()
		var l secretListJSON
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, fmt.Errorf("decoding the secrets of namespace %s: %w", namespace, err)
		}
		for i := range l.Items {
			out = append(out, l.Items[i].secret())
		}
		if cont = l.Metadata.Continue; cont == "" {
			return out, nil
		}
	}
}

// SecretStore is a Store in Kubernetes Secrets: mesh m's blob n is the key n
// of the data of Secret nave-ca-<m> (another prefix: WithSecretPrefix) in
// one namespace. Hub replicas sharing the namespace share their meshes'
// roots, with no shared volume:
//
//   - Get reads the Secret (one atomic read); a missing Secret is a mesh
//     with no blobs. Data keys that are not blob names are ignored.
//   - Create creates the Secret with every blob at once; the API server
//     refuses it with AlreadyExists when another replica (or the operator)
//     made it first, and Create then returns an error matching ErrExist, so
//     the Authority loads the winner's root. It never updates or deletes a
//     Secret.
//
// A plugged-in CA is a Secret nave-ca-<m> the operator creates with
// Istio's cacerts keys (ca-cert.pem, ca-key.pem, cert-chain.pem,
// root-cert.pem), as `kubectl create secret generic nave-ca-<m>
// --from-file=...` makes it. The hub needs get and create on secrets in
// the namespace (deploy/hub/rbac.yaml).
//
// SecretStore is safe for concurrent use.
type SecretStore struct {
	client    SecretClient
	namespace string
	prefix    string
}

// SecretStoreOption configures a SecretStore.
type SecretStoreOption func(*SecretStore)

// WithSecretPrefix names mesh m's Secret prefix+m instead of
// SecretPrefix+m: a store of CAs that are not tenants' (the hub's serving
// CA) keeps apart from every mesh's.
func WithSecretPrefix(prefix string) SecretStoreOption {
	return func(s *SecretStore) { s.prefix = prefix }
}

// NewSecretStore returns a SecretStore keeping Secrets in namespace through
// client.
func NewSecretStore(client SecretClient, namespace string, opts ...SecretStoreOption) *SecretStore {
	s := &SecretStore{client: client, namespace: namespace, prefix: SecretPrefix}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Location returns namespace/name of mesh's Secret (see Locator).
func (s *SecretStore) Location(mesh string) string { return s.namespace + "/" + s.prefix + mesh }

// Get implements Store.
func (s *SecretStore) Get(ctx context.Context, mesh string) (map[string][]byte, error) {
	if err := checkMesh(mesh); err != nil {
		return nil, fmt.Errorf("ca store: %w", err)
	}
	sec, err := s.client.Get(ctx, s.namespace, s.prefix+mesh)
	if apierrors.IsNotFound(err) {
		return map[string][]byte{}, nil
	}
	if err != nil {
		return nil, s.apiError("get", mesh, err)
	}
	blobs := map[string][]byte{}
	for name, b := range sec.Data {
		if !blobNameRE.MatchString(name) {
			continue
		}
		if len(b) > maxBlobSize {
			return nil, fmt.Errorf("ca store: secret %s: key %s: larger than %d bytes", s.Location(mesh), name, maxBlobSize)
		}
		blobs[name] = b
	}
	return blobs, nil
}

// Create implements Store.
func (s *SecretStore) Create(ctx context.Context, mesh string, blobs map[string][]byte) error {
	if err := checkMesh(mesh); err != nil {
		return fmt.Errorf("ca store: %w", err)
	}
	if _, err := blobNames(blobs); err != nil {
		return err
	}
	err := s.client.Create(ctx, &Secret{
		Name:      s.prefix + mesh,
		Namespace: s.namespace,
		Labels: map[string]string{
			"app.kubernetes.io/part-of":    "nave",
			"app.kubernetes.io/managed-by": "nave-hub",
		},
		Data: blobs,
	})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("ca store: secret %s: %w", s.Location(mesh), ErrExist)
	}
	if err != nil {
		return s.apiError("create", mesh, err)
	}
	return nil
}

// Delete implements Deleter: it deletes mesh's Secret, whatever it holds
// (a plugged-in CA's too). It needs delete on secrets in the namespace.
func (s *SecretStore) Delete(ctx context.Context, mesh string) error {
	if err := checkMesh(mesh); err != nil {
		return fmt.Errorf("ca store: %w", err)
	}
	err := s.client.Delete(ctx, s.namespace, s.prefix+mesh)
	if err != nil && !apierrors.IsNotFound(err) {
		return s.apiError("delete", mesh, err)
	}
	return nil
}

// apiError names the Secret and the verb of a failed request, and for a
// refusal says what the hub's identity lacks.
func (s *SecretStore) apiError(verb, mesh string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("ca store: secret %s: %s: %w (the identity needs get and create on secrets in namespace %s, update to rotate a root and delete to destroy a deleted mesh's CA: deploy/hub/rbac.yaml)",
			s.Location(mesh), verb, err, s.namespace)
	}
	return fmt.Errorf("ca store: secret %s: %s: %w", s.Location(mesh), verb, err)
}
