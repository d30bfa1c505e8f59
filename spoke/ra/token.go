package ra

import (
	"errors"
	"fmt"
	"strings"
)

// MaxTokenSize is the longest bearer token, in bytes, the RA sends to the
// API server. A service-account JWT is about 1 KiB.
const MaxTokenSize = 16 << 10

// authorizationKey is the gRPC metadata key Istio's agents send the
// service-account token in, "Bearer <token>".
const authorizationKey = "authorization"

const bearerScheme = "bearer"

// errNoToken: the request carries no authorization metadata.
var errNoToken = errors.New(`no "authorization: Bearer <service-account token>" metadata`)

// parseBearer returns the token of the request's authorization metadata
// values: exactly one value, "Bearer " (the scheme in any case, one space)
// then a token68 of at most MaxTokenSize bytes (RFC 6750: letters, digits
// and "-._~+/", then optional "=" padding), which every JWT is. Errors
// never quote the value: it may be a credential.
func parseBearer(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", errNoToken
	case 1:
	default:
		return "", fmt.Errorf("%d authorization metadata values; want exactly one", len(values))
	}
	v := values[0]
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, bearerScheme) {
		return "", errors.New(`authorization metadata is not "Bearer <token>"`)
	}
	if token == "" {
		return "", errors.New("authorization metadata has an empty bearer token")
	}
	if len(token) > MaxTokenSize {
		return "", fmt.Errorf("bearer token of %d bytes: longer than the %d allowed", len(token), MaxTokenSize)
	}
	pad := false
	for i := 0; i < len(token); i++ {
		c := token[i]
		switch {
		case c == '=':
			pad = i > 0
			if !pad {
				return "", errors.New("bearer token starts with '='")
			}
		case pad:
			return "", fmt.Errorf("bearer token has a character after its '=' padding at byte %d", i)
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return "", fmt.Errorf("bearer token has a character not allowed in a token at byte %d", i)
		}
	}
	return token, nil
}

// serviceAccountPrefix starts the user name of every service account.
const serviceAccountPrefix = "system:serviceaccount:"

// parseServiceAccount returns the namespace and name of a service account's
// user name, system:serviceaccount:<namespace>:<name>, both non-empty and
// without further colons; anything else is an error. The names' form is
// checked by spiffeid.WorkloadID.
func parseServiceAccount(username string) (namespace, name string, err error) {
	rest, ok := strings.CutPrefix(username, serviceAccountPrefix)
	if !ok {
		return "", "", fmt.Errorf("user %q is not a service account (%s<namespace>:<name>)", username, serviceAccountPrefix)
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", fmt.Errorf("user %q is not a service account (%s<namespace>:<name>)", username, serviceAccountPrefix)
	}
	return namespace, name, nil
}
