package enroll_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/ingest"
)

// storeFixture is a kind of Store under the contract every Store keeps.
type storeFixture struct {
	// fresh starts from empty state and returns an opener over it: every
	// call opens another instance (a hub replica, the same replica
	// restarted, navectl) sharing that state.
	fresh func(t *testing.T) func(opts ...enroll.Option) enroll.Store
	// rounds and racers size the redeem race.
	rounds, racers int
}

// testStoreContract runs what every Store must do, whatever keeps it.
func testStoreContract(t *testing.T, f storeFixture) {
	t.Run("KnownClustersAreRememberedOnce", func(t *testing.T) {
		s := f.fresh(t)()
		for _, id := range [][2]string{{"acme", "west"}, {"acme", "east"}, {"acme", "east"}, {"beta", "east"}} {
			if err := s.RememberCluster(t.Context(), id[0], id[1]); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.KnownClusters(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want := []ingest.ClusterIdentity{{Mesh: "acme", Cluster: "east"}, {Mesh: "acme", Cluster: "west"}, {Mesh: "beta", Cluster: "east"}}
		if !slices.Equal(got, want) {
			t.Fatalf("KnownClusters = %v, want %v", got, want)
		}
		if err := s.RememberCluster(t.Context(), "Bad_Mesh", "east"); err == nil {
			t.Error("an invalid mesh name was remembered")
		}
	})
	t.Run("TokenIsSingleUse", func(t *testing.T) {
		s := f.fresh(t)()
		tok, info, err := s.CreateToken(t.Context(), "acme", "east", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != enroll.TokenPending || info.Mesh != "acme" || info.Cluster != "east" || !strings.Contains(tok, info.ID) {
			t.Fatalf("CreateToken info = %+v for %s", info, info.ID)
		}
		got, err := s.Redeem(t.Context(), tok)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != info.ID || got.Mesh != "acme" || got.Cluster != "east" || got.State != enroll.TokenUsed || got.UsedAt == nil {
			t.Fatalf("Redeem = %+v", got)
		}
		if _, err := s.Redeem(t.Context(), tok); !errors.Is(err, enroll.ErrTokenUsed) {
			t.Fatalf("second Redeem: %v, want ErrTokenUsed", err)
		}
		list, err := s.ListTokens(t.Context())
		if err != nil || len(list) != 1 || list[0].State != enroll.TokenUsed || list[0].UsedAt == nil {
			t.Fatalf("ListTokens = %+v, %v; want the one token, used", list, err)
		}
	})

	t.Run("RedeemRefusalsAreDistinctAndChangeNothing", func(t *testing.T) {
		clk := newClock()
		s := f.fresh(t)(enroll.WithClock(clk.Now))
		good, goodInfo, err := s.CreateToken(t.Context(), "acme", "east", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		short, _, err := s.CreateToken(t.Context(), "acme", "west", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		used, _, err := s.CreateToken(t.Context(), "acme", "north", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Redeem(t.Context(), used); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute) // used has expired too: it still says used
		randomSecret := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
		before, err := s.ListTokens(t.Context())
		if err != nil {
			t.Fatal(err)
		}

		for _, c := range []struct {
			name, token string
			want        error
		}{
			{"malformed", "nave-join.nope", enroll.ErrTokenMalformed},
			{"malformed: secret of the good token with whitespace", good + " ", enroll.ErrTokenMalformed},
			{"unknown id", "nave-join.0000000000000000." + randomSecret, enroll.ErrTokenUnknown},
			{"real id, forged secret", "nave-join." + goodInfo.ID + "." + randomSecret, enroll.ErrTokenInvalid},
			{"used id, forged secret", used[:strings.LastIndex(used, ".")+1] + randomSecret, enroll.ErrTokenInvalid},
			{"expired", short, enroll.ErrTokenExpired},
			{"reused", used, enroll.ErrTokenUsed},
		} {
			_, err := s.Redeem(t.Context(), c.token)
			if !errors.Is(err, c.want) {
				t.Errorf("%s: Redeem error %v, want %v", c.name, err, c.want)
			}
			for _, other := range []error{enroll.ErrTokenMalformed, enroll.ErrTokenUnknown, enroll.ErrTokenInvalid,
				enroll.ErrTokenUsed, enroll.ErrTokenExpired} {
				if other != c.want && errors.Is(err, other) {
					t.Errorf("%s: error %v is also %v", c.name, err, other)
				}
			}
		}
		after, err := s.ListTokens(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(before, after) {
			t.Errorf("refused redeems changed the tokens:\nbefore %+v\nafter  %+v", before, after)
		}
		// The good token still works after all that.
		if _, err := s.Redeem(t.Context(), good); err != nil {
			t.Fatalf("good token after refused attempts: %v", err)
		}
	})

	t.Run("ConcurrentRedeemsAcrossReplicasOneWins", func(t *testing.T) {
		open := f.fresh(t)
		// Four replicas, each with its own store instance.
		var replicas []enroll.Store
		for range 4 {
			replicas = append(replicas, open())
		}
		for round := range f.rounds {
			tok, _, err := replicas[0].CreateToken(t.Context(), "acme", "east", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			wins, used := 0, 0
			start := make(chan struct{})
			for i := range f.racers {
				wg.Go(func() {
					<-start
					_, err := replicas[i%len(replicas)].Redeem(t.Context(), tok)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins++
					case errors.Is(err, enroll.ErrTokenUsed):
						used++
					default:
						t.Errorf("round %d: Redeem: %v", round, err)
					}
				})
			}
			close(start)
			wg.Wait()
			if wins != 1 || used != f.racers-1 {
				t.Fatalf("round %d: %d redeems won and %d were told the token was used; want 1 and %d", round, wins, used, f.racers-1)
			}
		}
	})

	t.Run("SurvivesRestart", func(t *testing.T) {
		open := f.fresh(t)
		s := open()
		used, _, err := s.CreateToken(t.Context(), "acme", "east", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Redeem(t.Context(), used); err != nil {
			t.Fatal(err)
		}
		pending, pendingInfo, err := s.CreateToken(t.Context(), "acme", "west", time.Hour, "shop", "bank")
		if err != nil {
			t.Fatal(err)
		}
		rec := enroll.ClusterRecord{Mesh: "acme", Cluster: "east", TrustDomain: "acme.example", Serial: "2a",
			NotAfter: time.Now().Add(time.Hour).UTC().Round(time.Second), EnrolledAt: time.Now().UTC().Round(time.Second), TokenID: "x",
			Namespaces: []string{"shop"}}
		if err := s.RecordCluster(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
		// "a-b" sorts after "a" as a mesh name, before it as a name prefix.
		for _, id := range [][2]string{{"beta", "east"}, {"a-b", "x"}, {"a", "y"}} {
			if err := s.RecordCluster(t.Context(), enroll.ClusterRecord{Mesh: id[0], Cluster: id[1]}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Revoke(t.Context(), "beta", "east"); err != nil {
			t.Fatal(err)
		}
		tokensBefore, err := s.ListTokens(t.Context())
		if err != nil {
			t.Fatal(err)
		}

		s2 := open() // the restarted hub
		got, err := s2.Cluster(t.Context(), "acme", "east")
		if err != nil || !reflect.DeepEqual(got, rec) {
			t.Fatalf("after restart Cluster = %+v, %v; want %+v", got, err, rec)
		}
		all, err := s2.Clusters(t.Context())
		var ids []string
		for _, c := range all {
			ids = append(ids, c.Identity().String())
		}
		if err != nil || !reflect.DeepEqual(ids, []string{"a/y", "a-b/x", "acme/east", "beta/east"}) {
			t.Fatalf("after restart Clusters = %v, %v; want all four, sorted", ids, err)
		}
		if meshes, err := s2.Meshes(t.Context()); err != nil || !reflect.DeepEqual(meshes, []string{"a", "a-b", "acme", "beta"}) {
			t.Fatalf("after restart Meshes = %v, %v", meshes, err)
		}
		if ok, err := s2.Revoked(t.Context(), "beta", "east"); err != nil || !ok {
			t.Fatalf("after restart Revoked(beta/east) = %v, %v", ok, err)
		}
		if ok, err := s2.Revoked(t.Context(), "acme", "east"); err != nil || ok {
			t.Fatalf("after restart Revoked(acme/east) = %v, %v", ok, err)
		}
		if revs, err := s2.Revocations(t.Context()); err != nil || len(revs) != 1 || revs[0].Identity().String() != "beta/east" || revs[0].RevokedAt.IsZero() {
			t.Fatalf("after restart Revocations = %+v, %v", revs, err)
		}
		if tokens, err := s2.ListTokens(t.Context()); err != nil || !sameTokens(tokens, tokensBefore) {
			t.Fatalf("after restart ListTokens = %+v, %v; want %+v", tokens, err, tokensBefore)
		}
		if _, err := s2.Redeem(t.Context(), used); !errors.Is(err, enroll.ErrTokenUsed) {
			t.Fatalf("after restart a used token: %v, want ErrTokenUsed", err)
		}
		if info, err := s2.Redeem(t.Context(), pending); err != nil || info.ID != pendingInfo.ID || !reflect.DeepEqual(info.Namespaces, []string{"bank", "shop"}) {
			t.Fatalf("after restart a pending token: %+v, %v", info, err)
		}
		if _, err := s2.Cluster(t.Context(), "acme", "west"); !errors.Is(err, enroll.ErrNotEnrolled) {
			t.Fatalf("Cluster of a cluster never recorded: %v, want ErrNotEnrolled", err)
		}
	})

	t.Run("RecordClusterReplacesAcrossReplicas", func(t *testing.T) {
		open := f.fresh(t)
		a, b := open(), open()
		first := enroll.ClusterRecord{Mesh: "acme", Cluster: "east", TrustDomain: "acme.example", Serial: "1", TokenID: "t"}
		if err := a.RecordCluster(t.Context(), first); err != nil {
			t.Fatal(err)
		}
		renewed := first
		renewed.Serial, renewed.RenewedAt = "2", time.Now().UTC().Round(time.Second)
		if err := b.RecordCluster(t.Context(), renewed); err != nil {
			t.Fatal(err)
		}
		if got, err := a.Cluster(t.Context(), "acme", "east"); err != nil || !reflect.DeepEqual(got, renewed) {
			t.Fatalf("Cluster after another replica's renewal = %+v, %v; want %+v", got, err, renewed)
		}
		// Two replicas recording a new cluster at once both succeed; one
		// record stays.
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, s := range []enroll.Store{a, b} {
			wg.Go(func() {
				errs[i] = s.RecordCluster(t.Context(), enroll.ClusterRecord{Mesh: "beta", Cluster: "west", Serial: string(rune('a' + i))})
			})
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("concurrent RecordCluster: %v, %v", errs[0], errs[1])
		}
		if got, err := b.Cluster(t.Context(), "beta", "west"); err != nil || (got.Serial != "a" && got.Serial != "b") {
			t.Fatalf("Cluster after concurrent records = %+v, %v", got, err)
		}
		if meshes, err := a.Meshes(t.Context()); err != nil || !reflect.DeepEqual(meshes, []string{"acme", "beta"}) {
			t.Fatalf("Meshes = %v, %v", meshes, err)
		}
	})

	t.Run("RevocationIsSeenByEveryReplica", func(t *testing.T) {
		clk := newClock()
		open := f.fresh(t)
		hubA, hubB, navectl := open(), open(), open(enroll.WithClock(clk.Now))
		if err := hubA.RecordCluster(t.Context(), enroll.ClusterRecord{Mesh: "acme", Cluster: "east"}); err != nil {
			t.Fatal(err)
		}
		if ok, err := hubB.Revoked(t.Context(), "acme", "east"); err != nil || ok {
			t.Fatalf("Revoked before the revocation = %v, %v", ok, err)
		}
		if err := navectl.Revoke(t.Context(), "acme", "east"); err != nil {
			t.Fatal(err)
		}
		first := clk.Now().UTC().Round(0)
		clk.Advance(time.Hour)
		// Revoking again keeps the first revocation's time.
		if err := navectl.Revoke(t.Context(), "acme", "east"); err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]enroll.Store{"hub A": hubA, "hub B": hubB} {
			if ok, err := s.Revoked(t.Context(), "acme", "east"); err != nil || !ok {
				t.Errorf("%s: Revoked = %v, %v", name, ok, err)
			}
			revs, err := s.Revocations(t.Context())
			if err != nil || len(revs) != 1 || revs[0].Identity().String() != "acme/east" || !revs[0].RevokedAt.Equal(first) {
				t.Errorf("%s: Revocations = %+v, %v; want acme/east revoked at %s", name, revs, err, first)
			}
			if _, _, err := s.CreateToken(t.Context(), "acme", "east", time.Hour); !errors.Is(err, enroll.ErrRevoked) {
				t.Errorf("%s: token for a revoked cluster: %v, want ErrRevoked", name, err)
			}
		}
		if list, err := hubB.ListTokens(t.Context()); err != nil || len(list) != 0 {
			t.Fatalf("tokens after refused creates: %+v, %v", list, err)
		}
	})

	t.Run("PurgeMeshLeavesNothingOfItAndAllOfOthers", func(t *testing.T) {
		open := f.fresh(t)
		s := open()
		ctx := t.Context()
		used, _, err := s.CreateToken(ctx, "gone", "east", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		pending, _, err := s.CreateToken(ctx, "gone", "west", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Redeem(ctx, used); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordCluster(ctx, enroll.ClusterRecord{Mesh: "gone", Cluster: "east", Serial: "1"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Revoke(ctx, "gone", "north"); err != nil {
			t.Fatal(err)
		}
		if err := s.RememberCluster(ctx, "gone", "east"); err != nil {
			t.Fatal(err)
		}
		if err := s.RememberCluster(ctx, "acme", "east"); err != nil {
			t.Fatal(err)
		}
		// Another mesh, whose state stays whole.
		keep, _, err := s.CreateToken(ctx, "acme", "east", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RecordCluster(ctx, enroll.ClusterRecord{Mesh: "acme", Cluster: "east", Serial: "2"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Revoke(ctx, "acme", "north"); err != nil {
			t.Fatal(err)
		}

		if err := s.PurgeMesh(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		if err := s.PurgeMesh(ctx, "gone"); err != nil {
			t.Fatalf("PurgeMesh again: %v", err)
		}
		s = open() // another replica sees it purged
		for _, tok := range []string{used, pending} {
			if _, err := s.Redeem(ctx, tok); !errors.Is(err, enroll.ErrTokenUnknown) {
				t.Errorf("Redeem of a purged mesh's token: %v, want ErrTokenUnknown", err)
			}
		}
		tokens, err := s.ListTokens(ctx)
		if err != nil || len(tokens) != 1 || tokens[0].Mesh != "acme" {
			t.Errorf("ListTokens = %+v, %v; want acme's one token", tokens, err)
		}
		if _, err := s.Cluster(ctx, "gone", "east"); !errors.Is(err, enroll.ErrNotEnrolled) {
			t.Errorf("Cluster of a purged mesh: %v, want ErrNotEnrolled", err)
		}
		if revoked, err := s.Revoked(ctx, "gone", "north"); err != nil || revoked {
			t.Errorf("Revoked of a purged mesh = %v, %v; want false", revoked, err)
		}
		clusters, err := s.Clusters(ctx)
		if err != nil || len(clusters) != 1 || clusters[0].Mesh != "acme" {
			t.Errorf("Clusters = %+v, %v; want acme's one", clusters, err)
		}
		revs, err := s.Revocations(ctx)
		if err != nil || len(revs) != 1 || revs[0].Mesh != "acme" {
			t.Errorf("Revocations = %+v, %v; want acme's one", revs, err)
		}
		if meshes, err := s.Meshes(ctx); err != nil || !reflect.DeepEqual(meshes, []string{"acme"}) {
			t.Errorf("Meshes = %v, %v; want [acme]", meshes, err)
		}
		if known, err := s.KnownClusters(ctx); err != nil || !slices.Equal(known, []ingest.ClusterIdentity{{Mesh: "acme", Cluster: "east"}}) {
			t.Errorf("KnownClusters = %v, %v; want acme/east alone", known, err)
		}
		if _, err := s.Redeem(ctx, keep); err != nil {
			t.Errorf("Redeem of the other mesh's token: %v", err)
		}
	})

	t.Run("CreateTokenRefusesBadInput", func(t *testing.T) {
		s := f.fresh(t)()
		for _, c := range []struct {
			mesh, cluster string
			ttl           time.Duration
			namespaces    []string
		}{
			{"acme", "East", time.Hour, nil},
			{"acme", "../east", time.Hour, nil},
			{"acme.x", "east", time.Hour, nil},
			{"", "east", time.Hour, nil},
			{"acme", "east", 0, nil},
			{"acme", "east", -time.Second, nil},
			{"acme", "east", enroll.MaxTokenTTL + time.Second, nil},
			{"acme", "east", time.Hour, []string{"Not_A_Label"}},
		} {
			if tok, _, err := s.CreateToken(t.Context(), c.mesh, c.cluster, c.ttl, c.namespaces...); err == nil {
				t.Errorf("CreateToken(%q, %q, %s, %q) = %s, want an error", c.mesh, c.cluster, c.ttl, c.namespaces, tok)
			}
		}
		if list, _ := s.ListTokens(t.Context()); len(list) != 0 {
			t.Fatalf("refused creates left tokens: %+v", list)
		}
		for _, id := range [][2]string{{"acme", "East"}, {"acme.x", "y"}} {
			if err := s.RecordCluster(t.Context(), enroll.ClusterRecord{Mesh: id[0], Cluster: id[1]}); err == nil {
				t.Errorf("RecordCluster(%s/%s) succeeded", id[0], id[1])
			}
			if err := s.Revoke(t.Context(), id[0], id[1]); err == nil {
				t.Errorf("Revoke(%s/%s) succeeded", id[0], id[1])
			}
		}
	})
}

// sameTokens compares token lists, used times to the second (a store may
// keep them no finer).
func sameTokens(a, b []enroll.TokenInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if (x.UsedAt == nil) != (y.UsedAt == nil) || x.UsedAt != nil && !x.UsedAt.Truncate(time.Second).Equal(y.UsedAt.Truncate(time.Second)) {
			return false
		}
		x.UsedAt, y.UsedAt = nil, nil
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func TestDirStoreContract(t *testing.T) {
	testStoreContract(t, storeFixture{
		fresh: func(t *testing.T) func(...enroll.Option) enroll.Store {
			dir := t.TempDir()
			return func(opts ...enroll.Option) enroll.Store { return openStore(t, dir, opts...) }
		},
		rounds: 20, racers: 32,
	})
}
