package enroll

import (
	"errors"
	"strings"
	"testing"
)

const validToken = "nave-join.0123456789abcdef.AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"

func TestParseTokenAcceptsWhatNewTokenMakes(t *testing.T) {
	for range 100 {
		s, want, err := newToken()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseToken(s)
		if err != nil {
			t.Fatalf("ParseToken(new token): %v", err)
		}
		if got.ID != want.ID || string(got.secret) != string(want.secret) {
			t.Fatalf("ParseToken(new token) = %v, want %v", got, want)
		}
		if strings.Contains(got.String(), s[len(tokenPrefix)+tokenIDLen+1:]) {
			t.Fatalf("Token.String shows the secret: %s", got)
		}
	}
	if _, err := ParseToken(validToken); err != nil {
		t.Fatal(err)
	}
}

func TestParseTokenRefusesMalformed(t *testing.T) {
	secret := validToken[len(tokenPrefix)+tokenIDLen+1:]
	for name, s := range map[string]string{
		"empty":                "",
		"secret only":          secret,
		"other prefix":         "kube-join.0123456789abcdef." + secret,
		"upper-case prefix":    "NAVE-JOIN.0123456789abcdef." + secret,
		"upper-case id":        "nave-join.0123456789ABCDEF." + secret,
		"short id":             "nave-join.0123456789abcde." + secret + "A",
		"id not hex":           "nave-join.0123456789abcdeg." + secret,
		"no dot":               "nave-join.0123456789abcdef" + secret + "A",
		"padded secret":        "nave-join.0123456789abcdef." + secret[:42] + "=",
		"std base64 secret":    "nave-join.0123456789abcdef." + secret[:42] + "+",
		"non-canonical secret": "nave-join.0123456789abcdef." + secret[:42] + "9", // trailing bits set
		"trailing newline":     validToken + "\n",
		"leading space":        " " + validToken[:len(validToken)-1],
		"secret too long":      validToken + "A",
		"secret too short":     validToken[:len(validToken)-1],
		"dot in secret":        validToken[:len(validToken)-1] + ".",
		"nul byte":             validToken[:len(validToken)-1] + "\x00",
	} {
		tok, err := ParseToken(s)
		if err == nil {
			t.Errorf("%s: ParseToken(%q) = %v, want an error", name, s, tok)
			continue
		}
		if !errors.Is(err, ErrTokenMalformed) {
			t.Errorf("%s: error %v does not wrap ErrTokenMalformed", name, err)
		}
		if len(s) > 20 && strings.Contains(err.Error(), s[len(s)-20:]) {
			t.Errorf("%s: error %q quotes the input", name, err)
		}
	}
}

// FuzzParseToken checks that ParseToken never panics, that what it accepts
// is exactly the canonical form (re-encoding gives the input back), and
// that errors never quote a secret.
func FuzzParseToken(f *testing.F) {
	f.Add(validToken)
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			if !errors.Is(err, ErrTokenMalformed) {
				t.Fatalf("error %v does not wrap ErrTokenMalformed", err)
			}
			if len(s) >= 8 && strings.Contains(err.Error(), s) {
				t.Fatalf("error %q quotes the input", err)
			}
			return
		}
		if len(tok.secret) != secretBytes || !validID(tok.ID) {
			t.Fatalf("accepted %q as id %q with a %d-byte secret", s, tok.ID, len(tok.secret))
		}
		if again := tokenPrefix + tok.ID + "." + encodeSecret(tok.secret); again != s {
			t.Fatalf("accepted %q, which is not canonical (%q)", s, again)
		}
		if !tok.matches(tok.hash()) {
			t.Fatal("a token does not match its own hash")
		}
	})
}
