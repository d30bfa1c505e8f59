package gatewaycert

import (
	"context"
	"fmt"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// How long an access review's answer is kept (Istio's: a minute for a
// denial, five for an allowance).
const (
	denialTTL    = time.Minute
	allowanceTTL = 5 * time.Minute
)

// accessReviewer asks the API server, with a SubjectAccessReview, whether
// a service account may list Secrets in its own namespace: Istio's
// condition for serving a gateway a private key of its namespace. Answers
// are cached per service account. Safe for concurrent use.
type accessReviewer struct {
	cs  kubernetes.Interface
	now func() time.Time

	mu    sync.Mutex
	cache map[string]review
}

type review struct {
	allowed bool
	why     string
	until   time.Time
}

// mayReadSecrets reports whether namespace/serviceAccount may list
// Secrets in namespace; why says why not. An error means the API server
// could not answer.
func (a *accessReviewer) mayReadSecrets(ctx context.Context, namespace, serviceAccount string) (bool, string, error) {
	user := "system:serviceaccount:" + namespace + ":" + serviceAccount
	now := a.now()
	a.mu.Lock()
	r, ok := a.cache[user]
	a.mu.Unlock()
	if ok && now.Before(r.until) {
		return r.allowed, r.why, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sar, err := a.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: "list", Resource: "secrets",
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subjectaccessreview: %w", err)
	}
	r = review{allowed: sar.Status.Allowed, until: now.Add(denialTTL)}
	if r.allowed {
		r.until = now.Add(allowanceTTL)
	} else {
		r.why = fmt.Sprintf("service account %s/%s may not list secrets in namespace %s (Istio's condition for a gateway's credentialName: grant it with a Role)", namespace, serviceAccount, namespace)
		if sar.Status.Reason != "" {
			r.why += ": " + sar.Status.Reason
		}
	}
	a.mu.Lock()
	a.cache[user] = r
	a.mu.Unlock()
	return r.allowed, r.why, nil
}
