// Command layercheck fails when a package of this module imports across a
// layer boundary that the rules file forbids (spoke ↛ hub, hub ↛ spoke, the
// xDS engine and the config model ↛ either wing, the wire protocol ↛ the
// engine, test helpers only from tests). It reads the import graph from
// `go list` and names every offending import, with the package it goes
// through when the import is indirect. `make lint` runs it:
//
//	go run ./internal/layercheck [-rules internal/layercheck/layers.txt] [./...]
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	rulesFile := flag.String("rules", "internal/layercheck/layers.txt", "the rules file")
	dir := flag.String("C", ".", "the module directory to check")
	flag.Parse()
	patterns := flag.Args()
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	if err := run(*dir, *rulesFile, patterns); err != nil {
		fmt.Fprintln(os.Stderr, "layercheck:", err)
		os.Exit(1)
	}
}

func run(dir, rulesFile string, patterns []string) error {
	text, err := os.ReadFile(rulesFile)
	if err != nil {
		return err
	}
	rules, err := parseRules(string(text))
	if err != nil {
		return fmt.Errorf("%s: %w", rulesFile, err)
	}
	pkgs, module, err := load(dir, patterns)
	if err != nil {
		return err
	}
	if vs := check(rules, module, pkgs); len(vs) > 0 {
		for _, v := range vs {
			fmt.Fprintln(os.Stderr, v)
		}
		return fmt.Errorf("%d imports cross a layer boundary (rules: %s)", len(vs), rulesFile)
	}
	return nil
}
