package ca

import (
	"context"
	"encoding/json"
	"fmt"
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

// Secret is what a SecretStore reads and writes of a Kubernetes core/v1
// Secret.
type Secret struct {
	Name, Namespace string
	Labels          map[string]string
	Data            map[string][]byte
}

// SecretClient is the part of the Kubernetes core/v1 API a SecretStore
// uses. NewSecretClient returns one for an API server; tests may use
// another.
type SecretClient interface {
	// Get returns the Secret namespace/name, or an error for which
	// apierrors.IsNotFound holds if there is none.
	Get(ctx context.Context, namespace, name string) (*Secret, error)
	// Create creates secret (of type Opaque) in its namespace, or returns
	// an error for which apierrors.IsAlreadyExists holds if one of that
	// name exists.
	Create(ctx context.Context, secret *Secret) error
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
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace,omitempty"`
		Labels    map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Type string            `json:"type,omitempty"`
	Data map[string][]byte `json:"data,omitempty"`
}

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
	return &Secret{Name: w.Metadata.Name, Namespace: w.Metadata.Namespace, Labels: w.Metadata.Labels, Data: w.Data}, nil
}

func (r restSecrets) Create(ctx context.Context, s *Secret) error {
	w := secretJSON{APIVersion: "v1", Kind: "Secret", Type: "Opaque", Data: s.Data}
	w.Metadata.Name, w.Metadata.Namespace, w.Metadata.Labels = s.Name, s.Namespace, s.Labels
	body, err := json.Marshal(&w)
	if err != nil {
		return err
	}
	return r.rc.Post().Namespace(s.Namespace).Resource("secrets").Body(body).Do(ctx).Error()
}

// SecretStore is a Store in Kubernetes Secrets: mesh m's blob n is the key n
// of the data of Secret nave-ca-<m> in one namespace. Hub replicas sharing
// the namespace share their meshes' roots, with no shared volume:
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
}

// NewSecretStore returns a SecretStore keeping Secrets in namespace through
// client.
func NewSecretStore(client SecretClient, namespace string) *SecretStore {
	return &SecretStore{client: client, namespace: namespace}
}

// Location returns namespace/name of mesh's Secret (see Locator).
func (s *SecretStore) Location(mesh string) string { return s.namespace + "/" + SecretPrefix + mesh }

// Get implements Store.
func (s *SecretStore) Get(ctx context.Context, mesh string) (map[string][]byte, error) {
	if err := checkMesh(mesh); err != nil {
		return nil, fmt.Errorf("ca store: %w", err)
	}
	sec, err := s.client.Get(ctx, s.namespace, SecretPrefix+mesh)
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
		Name:      SecretPrefix + mesh,
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

// apiError names the Secret and the verb of a failed request, and for a
// refusal says what the hub's identity lacks.
func (s *SecretStore) apiError(verb, mesh string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("ca store: secret %s: %s: %w (the hub's identity needs get and create on secrets in namespace %s: deploy/hub/rbac.yaml)",
			s.Location(mesh), verb, err, s.namespace)
	}
	return fmt.Errorf("ca store: secret %s: %s: %w", s.Location(mesh), verb, err)
}
