package main

import (
	"fmt"
	"strings"
)

// rules is a parsed rules file (see layers.txt for the format).
type rules struct {
	deny     []denyRule
	allow    []denyRule
	testOnly []string
}

type denyRule struct{ from, to string }

func parseRules(text string) (*rules, error) {
	r := &rules{}
	for n, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "testonly":
			if len(f) < 2 {
				return nil, fmt.Errorf("line %d: testonly names no package", n+1)
			}
			r.testOnly = append(r.testOnly, f[1:]...)
		case f[0] == "allow":
			if len(f) != 3 {
				return nil, fmt.Errorf("line %d: allow takes FROM and TO, got %q", n+1, line)
			}
			r.allow = append(r.allow, denyRule{f[1], f[2]})
		default:
			if len(f) < 2 {
				return nil, fmt.Errorf("line %d: %q forbids nothing (want FROM !TO ...)", n+1, f[0])
			}
			for _, to := range f[1:] {
				if !strings.HasPrefix(to, "!") || len(to) == 1 {
					return nil, fmt.Errorf("line %d: %q: a forbidden import starts with '!'", n+1, to)
				}
				r.deny = append(r.deny, denyRule{f[0], to[1:]})
			}
		}
	}
	return r, nil
}

// under reports whether path (relative to the module) is prefix or inside
// it; "*" matches everything, and a prefix ending in "/" names a tree.
func under(path, prefix string) bool {
	if prefix == "*" {
		return true
	}
	dir := strings.TrimSuffix(prefix, "/")
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// forbidden returns the rule that forbids from importing to, if any.
func (r *rules) forbidden(from, to string) (denyRule, bool) {
	for _, a := range r.allow {
		if under(from, a.from) && under(to, a.to) {
			return denyRule{}, false
		}
	}
	for _, d := range r.deny {
		if under(from, d.from) && under(to, d.to) {
			return d, true
		}
	}
	return denyRule{}, false
}

// isTestOnly reports whether only tests may import path.
func (r *rules) isTestOnly(path string) bool {
	last := path[strings.LastIndexByte(path, '/')+1:]
	for _, p := range r.testOnly {
		if p == "*test" && strings.HasSuffix(last, "test") || under(path, p) {
			return true
		}
	}
	return false
}
