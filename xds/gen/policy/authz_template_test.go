package policy

import (
	"regexp"
	"strings"
	"testing"
)

// FuzzPathTemplate: pathTemplate never panics; a template it accepts has
// an Envoy form without braces and a regular expression that compiles and
// matches the template with its operators filled in (and not a path
// with one more segment where {*} stands alone).
func FuzzPathTemplate(f *testing.F) {
	for _, s := range []string{"/api/{*}/items", "/static/{**}", "/{**}/edit", "/a/{**}/{*}", "/a{*}", "/{id}", "/{*}/a b", "{*}", "/", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tmpl, re, err := pathTemplate(v)
		if err != nil {
			if !strings.Contains(err.Error(), "path template") {
				t.Errorf("error %q does not name the template", err)
			}
			return
		}
		if strings.ContainsAny(tmpl, "{}") {
			t.Errorf("%q: Envoy form %q has braces", v, tmpl)
		}
		c, err := regexp.Compile("^(?:" + re + ")$")
		if err != nil {
			t.Fatalf("%q: regex %q: %v", v, re, err)
		}
		filled := strings.NewReplacer(matchAnyTemplate, "a/b", matchOneTemplate, "x").Replace(v)
		if !c.MatchString(filled) {
			t.Errorf("%q: regex %q does not match %q", v, re, filled)
		}
		if !strings.Contains(v, matchAnyTemplate) && strings.Contains(v, "/"+matchOneTemplate) {
			if two := strings.Replace(v, "/"+matchOneTemplate, "/x/y", 1); c.MatchString(two) {
				t.Errorf("%q: regex %q matches %q ({*} is one segment)", v, re, two)
			}
		}
	})
}

// TestPathTemplateEnvoyLimits: templates Envoy would refuse (with the
// whole listener) are refused here, naming why.
func TestPathTemplateEnvoyLimits(t *testing.T) {
	for v, want := range map[string]string{
		"/" + strings.Repeat("a", 300) + "/{*}": "at most 256 characters",
		"{*}/x":                                 "must start with /",
		"/a//{*}":                               "not a valid literal",
	} {
		if _, _, err := pathTemplate(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40s…: error %v, want %q", v, err, want)
		}
	}
	if tmpl, _, err := pathTemplate("/" + strings.Repeat("a", 250) + "/{*}"); err != nil || len(tmpl) != 253 {
		t.Errorf("a 253-character template: %q, %v", tmpl, err)
	}
}
