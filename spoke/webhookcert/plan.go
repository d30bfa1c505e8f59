package webhookcert

import (
	"bytes"
	"slices"
	"time"
)

// What to do is decided from the Secret's CAs and the clock alone, so
// that every replica decides the same.

// valid returns the CAs that can vouch for certificates at now, oldest
// generation first.
func valid(cas []*authority, now time.Time) []*authority {
	var out []*authority
	for _, a := range cas {
		if a.validAt(now) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *authority) int { return a.gen - b.gen })
	return out
}

// needsSuccessor reports whether a new CA is due: there is no valid one,
// or the newest has passed half its span.
func needsSuccessor(cas []*authority, now time.Time) bool {
	v := valid(cas, now)
	return len(v) == 0 || !now.Before(v[len(v)-1].rotateAt())
}

// signer is the CA that signs serving certificates at now: the newest
// valid CA that has been in the bundle long enough (signableAt), or the
// oldest valid one when none has. Nil when no CA is valid.
func signer(cas []*authority, now time.Time) *authority {
	v := valid(cas, now)
	for i := len(v) - 1; i >= 0; i-- {
		if i == 0 || !now.Before(v[i].signableAt()) {
			return v[i]
		}
	}
	return nil
}

// bundle is the caBundle for cas at now: every valid CA, oldest first, and
// the newest one's generation.
func bundle(cas []*authority, now time.Time) (pem []byte, gen int) {
	var b bytes.Buffer
	for _, a := range valid(cas, now) {
		b.Write(a.certPEM)
		gen = a.gen
	}
	return b.Bytes(), gen
}

// nextChange is the first moment after now at which the plan for cas
// changes: a CA expires, is due for a successor, or may start signing.
func nextChange(cas []*authority, now time.Time) (time.Time, bool) {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	v := valid(cas, now)
	for _, a := range v {
		consider(a.cert.NotAfter)
		consider(a.signableAt())
	}
	if len(v) > 0 {
		consider(v[len(v)-1].rotateAt())
	}
	return next, !next.IsZero()
}
