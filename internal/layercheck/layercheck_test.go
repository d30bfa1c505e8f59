package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeModule writes a module named example.com/m with files (path ->
// content) into a new directory.
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.26\n"
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func violations(t *testing.T, rulesText string, files map[string]string) []string {
	t.Helper()
	r, err := parseRules(rulesText)
	if err != nil {
		t.Fatal(err)
	}
	pkgs, module, err := load(writeModule(t, files), []string{"./..."})
	if err != nil {
		t.Fatal(err)
	}
	return check(r, module, pkgs)
}

// TestWrongImportsAreNamed: a deliberately wrong import — direct, through
// another package, from a test, of a test helper — fails the check, named
// with the package it goes through.
func TestWrongImportsAreNamed(t *testing.T) {
	rules := "spoke/ !hub/\nhub/ !spoke/\ntestonly *test\n"
	got := violations(t, rules, map[string]string{
		"hub/ingest/ingest.go":      "package ingest\n",
		"spoke/uplink/uplink.go":    "package uplink\n\nimport _ \"example.com/m/hub/ingest\"\n",
		"spoke/relay/relay.go":      "package relay\n\nimport _ \"example.com/m/spoke/via\"\n",
		"spoke/via/via.go":          "package via\n\nimport _ \"example.com/m/lib\"\n",
		"lib/lib.go":                "package lib\n\nimport _ \"example.com/m/hub/ingest\"\n",
		"hub/ca/ca.go":              "package ca\n",
		"hub/ca/ca_test.go":         "package ca\n\nimport _ \"example.com/m/spoke/via\"\n",
		"hub/ca/catest/catest.go":   "package catest\n",
		"hub/enroll/enroll.go":      "package enroll\n\nimport _ \"example.com/m/hub/ca/catest\"\n",
		"hub/enroll/enroll_test.go": "package enroll\n\nimport _ \"example.com/m/hub/ca/catest\"\n",
	})
	want := []string{
		"hub/ca imports spoke/via (in tests): hub/ may not import spoke/",
		"hub/enroll imports hub/ca/catest: only tests may import it",
		"spoke/relay imports hub/ingest through spoke/via: spoke/ may not import hub/",
		"spoke/uplink imports hub/ingest: spoke/ may not import hub/",
		"spoke/via imports hub/ingest through lib: spoke/ may not import hub/",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestAllowAndWildcard: "*" forbids for every package, allow excepts.
func TestAllowAndWildcard(t *testing.T) {
	got := violations(t, "* !e2e/\nallow e2e/ e2e/\n", map[string]string{
		"e2e/harness/h.go": "package harness\n",
		"e2e/e2e_test.go":  "package e2e\n\nimport _ \"example.com/m/e2e/harness\"\n",
		"a/a_test.go":      "package a\n\nimport _ \"example.com/m/e2e/harness\"\n",
		"a/a.go":           "package a\n",
	})
	if len(got) != 1 || got[0] != "a imports e2e/harness (in tests): * may not import e2e/" {
		t.Errorf("violations: %q", got)
	}
}

// TestThisRepositoryKeepsItsLayers runs the check on this module with its
// own rules: the layering holds (docs/design.md invariant 9).
func TestThisRepositoryKeepsItsLayers(t *testing.T) {
	text, err := os.ReadFile("layers.txt")
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseRules(string(text))
	if err != nil {
		t.Fatal(err)
	}
	pkgs, module, err := load("../..", []string{"./..."})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range check(r, module, pkgs) {
		t.Error(v)
	}
}

func TestRulesRefuseNonsense(t *testing.T) {
	for _, text := range []string{"spoke/\n", "spoke/ hub/\n", "allow a\n", "testonly\n", "spoke/ !\n"} {
		if _, err := parseRules(text); err == nil {
			t.Errorf("rules %q accepted", text)
		}
	}
}
