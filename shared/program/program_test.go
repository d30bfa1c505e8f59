package program

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/logging"
)

type config struct {
	Log  logging.Config `key:"log" help:"logging"`
	Name string         `key:"name" default:"x" help:"a name"`
}

func logOf(c *config) logging.Config { return c.Log }

func TestRunExitCodes(t *testing.T) {
	ok := func(context.Context, config, *slog.Logger) error { return nil }
	fail := func(context.Context, config, *slog.Logger) error { return errors.New("boom") }
	cases := []struct {
		args  []string
		serve func(context.Context, config, *slog.Logger) error
		code  int
		want  string
	}{
		{nil, ok, 0, "stopped"},
		{[]string{"--help"}, ok, 0, "--name"},
		{nil, fail, 1, "boom"},
		{[]string{"--log.level", "loud"}, ok, 2, "log.level"},
		{[]string{"--nope"}, ok, 2, "nope"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), "prog", c.args, &out, &errOut, logOf, c.serve)
		if code != c.code || !strings.Contains(out.String()+errOut.String(), c.want) {
			t.Errorf("Run(%v) = %d, output %q; want %d and %q", c.args, code, out.String()+errOut.String(), c.code, c.want)
		}
	}
}

func TestRunPassesTheConfig(t *testing.T) {
	var got string
	Run(context.Background(), "prog", []string{"--name", "y"}, &bytes.Buffer{}, &bytes.Buffer{}, logOf,
		func(_ context.Context, c config, _ *slog.Logger) error { got = c.Name; return nil })
	if got != "y" {
		t.Fatalf("serve saw name %q", got)
	}
}
