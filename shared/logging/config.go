package logging

import (
	"io"
	"log/slog"

	"github.com/navemesh/nave/shared/settings"
)

// Config is the log section of a binary's configuration (keys log.level and log.format when
// tagged key:"log"). It is a plain value: copy it freely; do not change one that is shared.
type Config struct {
	Level  string `key:"level" default:"info" help:"least severe level logged: debug, info, warn or error"`
	Format string `key:"format" default:"text" help:"log line format: text (key=value) or json"`
}

// Validate refuses an unknown level or format, naming the key.
func (c *Config) Validate() error {
	if _, err := ParseLevel(c.Level); err != nil {
		return settings.Invalid("level", "must be debug, info, warn or error, got %q", c.Level)
	}
	if _, err := New(c.Level, c.Format, io.Discard); err != nil {
		return settings.Invalid("format", "must be text or json, got %q", c.Format)
	}
	return nil
}

// Logger returns the logger this configuration describes, writing to w.
func (c Config) Logger(w io.Writer) (*slog.Logger, error) {
	return New(c.Level, c.Format, w)
}
