package main

import (
	"strings"
	"testing"
)

// Shell completion: scripts for the shells, commands, kinds and flags
// (the older commands' flags too).
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if r := navectlRun(t, "completion", shell); r.code != 0 || !strings.Contains(r.stdout, "navectl") {
			t.Errorf("completion %s: exit %d, %d bytes", shell, r.code, len(r.stdout))
		}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", ""}, []string{"status", "proxy-status", "proxy-config", "analyze", "token", "cluster", "cert", "ca-hash", "operator"}},
		{[]string{"__complete", "token", ""}, []string{"create", "list"}},
		{[]string{"__complete", "proxy-config", ""}, []string{"clusters", "listeners", "routes", "endpoints", "secrets"}},
		{[]string{"__complete", "token", "create", "--st"}, []string{"--state-dir", "--state-store"}},
		{[]string{"__complete", "status", "-o", ""}, []string{"table", "json", "yaml"}},
		{[]string{"__complete", "analyze", "--"}, []string{"--cluster", "--fail-on-warning", "--domain-suffix"}},
	} {
		r := navectlRun(t, c.args...)
		for _, w := range c.want {
			if r.code != 0 || !strings.Contains(r.stdout, w+"\n") && !strings.Contains(r.stdout, w+"\t") {
				t.Errorf("navectl %v: exit %d, want %q among:\n%s", c.args, r.code, w, r.stdout)
			}
		}
	}
}
