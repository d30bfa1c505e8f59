package enroll

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// A join token is "nave-join.<id>.<secret>": id is 8 random bytes in
// lowercase hex (it names the token in the store, in logs and in
// `navectl token list`; it is not secret), secret is 32 random bytes in
// unpadded base64url. The store keeps only SHA-256 of the secret.
const (
	tokenPrefix   = "nave-join."
	tokenIDBytes  = 8
	secretBytes   = 32
	tokenIDLen    = 2 * tokenIDBytes
	secretLen     = 43 // base64.RawURLEncoding.EncodedLen(secretBytes)
	tokenLen      = len(tokenPrefix) + tokenIDLen + 1 + secretLen
	secretHashLen = sha256.Size
)

// Errors a token is refused with. Each is distinct so that the spoke, the
// audit log and the refusal metric say exactly why.
var (
	ErrTokenMalformed = errors.New("join token is malformed")
	ErrTokenUnknown   = errors.New("join token is unknown")
	ErrTokenInvalid   = errors.New("join token secret does not match")
	ErrTokenUsed      = errors.New("join token was already used")
	ErrTokenExpired   = errors.New("join token has expired")
)

// Token is a parsed join token. Its String never shows the secret.
type Token struct {
	ID     string
	secret []byte
}

// String names the token by its id only.
func (t Token) String() string { return tokenPrefix + t.ID + ".<redacted>" }

// ParseToken parses a join token strictly: the exact prefix, a 16-digit
// lowercase hex id, a canonical 43-character base64url secret, nothing
// else (no padding, no whitespace). Every failure wraps ErrTokenMalformed
// and never quotes the input, which may hold a secret.
func ParseToken(s string) (Token, error) {
	if len(s) != tokenLen {
		return Token{}, fmt.Errorf("%w: want %d characters, got %d", ErrTokenMalformed, tokenLen, len(s))
	}
	if !strings.HasPrefix(s, tokenPrefix) {
		return Token{}, fmt.Errorf("%w: does not start with %q", ErrTokenMalformed, tokenPrefix)
	}
	rest := s[len(tokenPrefix):]
	id, secret := rest[:tokenIDLen], rest[tokenIDLen:]
	if !validID(id) {
		return Token{}, fmt.Errorf("%w: id is not %d lowercase hex digits", ErrTokenMalformed, tokenIDLen)
	}
	if secret[0] != '.' {
		return Token{}, fmt.Errorf("%w: no '.' between id and secret", ErrTokenMalformed)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(secret[1:])
	if err != nil || len(raw) != secretBytes {
		return Token{}, fmt.Errorf("%w: secret is not %d bytes of unpadded base64url", ErrTokenMalformed, secretBytes)
	}
	return Token{ID: id, secret: raw}, nil
}

// validID reports whether id is a token id: tokenIDLen lowercase hex digits.
func validID(id string) bool {
	if len(id) != tokenIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// newToken returns a fresh random token and its secret's hash.
func newToken() (string, Token, error) {
	b := make([]byte, tokenIDBytes+secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", Token{}, fmt.Errorf("random token: %w", err)
	}
	t := Token{ID: hex.EncodeToString(b[:tokenIDBytes]), secret: b[tokenIDBytes:]}
	return tokenPrefix + t.ID + "." + encodeSecret(t.secret), t, nil
}

func encodeSecret(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// hash is what the store keeps of the secret.
func (t Token) hash() []byte {
	h := sha256.Sum256(t.secret)
	return h[:]
}

// matches compares t's secret with a stored hash in constant time.
func (t Token) matches(storedHash []byte) bool {
	return len(storedHash) == secretHashLen && subtle.ConstantTimeCompare(t.hash(), storedHash) == 1
}
