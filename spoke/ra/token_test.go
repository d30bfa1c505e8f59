package ra

import (
	"strings"
	"testing"
)

func TestParseBearer(t *testing.T) {
	const jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln-_"
	for _, tc := range []struct {
		name   string
		values []string
		want   string
		err    string
	}{
		{"istio's form", []string{"Bearer " + jwt}, jwt, ""},
		{"scheme in any case", []string{"bearer " + jwt}, jwt, ""},
		{"padding", []string{"Bearer abc+/=="}, "abc+/==", ""},
		{"none", nil, "", "no \"authorization"},
		{"two values", []string{"Bearer a", "Bearer b"}, "", "2 authorization metadata values"},
		{"another scheme", []string{"Basic " + jwt}, "", `not "Bearer <token>"`},
		{"no space", []string{"Bearer"}, "", `not "Bearer <token>"`},
		{"empty token", []string{"Bearer "}, "", "empty bearer token"},
		{"two spaces", []string{"Bearer  " + jwt}, "", "not allowed"},
		{"trailing space", []string{"Bearer " + jwt + " "}, "", "not allowed"},
		{"a space inside", []string{"Bearer ab cd"}, "", "at byte 2"},
		{"only padding", []string{"Bearer ="}, "", "starts with '='"},
		{"after padding", []string{"Bearer ab=c"}, "", "after its '=' padding"},
		{"control character", []string{"Bearer ab\ncd"}, "", "not allowed"},
		{"non-ASCII", []string{"Bearer abç"}, "", "not allowed"},
		{"too long", []string{"Bearer " + strings.Repeat("a", MaxTokenSize+1)}, "", "longer than"},
		{"just long enough", []string{"Bearer " + strings.Repeat("a", MaxTokenSize)}, strings.Repeat("a", MaxTokenSize), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBearer(tc.values)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Errorf("parseBearer = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseBearer = %q, %v; want an error saying %q", got, err, tc.err)
			}
		})
	}
}

func TestParseServiceAccount(t *testing.T) {
	for _, tc := range []struct {
		user, ns, sa string
	}{
		{"system:serviceaccount:shop:cart", "shop", "cart"},
		{"system:serviceaccount:shop:cart.v1", "shop", "cart.v1"},
		{"kubetest-admin", "", ""},
		{"system:serviceaccount:shop", "", ""},
		{"system:serviceaccount::cart", "", ""},
		{"system:serviceaccount:shop:", "", ""},
		{"system:serviceaccount:shop:cart:x", "", ""},
		{"system:serviceaccounts:shop:cart", "", ""},
		{"System:ServiceAccount:shop:cart", "", ""},
		{"", "", ""},
	} {
		ns, sa, err := parseServiceAccount(tc.user)
		if ns != tc.ns || sa != tc.sa || (err == nil) != (tc.ns != "") {
			t.Errorf("parseServiceAccount(%q) = %q, %q, %v; want %q, %q", tc.user, ns, sa, err, tc.ns, tc.sa)
		}
	}
}

// FuzzParseBearer: what parseBearer accepts is exactly "<scheme> <token>"
// with the scheme "bearer" in any case and a token68 within the size limit;
// its errors never repeat the token.
func FuzzParseBearer(f *testing.F) {
	f.Add("Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln")
	f.Add("bearer abc==")
	f.Add("Basic dXNlcjpwYXNz")
	f.Add("Bearer  two-spaces")
	f.Add("Bearer =")
	f.Add("Bearer a=b")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		token, err := parseBearer([]string{v})
		_, rest, _ := strings.Cut(v, " ")
		if err != nil {
			if len(rest) >= 16 && strings.Contains(err.Error(), rest) {
				t.Fatalf("error %q repeats the token", err)
			}
			return
		}
		if token != rest || len(token) == 0 || len(token) > MaxTokenSize || !strings.EqualFold(v[:len(bearerScheme)], bearerScheme) ||
			v[len(bearerScheme)] != ' ' {
			t.Fatalf("parseBearer(%q) = %q", v, token)
		}
		body := strings.TrimRight(token, "=")
		if body == "" || strings.ContainsFunc(body, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~+/", r))
		}) {
			t.Fatalf("parseBearer(%q) accepted %q, not a token68", v, token)
		}
	})
}

// FuzzParseServiceAccount: an accepted user name is exactly
// system:serviceaccount:<namespace>:<name>, both non-empty and without
// colons.
func FuzzParseServiceAccount(f *testing.F) {
	f.Add("system:serviceaccount:shop:cart")
	f.Add("system:serviceaccount:shop:cart:x")
	f.Add("system:serviceaccount::")
	f.Add("kubetest-admin")
	f.Fuzz(func(t *testing.T, user string) {
		ns, sa, err := parseServiceAccount(user)
		if err != nil {
			return
		}
		if ns == "" || sa == "" || strings.Contains(ns, ":") || strings.Contains(sa, ":") || serviceAccountPrefix+ns+":"+sa != user {
			t.Fatalf("parseServiceAccount(%q) = %q, %q", user, ns, sa)
		}
	})
}
