package settings

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// ErrHelp is returned by Load when the arguments ask for help (-h or --help). The usage text has
// already been written; a main exits with status 0 on it.
var ErrHelp = errors.New("help requested")

// KeyError is a problem with the value of one configuration key.
//
// Key is the full dotted key (for example "ingest.staleGracePeriod") once Load returns it;
// inside a Validate method it is relative to the struct being validated. Reason says what is
// wrong, and Source, when set, where the bad value came from ("flag --log.level",
// "env NAVE_LOG_LEVEL", "config file /etc/nave/hub.yaml").
//
// A KeyError is a plain value: safe to read from many goroutines, not to change while shared.
type KeyError struct {
	Key    string
	Reason string
	Source string
}

// Error renders "key: reason", followed by " (from source)" when the source is known.
func (e *KeyError) Error() string {
	msg := e.Reason
	if e.Key != "" {
		msg = e.Key + ": " + e.Reason
	}
	if e.Source != "" {
		msg += " (from " + e.Source + ")"
	}
	return msg
}

// Invalid builds the error a Validate method returns for one of its struct's keys. field is
// the key relative to that struct ("debounceMax", or "hub.address" from a parent struct); Load
// prefixes the path of the struct, so the error the user sees carries the full dotted key.
// Join several with errors.Join to report them all.
func Invalid(field, format string, args ...any) error {
	return &KeyError{Key: field, Reason: fmt.Sprintf(format, args...)}
}

// CheckHostPort returns an Invalid error for field unless value is "host:port" with a numeric
// port in 0–65535 (the host may be empty, as in ":15010", which listens on every address).
func CheckHostPort(field, value string) error {
	_, port, err := net.SplitHostPort(value)
	if err != nil {
		return Invalid(field, "must be host:port, got %q", value)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return Invalid(field, "must be host:port with a port number 0-65535, got %q", value)
	}
	return nil
}

// withPrefix returns err with every KeyError in it (also inside errors.Join) moved under the
// struct path prefix. Any other error becomes a KeyError naming the struct itself.
func withPrefix(prefix string, err error) error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		inner := joined.Unwrap()
		out := make([]error, 0, len(inner))
		for _, e := range inner {
			out = append(out, withPrefix(prefix, e))
		}
		return errors.Join(out...)
	}
	var ke *KeyError
	if errors.As(err, &ke) {
		moved := *ke
		moved.Key = joinKey(prefix, ke.Key)
		return &moved
	}
	if prefix == "" {
		return err
	}
	return &KeyError{Key: prefix, Reason: err.Error()}
}

func joinKey(prefix, key string) string {
	switch {
	case prefix == "":
		return key
	case key == "":
		return prefix
	default:
		return prefix + "." + key
	}
}
