package ca

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/certreq/certreqtest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// The tests below run against a real kube-apiserver with deploy/hub's RBAC
// applied, acting as the hub's service account.
const (
	hubNamespace = "nave-system"
	hubUser      = "system:serviceaccount:nave-system:nave-hub"
)

var hubGroups = []string{"system:serviceaccounts", "system:serviceaccounts:nave-system"}

type secretKube struct {
	c     *kubetest.Cluster
	admin SecretClient
}

func startSecretKube(t *testing.T) *secretKube {
	t.Helper()
	c := kubetest.Start(t, kubetest.Options{})
	var manifests [][]byte
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "hub", f))
		if err != nil {
			t.Fatal(err)
		}
		manifests = append(manifests, b)
	}
	c.Apply(t, manifests...)
	// The API server's RBAC authorizer learns new bindings from a watch:
	// wait until the hub's identity may read Secrets (the probe is not
	// found rather than forbidden) before acting as it.
	hub := secretClient(t, c, hubUser, hubGroups...)
	testwait.For(t, 20*time.Second, func() error {
		if _, err := hub.Get(context.Background(), hubNamespace, "nave-rbac-probe"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("deploy/hub's RBAC did not take effect: %v", err)
		}
		return nil
	})
	return &secretKube{c: c, admin: secretClient(t, c, "")}
}

// secretClient acts as user in groups (the admin if user is "").
func secretClient(t *testing.T, c *kubetest.Cluster, user string, groups ...string) SecretClient {
	t.Helper()
	cfg := c.Admin
	if user != "" {
		cfg = c.As(user, groups...)
	}
	sc, err := NewSecretClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func (k *secretKube) hubStore(t *testing.T) *SecretStore {
	return NewSecretStore(secretClient(t, k.c, hubUser, hubGroups...), hubNamespace)
}

// barrierClient holds every Create until n Gets have been answered, so
// that n Authorities all find no root before any of them creates one.
type barrierClient struct {
	SecretClient
	gets *sync.WaitGroup
	once sync.Once
}

func (b *barrierClient) Get(ctx context.Context, ns, name string) (*Secret, error) {
	s, err := b.SecretClient.Get(ctx, ns, name)
	b.once.Do(b.gets.Done)
	return s, err
}

func (b *barrierClient) Create(ctx context.Context, s *Secret) error {
	b.gets.Wait()
	return b.SecretClient.Create(ctx, s)
}

func TestSecretStore(t *testing.T) {
	k := startSecretKube(t)

	t.Run("RaceEndsWithOneRootAndRestartKeepsIt", func(t *testing.T) {
		m := Mesh{Name: "race", TrustDomain: "race.example"}
		const replicas = 2
		var gets sync.WaitGroup
		gets.Add(replicas)
		auths := make([]*Authority, replicas)
		errs := make([]error, replicas)
		var wg sync.WaitGroup
		for i := range auths {
			// Each replica has its own client, as separate processes would.
			store := NewSecretStore(&barrierClient{SecretClient: secretClient(t, k.c, hubUser, hubGroups...), gets: &gets}, hubNamespace)
			a, err := New(store, Options{})
			if err != nil {
				t.Fatal(err)
			}
			auths[i] = a
			wg.Go(func() { errs[i] = a.Load(ctx, m) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("replica %d: %v", i, err)
			}
		}
		sources := map[string]int{}
		var roots [][]byte
		for _, a := range auths {
			sources[a.meshes[m.Name].source]++
			r, _ := a.RootsPEM(m.Name)
			roots = append(roots, r)
		}
		if !bytes.Equal(roots[0], roots[1]) {
			t.Fatal("the racing replicas ended with different roots")
		}
		if sources[sourceCreated] != 1 || sources[sourceGenerated] != 1 {
			t.Errorf("sources %v: want one replica to create the root and the other to load it", sources)
		}
		sec, err := k.admin.Get(ctx, hubNamespace, "nave-ca-race")
		if err != nil {
			t.Fatal(err)
		}
		if len(sec.Data) != 2 || !bytes.Equal(sec.Data[FileRootCert], roots[0]) || len(sec.Data[FileRootKey]) == 0 {
			t.Errorf("secret holds %d keys; want %s (the root the replicas use) and %s", len(sec.Data), FileRootCert, FileRootKey)
		}
		if sec.Labels["app.kubernetes.io/part-of"] != "nave" {
			t.Errorf("secret labels %v", sec.Labels)
		}

		// A restarted replica loads the same root.
		a, err := New(k.hubStore(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Load(ctx, m); err != nil {
			t.Fatal(err)
		}
		if r, _ := a.RootsPEM(m.Name); !bytes.Equal(r, roots[0]) {
			t.Error("after a restart the mesh has another root")
		}
		if got := a.meshes[m.Name].source; got != sourceGenerated {
			t.Errorf("source after restart %s, want %s", got, sourceGenerated)
		}
		// Its certificates verify against the root the others hold.
		chain := parseChain(t, mustSign(t, a, m.Name, "spiffe://race.example/ns/a/sa/b"))
		verifyLeaf(t, chain, mustRoots(t, auths[0], m.Name), time.Now())
	})

	t.Run("PluggedInSecretIsUsedAsIntermediate", func(t *testing.T) {
		p := newPluggedCA(t)
		if err := k.admin.Create(ctx, &Secret{Name: "nave-ca-m1", Namespace: hubNamespace, Data: p.files(t)}); err != nil {
			t.Fatal(err)
		}
		a, err := New(k.hubStore(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Load(ctx, mesh1); err != nil {
			t.Fatal(err)
		}
		if got := a.meshes["m1"].source; got != sourcePlugged {
			t.Fatalf("source %s, want %s", got, sourcePlugged)
		}
		chain := parseChain(t, mustSign(t, a, "m1", uriA))
		if len(chain) != 4 || !chain[1].Equal(p.ca.cert) || !chain[2].Equal(p.inter.cert) || !chain[3].Equal(p.root.cert) {
			t.Fatalf("chain of %d certificates; want leaf, the plugged-in CA, its intermediate and root", len(chain))
		}
		operatorRoot := x509.NewCertPool()
		operatorRoot.AddCert(p.root.cert)
		verifyLeaf(t, chain, operatorRoot, time.Now())
		sec, err := k.admin.Get(ctx, hubNamespace, "nave-ca-m1")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := sec.Data[FileRootKey]; ok || len(sec.Data) != 4 {
			t.Errorf("the plugged-in Secret was changed: %d keys", len(sec.Data))
		}
	})

	t.Run("GetAndCreate", func(t *testing.T) {
		s := k.hubStore(t)
		got, err := s.Get(ctx, "absent")
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("Get of a missing Secret = %v, %v; want an empty map", got, err)
		}
		blobs := map[string][]byte{"a.pem": []byte("a"), "b.pem": []byte("b")}
		if err := s.Create(ctx, "blobs", blobs); err != nil {
			t.Fatal(err)
		}
		err = s.Create(ctx, "blobs", map[string][]byte{"c.pem": []byte("c")})
		if !errors.Is(err, ErrExist) {
			t.Fatalf("second Create: %v, want ErrExist", err)
		}
		wantErrorSays(t, err, "nave-system/nave-ca-blobs")
		got, err = s.Get(ctx, "blobs")
		if err != nil || len(got) != 2 || string(got["a.pem"]) != "a" || string(got["b.pem"]) != "b" {
			t.Fatalf("Get = %q, %v; want what the first Create stored", got, err)
		}
		// Keys that are not blob names are not blobs.
		if err := k.admin.Create(ctx, &Secret{Name: "nave-ca-odd", Namespace: hubNamespace,
			Data: map[string][]byte{".hidden": []byte("x"), "UPPER.pem": []byte("x"), "ok.pem": []byte("y")}}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, "odd"); err != nil || len(got) != 1 || string(got["ok.pem"]) != "y" {
			t.Errorf("Get = %q, %v; want ok.pem only", got, err)
		}
		// Bad names are refused before a request is made.
		wantErrorSays(t, s.Create(ctx, "blobs2", map[string][]byte{"../x": nil}), "blob name")
		wantErrorSays(t, s.Create(ctx, "Bad_Mesh", map[string][]byte{"a.pem": nil}), "Bad_Mesh")
		wantErrorSays(t, s.Create(ctx, "blobs2", nil), "no blobs")
		if got := s.Location("acme"); got != "nave-system/nave-ca-acme" {
			t.Errorf("Location = %q", got)
		}
		// Another prefix keeps another set of CAs apart (the serving CA).
		other := NewSecretStore(secretClient(t, k.c, hubUser, hubGroups...), hubNamespace, WithSecretPrefix("nave-serving-ca-"))
		if got, err := other.Get(ctx, "blobs"); err != nil || len(got) != 0 {
			t.Fatalf("Get with another prefix = %q, %v; want nothing", got, err)
		}
		if err := other.Create(ctx, "blobs", map[string][]byte{"z.pem": []byte("z")}); err != nil {
			t.Fatal(err)
		}
		if sec, err := k.admin.Get(ctx, hubNamespace, "nave-serving-ca-blobs"); err != nil || string(sec.Data["z.pem"]) != "z" {
			t.Fatalf("Secret nave-serving-ca-blobs: %v", err)
		}
		if got := other.Location("hub"); got != "nave-system/nave-serving-ca-hub" {
			t.Errorf("Location = %q", got)
		}
	})

	t.Run("RotationUpdatesTheSecretGuardedByItsVersion", func(t *testing.T) {
		m := Mesh{Name: "rotate", TrustDomain: "rotate.example"}
		hub, err := New(k.hubStore(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := hub.Load(ctx, m); err != nil {
			t.Fatal(err)
		}
		// The operator runs the steps (navectl) with its own credentials.
		opStore := NewSecretStore(k.admin, hubNamespace)
		op, err := New(opStore, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := op.Load(ctx, m); err != nil {
			t.Fatal(err)
		}
		if _, err := op.AddRoot(ctx, m.Name, nil); err != nil {
			t.Fatal(err)
		}
		if changed, err := hub.Refresh(ctx); err != nil || len(changed) != 1 {
			t.Fatalf("the hub's refresh: %v, %v", changed, err)
		}
		if s, _ := hub.Rotation(m.Name); s.Phase != PhaseAdded || len(s.Roots) != 2 {
			t.Fatalf("the hub after add: %+v", s)
		}
		// A write between the read and the update loses: Conflict.
		old, err := opStore.Get(ctx, m.Name)
		if err != nil {
			t.Fatal(err)
		}
		sec, err := k.admin.Get(ctx, hubNamespace, SecretPrefix+m.Name)
		if err != nil {
			t.Fatal(err)
		}
		sec.Data["note.txt"] = []byte("changed by someone else")
		if err := k.admin.Update(ctx, sec); err != nil {
			t.Fatal(err)
		}
		if err := opStore.Replace(ctx, m.Name, old, map[string][]byte{FileRootCert: []byte("x")}); !errors.Is(err, ErrConflict) {
			t.Fatalf("replace after a concurrent write: %v, want ErrConflict", err)
		}
		// The step reads again and goes through.
		if _, err := op.SwitchRoot(ctx, m.Name, SwitchOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := hub.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if s, _ := hub.Rotation(m.Name); s.Phase != PhaseSwitched {
			t.Fatalf("the hub after switch: %+v", s)
		}
		after, _ := k.admin.Get(ctx, hubNamespace, SecretPrefix+m.Name)
		if string(after.Data["note.txt"]) != "changed by someone else" {
			t.Error("the rotation lost a key it does not own")
		}
	})

	t.Run("DestroyDeletesTheSecret", func(t *testing.T) {
		m := Mesh{Name: "gone", TrustDomain: "gone.example"}
		a, err := New(k.hubStore(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Load(ctx, m); err != nil {
			t.Fatal(err)
		}
		first, _ := a.RootsPEM(m.Name)
		if err := a.Destroy(ctx, m.Name); err != nil {
			t.Fatal(err)
		}
		if _, err := k.admin.Get(ctx, hubNamespace, "nave-ca-gone"); !apierrors.IsNotFound(err) {
			t.Fatalf("the destroyed CA's Secret: %v, want NotFound", err)
		}
		if err := a.Destroy(ctx, m.Name); err != nil {
			t.Errorf("Destroy of a mesh with no Secret: %v", err)
		}
		if err := a.Load(ctx, m); err != nil {
			t.Fatal(err)
		}
		if again, _ := a.RootsPEM(m.Name); bytes.Equal(first, again) {
			t.Error("Load after Destroy: the destroyed root came back")
		}
	})

	t.Run("RefusalsNameTheSecretAndWhy", func(t *testing.T) {
		// A user the RBAC does not allow.
		s := NewSecretStore(secretClient(t, k.c, "mallory"), hubNamespace)
		_, err := s.Get(ctx, "race")
		t.Logf("refused: %v", err)
		wantErrorSays(t, err, "nave-system/nave-ca-race", "get", "forbidden", `"mallory"`, "deploy/hub/rbac.yaml")
		err = s.Create(ctx, "new", map[string][]byte{"a.pem": []byte("a")})
		wantErrorSays(t, err, "nave-system/nave-ca-new", "create", "forbidden", `"mallory"`)
		if errors.Is(err, ErrExist) {
			t.Error("a refused Create matches ErrExist")
		}
		// The hub's own service account in a namespace the Role does not cover.
		other := NewSecretStore(secretClient(t, k.c, hubUser, hubGroups...), "default")
		_, err = other.Get(ctx, "race")
		wantErrorSays(t, err, "default/nave-ca-race", "get", "forbidden", "nave-hub")
		// The Authority's error names the mesh and the Secret.
		a, err := New(s, Options{})
		if err != nil {
			t.Fatal(err)
		}
		err = a.Load(ctx, Mesh{Name: "race", TrustDomain: "race.example"})
		wantErrorSays(t, err, `mesh "race"`, "nave-system/nave-ca-race", "forbidden")
	})
}

func mustSign(t *testing.T, a *Authority, mesh, uri string) []byte {
	t.Helper()
	chainPEM, err := a.Sign(ctx, mesh, certreqtest.For(t, uri), SignOptions{Identities: []ID{mustID(t, uri)}})
	if err != nil {
		t.Fatal(err)
	}
	return chainPEM
}

func mustRoots(t *testing.T, a *Authority, mesh string) *x509.CertPool {
	t.Helper()
	r, err := a.Roots(mesh)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
