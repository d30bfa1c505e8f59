package ra

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TokenReviewer checks a bearer token with the cluster's API server.
type TokenReviewer interface {
	// Review asks whether token is valid for one of audiences. An error
	// means the question could not be answered (the API server is
	// unreachable or refused the reviewer), not that the token is bad.
	Review(ctx context.Context, token string, audiences []string) (Review, error)
}

// Review is a TokenReviewer's answer (a TokenReview's status).
type Review struct {
	// Authenticated is whether the token is valid.
	Authenticated bool
	// Username is who the token authenticates, such as
	// system:serviceaccount:<namespace>:<name>.
	Username string
	// Audiences are those of the requested audiences the token is valid
	// for.
	Audiences []string
	// Error is why the token is not valid, if the reviewer said.
	Error string
}

// KubeReviewer returns a TokenReviewer that creates an
// authentication.k8s.io/v1 TokenReview with c. The client's identity needs
// RBAC permission to create tokenreviews (deploy/spoke/rbac.yaml grants it
// to the nave-spoke service account).
func KubeReviewer(c kubernetes.Interface) TokenReviewer { return kubeReviewer{c: c} }

type kubeReviewer struct{ c kubernetes.Interface }

func (k kubeReviewer) Review(ctx context.Context, token string, audiences []string) (Review, error) {
	tr, err := k.c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return Review{}, fmt.Errorf("tokenreview: %w", err)
	}
	return Review{
		Authenticated: tr.Status.Authenticated,
		Username:      tr.Status.User.Username,
		Audiences:     tr.Status.Audiences,
		Error:         tr.Status.Error,
	}, nil
}
