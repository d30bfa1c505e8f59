package enroll

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// SecretStore keeps the credentials in one Kubernetes Secret (type
// Opaque), a data key per state-dir file: identity.json, hub-ca.pem,
// trust-bundle.pem, credentials.pem. One API write replaces them all, so
// key and certificate always match, and the spoke needs no volume that
// outlives its pod (RBAC: get and update on the Secret's name, create in
// its namespace).
type SecretStore struct {
	Client          kubernetes.Interface
	Namespace, Name string
}

// fieldManager names the spoke's writes.
const fieldManager = "nave-spoke"

func (s SecretStore) String() string { return "Secret " + s.Namespace + "/" + s.Name }

// Load implements Store: a missing Secret, or one without credentials,
// is ErrNotEnrolled.
func (s SecretStore) Load(ctx context.Context) (*Credentials, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s: %w (no such Secret)", s, ErrNotEnrolled)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	return fromBlobs(sec.Data, s.String())
}

// Save implements Store: it creates the Secret, or replaces its data
// (retrying on a conflicting write).
func (s SecretStore) Save(ctx context.Context, c *Credentials) error {
	data, err := c.blobs()
	if err != nil {
		return err
	}
	secrets := s.Client.CoreV1().Secrets(s.Namespace)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := secrets.Get(ctx, s.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: map[string]string{
					"app.kubernetes.io/name": "nave-spoke", "app.kubernetes.io/part-of": "nave",
					"nave.io/mesh": c.Mesh, "nave.io/cluster": c.Cluster}},
				Type: corev1.SecretTypeOpaque, Data: data}, metav1.CreateOptions{FieldManager: fieldManager})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("secrets"), s.Name, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		cur.Data = data
		_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
}
