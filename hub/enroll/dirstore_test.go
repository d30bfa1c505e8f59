package enroll_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/enroll"
)

func openStore(t testing.TB, dir string, opts ...enroll.DirOption) *enroll.DirStore {
	t.Helper()
	s, err := enroll.OpenDir(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTokenIsSingleUseAndStoredHashed(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	tok, info, err := s.CreateToken(t.Context(), "acme", "east", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != enroll.TokenPending || info.Mesh != "acme" || info.Cluster != "east" || !strings.Contains(tok, info.ID) {
		t.Fatalf("CreateToken info = %+v for %s", info, info.ID)
	}
	secret := tok[strings.LastIndex(tok, ".")+1:]
	// Nothing on disk holds the secret; every file is private.
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("%s holds the token secret", p)
		}
		if st, _ := e.Info(); st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, st.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
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
}

func TestRedeemRefusalsAreDistinctAndChangeNothing(t *testing.T) {
	clk := newClock()
	s := openStore(t, t.TempDir(), enroll.WithClock(clk.Now))
	good, goodInfo, err := s.CreateToken(t.Context(), "acme", "east", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	short, _, err := s.CreateToken(t.Context(), "acme", "west", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	used, _, err := s.CreateToken(t.Context(), "acme", "north", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redeem(t.Context(), used); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
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
}

func TestConcurrentRedeemsAcrossReplicasOneWins(t *testing.T) {
	dir := t.TempDir()
	// Four "replicas" (stores on one directory), eight redeemers each.
	var replicas []*enroll.DirStore
	for range 4 {
		replicas = append(replicas, openStore(t, dir))
	}
	for round := range 20 {
		tok, _, err := replicas[0].CreateToken(t.Context(), "acme", "east", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, used := 0, 0
		start := make(chan struct{})
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
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
			}()
		}
		close(start)
		wg.Wait()
		if wins != 1 || used != 31 {
			t.Fatalf("round %d: %d redeems won and %d were told the token was used; want 1 and 31", round, wins, used)
		}
	}
}

func TestStoreSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	used, _, err := s.CreateToken(t.Context(), "acme", "east", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redeem(t.Context(), used); err != nil {
		t.Fatal(err)
	}
	pending, pendingInfo, err := s.CreateToken(t.Context(), "acme", "west", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rec := enroll.ClusterRecord{Mesh: "acme", Cluster: "east", TrustDomain: "acme.example", Serial: "2a",
		NotAfter: time.Now().Add(time.Hour).UTC().Round(time.Second), EnrolledAt: time.Now().UTC().Round(time.Second), TokenID: "x"}
	if err := s.RecordCluster(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	// "a-b" sorts after "a" as a mesh name, before it as a file name prefix.
	for _, id := range [][2]string{{"beta", "east"}, {"a-b", "x"}, {"a", "y"}} {
		if err := s.RecordCluster(t.Context(), enroll.ClusterRecord{Mesh: id[0], Cluster: id[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Revoke(t.Context(), "beta", "east"); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, dir) // the restarted hub
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
	if _, err := s2.Redeem(t.Context(), used); !errors.Is(err, enroll.ErrTokenUsed) {
		t.Fatalf("after restart a used token: %v, want ErrTokenUsed", err)
	}
	if info, err := s2.Redeem(t.Context(), pending); err != nil || info.ID != pendingInfo.ID {
		t.Fatalf("after restart a pending token: %+v, %v", info, err)
	}
	if _, err := s2.Cluster(t.Context(), "acme", "west"); !errors.Is(err, enroll.ErrNotEnrolled) {
		t.Fatalf("Cluster of a cluster never recorded: %v, want ErrNotEnrolled", err)
	}
}

func TestRevokedClusterGetsNoToken(t *testing.T) {
	s := openStore(t, t.TempDir())
	if err := s.Revoke(t.Context(), "acme", "east"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateToken(t.Context(), "acme", "east", time.Hour); !errors.Is(err, enroll.ErrRevoked) {
		t.Fatalf("token for a revoked cluster: %v, want ErrRevoked", err)
	}
	list, _ := s.ListTokens(t.Context())
	if len(list) != 0 {
		t.Fatalf("tokens after a refused create: %+v", list)
	}
}

func TestCreateTokenRefusesBadInput(t *testing.T) {
	s := openStore(t, t.TempDir())
	for _, c := range []struct {
		mesh, cluster string
		ttl           time.Duration
	}{
		{"acme", "East", time.Hour},
		{"acme", "../east", time.Hour},
		{"acme.x", "east", time.Hour},
		{"", "east", time.Hour},
		{"acme", "east", 0},
		{"acme", "east", -time.Second},
		{"acme", "east", enroll.MaxTokenTTL + time.Second},
	} {
		if tok, _, err := s.CreateToken(t.Context(), c.mesh, c.cluster, c.ttl); err == nil {
			t.Errorf("CreateToken(%q, %q, %s) = %s, want an error", c.mesh, c.cluster, c.ttl, tok)
		}
	}
	if list, _ := s.ListTokens(t.Context()); len(list) != 0 {
		t.Fatalf("refused creates left tokens: %+v", list)
	}
}

func TestStrayFilesAreIgnored(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	if err := s.Revoke(t.Context(), "acme", "east"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"revoked/.acme.west.json.123", "revoked/README", "clusters/.x.y.json.1", "clusters/notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	revs, err := s.Revocations(t.Context())
	if err != nil || len(revs) != 1 {
		t.Fatalf("Revocations = %+v, %v; want only acme/east", revs, err)
	}
	if cs, err := s.Clusters(t.Context()); err != nil || len(cs) != 0 {
		t.Fatalf("Clusters = %+v, %v; want none", cs, err)
	}
}
