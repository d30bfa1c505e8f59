// Package operatorca is the CA of the hub's operators: it issues the client
// certificates (navectl operator issue) that the hub's operator admin
// listener (admin.operatorListen) requires, and reads an operator's scope
// from one. It is a hub/ca Authority of its own, "operators", kept beside
// the serving CA (servingcert.OpenStore's store: <state dir>/serving-ca/ or
// Secret nave-serving-ca-operators) and apart from every tenant's mesh CA,
// so that neither a spoke's nor a workload's certificate is ever an
// operator's (docs/decisions/018-operator-admin.md).
//
// An operator's identity says its scope:
//
//	spiffe://operators.nave.internal/vendor/NAME      the vendor: every mesh
//	spiffe://operators.nave.internal/mesh/MESH/NAME   a tenant: mesh MESH only
package operatorca

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/spiffeid"
)

// Mesh names the operators' CA in its store; TrustDomain is its identities'.
const (
	Mesh        = "operators"
	TrustDomain = "operators.nave.internal"
	// MaxTTL bounds an operator certificate's lifetime.
	MaxTTL = 30 * 24 * time.Hour
)

// Load loads the operators' CA from store (servingcert.OpenStore's), or
// generates it when there is none (the hub and navectl alike; racing
// creators end with one).
func Load(ctx context.Context, store ca.Store, log *slog.Logger) (*ca.Authority, error) {
	a, err := ca.New(store, ca.Options{MaxTTL: MaxTTL, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := a.Load(ctx, ca.Mesh{Name: Mesh, TrustDomain: TrustDomain}); err != nil {
		return nil, fmt.Errorf("operators' CA: %w", err)
	}
	return a, nil
}

// ID is the identity of operator name: of the vendor when mesh is "", else
// of mesh's tenant. Both are DNS labels.
func ID(mesh, name string) (ca.ID, error) {
	if err := spiffeid.ValidateName(name); err != nil {
		return ca.ID{}, fmt.Errorf("operator name %q: %w", name, err)
	}
	if mesh == "" {
		return ca.ID{TrustDomain: TrustDomain, Path: "/vendor/" + name}, nil
	}
	if err := spiffeid.ValidateName(mesh); err != nil {
		return ca.ID{}, fmt.Errorf("mesh %q: %w", mesh, err)
	}
	return ca.ID{TrustDomain: TrustDomain, Path: "/mesh/" + mesh + "/" + name}, nil
}

// Scope reads the scope of the operator whose certificate leaf is (already
// verified against the operators' CA by the caller).
func Scope(leaf *x509.Certificate) (admin.Scope, error) {
	if len(leaf.URIs) != 1 {
		return admin.Scope{}, fmt.Errorf("the certificate has %d URI SANs, want one operator identity", len(leaf.URIs))
	}
	id, err := spiffeid.ParseID(leaf.URIs[0].String())
	if err != nil {
		return admin.Scope{}, err
	}
	if id.TrustDomain != TrustDomain {
		return admin.Scope{}, fmt.Errorf("%s is not an operator identity (trust domain %s)", id, TrustDomain)
	}
	segs := strings.Split(strings.TrimPrefix(id.Path, "/"), "/")
	switch {
	case len(segs) == 2 && segs[0] == "vendor":
		return admin.Scope{Operator: id.String(), Vendor: true}, nil
	case len(segs) == 3 && segs[0] == "mesh":
		return admin.Scope{Operator: id.String(), Mesh: segs[1]}, nil
	}
	return admin.Scope{}, errors.New(id.String() + " is neither a vendor's nor a tenant's operator identity")
}
