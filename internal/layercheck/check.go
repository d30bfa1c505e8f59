package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
)

// pkg is what layercheck needs of `go list -json`.
type pkg struct {
	ImportPath   string
	Module       *struct{ Path string }
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string
}

// load lists the packages matching patterns in dir, and the module path.
func load(dir string, patterns []string) (map[string]*pkg, string, error) {
	cmd := exec.Command("go", append([]string{"list", "-e", "-json"}, patterns...)...)
	cmd.Dir = dir
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, "", fmt.Errorf("go list: %v: %s", err, stderr.String())
	}
	pkgs := map[string]*pkg{}
	module := ""
	dec := json.NewDecoder(&out)
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, "", fmt.Errorf("go list output: %v", err)
		}
		if p.Module != nil && module == "" {
			module = p.Module.Path
		}
		pkgs[p.ImportPath] = &p
	}
	if module == "" {
		return nil, "", fmt.Errorf("no package of a module matches %s in %s", strings.Join(patterns, " "), dir)
	}
	return pkgs, module, nil
}

// check returns every violation, one line each, sorted.
func check(r *rules, module string, pkgs map[string]*pkg) []string {
	rel := func(path string) (string, bool) {
		if path == module {
			return ".", true
		}
		s, ok := strings.CutPrefix(path, module+"/")
		return s, ok
	}
	seen := map[string]bool{}
	var out []string
	report := func(format string, args ...any) {
		if s := fmt.Sprintf(format, args...); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, p := range pkgs {
		from, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		// Each direct import, with what it brings along.
		visit := func(direct []string, inTest bool) {
			where := ""
			if inTest {
				where = " (in tests)"
			}
			for _, d := range direct {
				to, ok := rel(d)
				if !ok {
					continue
				}
				if !inTest && r.isTestOnly(to) && !r.isTestOnly(from) {
					report("%s imports %s%s: only tests may import it", from, to, where)
				}
				if rule, bad := r.forbidden(from, to); bad {
					report("%s imports %s%s: %s may not import %s", from, to, where, rule.from, rule.to)
				}
				if dp := pkgs[d]; dp != nil {
					for _, t := range dp.Deps {
						tt, ok := rel(t)
						if !ok {
							continue
						}
						if rule, bad := r.forbidden(from, tt); bad {
							report("%s imports %s through %s%s: %s may not import %s", from, tt, to, where, rule.from, rule.to)
						}
					}
				}
			}
		}
		visit(p.Imports, false)
		visit(append(append([]string(nil), p.TestImports...), p.XTestImports...), true)
	}
	sort.Strings(out)
	return out
}
