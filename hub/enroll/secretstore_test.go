package enroll_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
)

// The Secret store runs against a real kube-apiserver with deploy/hub's
// RBAC applied, acting as the hub's service account.
func TestSecretStore(t *testing.T) {
	k := enrolltest.StartKube(t)
	ns := enrolltest.HubNamespace

	testStoreContract(t, storeFixture{
		fresh: func(t *testing.T) func(...enroll.Option) enroll.Store {
			k.ResetEnrollment(t)
			return func(opts ...enroll.Option) enroll.Store { return k.HubStore(t, opts...) }
		},
		rounds: 4, racers: 12,
	})

	t.Run("TokenIsKeptHashedInImmutableSecrets", func(t *testing.T) {
		k.ResetEnrollment(t)
		s := k.HubStore(t)
		tok, info, err := s.CreateToken(t.Context(), "acme", "east", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Redeem(t.Context(), tok); err != nil {
			t.Fatal(err)
		}
		if err := s.Revoke(t.Context(), "acme", "west"); err != nil {
			t.Fatal(err)
		}
		secret := tok[strings.LastIndex(tok, ".")+1:]
		all, err := k.AdminSecrets.List(t.Context(), ns, "nave.io/enroll")
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, sec := range all {
			names[sec.Name] = sec.Immutable
			for key, b := range sec.Data {
				if strings.Contains(string(b), secret) {
					t.Errorf("secret %s key %s holds the token secret", sec.Name, key)
				}
			}
		}
		for _, name := range []string{"nave-enroll-token-" + info.ID, "nave-enroll-token-" + info.ID + "-used", "nave-enroll-revoked-acme.west"} {
			if immutable, ok := names[name]; !ok || !immutable {
				t.Errorf("secret %s: present %v, immutable %v; want an immutable Secret (have %v)", name, ok, immutable, names)
			}
		}
	})

	t.Run("RacingEnrollsAcrossReplicasUseTheTokenOnce", func(t *testing.T) {
		k.ResetEnrollment(t)
		// Three hub replicas, each with its own store instance (its own
		// client), sharing the CA and the API server.
		ca := enrolltest.NewCA()
		ca.AddMesh(enrolltest.MeshA, enrolltest.TrustDomainA)
		var hubs []*enrolltest.Hub
		for range 3 {
			hubs = append(hubs, enrolltest.StartHubWithCA(t, ca, enrolltest.HubOptions{Store: k.HubStore(t)}))
		}
		tok, info, err := k.HubStore(t).CreateToken(t.Context(), enrolltest.MeshA, "east", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		const racers = 12
		results := make([]enrollment, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			h := hubs[i%len(hubs)]
			conn := h.Dial(t, nil) // connected before the start
			wg.Go(func() {
				<-start
				results[i] = enrollOn(t, conn, tok)
			})
		}
		close(start)
		wg.Wait()
		var winner *enrollment
		for i := range results {
			switch r := &results[i]; {
			case r.err == nil:
				if winner != nil {
					t.Fatalf("the token enrolled twice (replicas %d and another)", i%len(hubs))
				}
				winner = r
			default:
				wantStatus(t, "a losing Enroll", r.err, codes.Unauthenticated, "already used")
			}
		}
		if winner == nil {
			t.Fatal("no Enroll won")
		}
		// Every replica sees the enrolled cluster and its spent token.
		for i, h := range hubs {
			rec, err := h.Store.Cluster(t.Context(), enrolltest.MeshA, "east")
			if err != nil || rec.TokenID != info.ID {
				t.Errorf("replica %d: Cluster = %+v, %v", i, rec, err)
			}
			if got := h.Counter(t, "nave_hub_enroll_refusals_total", "used_token"); got > racers-1 {
				t.Errorf("replica %d counted %v used-token refusals", i, got)
			}
		}
		// Renewal works on any replica; a revocation written by another
		// store instance (navectl) is refused by all of them.
		for i, h := range hubs {
			if _, err := renewCall(t, h, winner.cert); err != nil {
				t.Fatalf("renew on replica %d: %v", i, err)
			}
		}
		if err := k.HubStore(t).Revoke(t.Context(), enrolltest.MeshA, "east"); err != nil {
			t.Fatal(err)
		}
		for i, h := range hubs {
			_, err := renewCall(t, h, winner.cert)
			wantStatus(t, "renewal of a revoked cluster on replica "+string(rune('0'+i)), err, codes.PermissionDenied, "acme/east is revoked")
		}
	})

	t.Run("BadSecretsAreRefusedNamingThem", func(t *testing.T) {
		k.ResetEnrollment(t)
		s := k.HubStore(t)
		good, goodInfo, err := s.CreateToken(t.Context(), "acme", "east", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		id := goodInfo.ID
		tokenLabels := map[string]string{"nave.io/enroll": "token"}
		put := func(name string, labels map[string]string, data map[string][]byte) {
			t.Helper()
			if err := k.AdminSecrets.Create(t.Context(), &ca.Secret{Name: name, Namespace: ns, Labels: labels, Data: data}); err != nil {
				t.Fatal(err)
			}
		}
		// Hand-made tokens: no data, garbage, another token's record.
		token := func(id string) string { return "nave-join." + id + good[len("nave-join.")+16:] }
		put("nave-enroll-token-00000000000000a1", tokenLabels, nil)
		put("nave-enroll-token-00000000000000a2", tokenLabels, map[string][]byte{"token.json": []byte("{garbage")})
		sec, err := k.AdminSecrets.Get(t.Context(), ns, "nave-enroll-token-"+id)
		if err != nil {
			t.Fatal(err)
		}
		put("nave-enroll-token-00000000000000a3", tokenLabels, sec.Data)
		for _, c := range []struct{ id, want string }{
			{"00000000000000a1", "no key token.json (it holds no data)"},
			{"00000000000000a2", "key token.json: not JSON"},
			{"00000000000000a3", `key token.json: id "` + id + `", but the Secret is named for token "00000000000000a3"`},
		} {
			_, err := s.Redeem(t.Context(), token(c.id))
			wantErrorSays(t, err, "nave-system/nave-enroll-token-"+c.id, c.want)
			for _, refusal := range []error{enroll.ErrTokenUnknown, enroll.ErrTokenInvalid, enroll.ErrTokenUsed, enroll.ErrTokenExpired} {
				if errors.Is(err, refusal) {
					t.Errorf("a bad Secret is refused as %v", refusal)
				}
			}
		}
		_, err = s.ListTokens(t.Context())
		wantErrorSays(t, err, "nave-system/nave-enroll-token-00000000000000a", "token.json")
		// The good token is unharmed.
		if _, err := s.Redeem(t.Context(), good); err != nil {
			t.Fatalf("the good token next to bad ones: %v", err)
		}

		// A cluster record of garbage, or of another cluster.
		put("nave-enroll-cluster-acme.bad", map[string]string{"nave.io/enroll": "cluster"}, map[string][]byte{"cluster.json": []byte("\x00\x01")})
		_, err = s.Cluster(t.Context(), "acme", "bad")
		wantErrorSays(t, err, "nave-system/nave-enroll-cluster-acme.bad", "key cluster.json: not JSON")
		if errors.Is(err, enroll.ErrNotEnrolled) {
			t.Error("a garbage record counts as not enrolled")
		}
		put("nave-enroll-cluster-acme.other", nil, map[string][]byte{"cluster.json": []byte(`{"mesh":"beta","cluster":"x"}`)})
		_, err = s.Cluster(t.Context(), "acme", "other")
		wantErrorSays(t, err, "nave-system/nave-enroll-cluster-acme.other", "holds the record of beta/x, but the Secret is named for acme/other")
		_, err = s.Clusters(t.Context())
		wantErrorSays(t, err, "nave-system/nave-enroll-cluster-acme.bad")

		// A revocation is its Secret: garbage in it still revokes, at the
		// Secret's creation time.
		put("nave-enroll-revoked-acme.gone", map[string]string{"nave.io/enroll": "revocation"}, map[string][]byte{"x": []byte("?")})
		if ok, err := s.Revoked(t.Context(), "acme", "gone"); err != nil || !ok {
			t.Errorf("Revoked by a hand-made revocation = %v, %v", ok, err)
		}
		revs, err := s.Revocations(t.Context())
		if err != nil || len(revs) != 1 || revs[0].Identity().String() != "acme/gone" || time.Since(revs[0].RevokedAt) > time.Minute {
			t.Errorf("Revocations = %+v, %v; want acme/gone revoked just now", revs, err)
		}
	})

	t.Run("RefusalsNameTheSecretAndWhy", func(t *testing.T) {
		k.ResetEnrollment(t)
		mallory := enroll.NewSecretStore(k.Client(t, "mallory"), ns)
		_, _, err := mallory.CreateToken(t.Context(), "acme", "east", time.Hour)
		t.Logf("refused: %v", err)
		wantErrorSays(t, err, "nave-system/nave-enroll-revoked-acme.east", "get", "forbidden", `"mallory"`, "deploy/hub/rbac.yaml")
		_, err = mallory.ListTokens(t.Context())
		wantErrorSays(t, err, "secrets of namespace nave-system", "list", "forbidden")
		_, err = mallory.Redeem(t.Context(), "nave-join.0123456789abcdef.AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8")
		wantErrorSays(t, err, "nave-system/nave-enroll-token-0123456789abcdef", "get", "forbidden")
		if errors.Is(err, enroll.ErrTokenUnknown) {
			t.Error("a refused get is an unknown token")
		}
		if ok, err := mallory.Revoked(t.Context(), "acme", "east"); err == nil || ok {
			t.Errorf("Revoked as mallory = %v, %v; want an error, never \"not revoked\"", ok, err)
		}
		// The hub's own service account in a namespace the Role does not cover.
		other := enroll.NewSecretStore(k.HubClient(t), "default")
		err = other.RecordCluster(t.Context(), enroll.ClusterRecord{Mesh: "acme", Cluster: "east"})
		wantErrorSays(t, err, "default/nave-enroll-cluster-acme.east", "update", "forbidden", "nave-hub")
	})
}

// wantErrorSays fails unless err's message contains every one of want.
func wantErrorSays(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("no error; want one saying %q", want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}
