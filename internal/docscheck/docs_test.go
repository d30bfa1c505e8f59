package docscheck

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// root is the repository's top directory (this file is two below it).
func root(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// topDirs are the repository's top-level folders: a backticked span that
// starts with one of them names a repository path.
var topDirs = []string{"hub/", "spoke/", "xds/", "protocol/", "shared/", "cmd/", "deploy/", "e2e/",
	"internal/", "docs/", "examples/", ".ci/"}

var backticked = regexp.MustCompile("`([^`\n]+)`")

// repoPath returns the repository path a backticked span names, if any:
// the span starts with a top-level folder and holds one path (no spaces).
func repoPath(span string) (string, bool) {
	if strings.ContainsAny(span, " \t<>{}$=,") {
		return "", false
	}
	for _, d := range topDirs {
		if strings.HasPrefix(span, d) {
			return span, true
		}
	}
	return "", false
}

// exists reports whether p names something in the tree below root: a file
// or folder, a glob that matches, a package with a symbol after it
// (`hub/ingest.Server`), or a test, benchmark or fuzz target of a package
// (`e2e/TestRootRotation`).
func exists(root, p string) bool {
	p = strings.TrimSuffix(p, "/")
	if i := strings.IndexAny(p, "#:"); i > 0 {
		p = p[:i] // an anchor or a line number
	}
	if strings.ContainsAny(p, "*?[") {
		m, _ := filepath.Glob(filepath.Join(root, p))
		return len(m) > 0
	}
	if _, err := os.Stat(filepath.Join(root, p)); err == nil {
		return true
	}
	dir, last := filepath.Split(p)
	if i := strings.Index(last, "."); i > 0 { // package.Symbol
		if st, err := os.Stat(filepath.Join(root, dir, last[:i])); err == nil && st.IsDir() {
			return true
		}
	}
	for _, prefix := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if strings.HasPrefix(last, prefix) {
			return declares(filepath.Join(root, dir), strings.SplitN(last, "/", 2)[0])
		}
	}
	return false
}

// declares reports whether a _test.go file in dir declares func name.
func declares(dir, name string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), "func "+name+"(") {
			return true
		}
	}
	return false
}

// docs lists the Markdown files the project documents itself in.
func docs(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"*.md", "docs/*.md", "docs/decisions/*.md", "deploy/*.md", "deploy/*/*.md",
		"e2e/*.md", "e2e/*/*.md", "examples/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	if len(out) == 0 {
		t.Fatal("no documentation found")
	}
	return out
}

// TestBacktickedPathsExist: every `path` a document names that starts with a
// top-level folder of the repository exists, so a moved package or file
// cannot leave its docs pointing at nothing.
func TestBacktickedPathsExist(t *testing.T) {
	r := root(t)
	for _, doc := range docs(t, r) {
		rel, _ := filepath.Rel(r, doc)
		f, err := os.Open(doc)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		inFence := false
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = !inFence
				continue
			}
			if inFence {
				continue
			}
			for _, m := range backticked.FindAllStringSubmatch(line, -1) {
				if p, ok := repoPath(m[1]); ok && !exists(r, p) {
					t.Errorf("%s:%d: `%s` names nothing in the repository", rel, n, p)
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

var (
	recordName = regexp.MustCompile(`^(\d{3})-[a-z0-9-]+\.md$`)
	statusLine = regexp.MustCompile(`^Status: (accepted|superseded by \d{3}|amended by \d{3}(, \d{3})*|accepted; .+)$`)
)

// TestDecisionIndex: every decision record has a status line under its
// title, and docs/decisions/README.md lists every record, with that status.
func TestDecisionIndex(t *testing.T) {
	dir := filepath.Join(root(t), "docs", "decisions")
	index, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	records := 0
	for _, e := range entries {
		if !recordName.MatchString(e.Name()) {
			continue
		}
		records++
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		if len(lines) < 3 || !strings.HasPrefix(lines[0], "# ") || lines[1] != "" || !statusLine.MatchString(lines[2]) {
			t.Errorf("%s: want its title, a blank line and a status line (%s) at the top", e.Name(), statusLine)
			continue
		}
		status := strings.TrimPrefix(lines[2], "Status: ")
		if !strings.Contains(string(index), "("+e.Name()+")") {
			t.Errorf("README.md does not link %s", e.Name())
		} else if !indexRowHas(string(index), e.Name(), status) {
			t.Errorf("README.md's row for %s does not say its status %q", e.Name(), status)
		}
	}
	if records == 0 {
		t.Fatal("no decision records found")
	}
}

// indexRowHas reports whether the index line that links name says status.
func indexRowHas(index, name, status string) bool {
	for _, line := range strings.Split(index, "\n") {
		if strings.Contains(line, "("+name+")") {
			return strings.Contains(line, status)
		}
	}
	return false
}

// TestArchitectureNamesEveryPackage: docs/architecture.md names every
// package of the product (all but tests' helpers, build tools, e2e and
// examples) by its path, or by its path below the top folder inside that
// folder's section (`gen/proxyless` for xds/gen/proxyless), so a new or
// moved package cannot go undocumented.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	r := root(t)
	doc, err := os.ReadFile(filepath.Join(r, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range backticked.FindAllStringSubmatch(string(doc), -1) {
		span := m[1]
		for _, cut := range []string{".", " ", "(", ":"} { // `hub/ingest.Store`, `pkg (…)`
			if i := strings.Index(span, cut); i > 0 {
				span = span[:i]
			}
		}
		names[strings.TrimSuffix(span, "/")] = true
	}
	for _, top := range []string{"hub", "spoke", "xds", "shared", "protocol", "cmd"} {
		err := filepath.WalkDir(filepath.Join(r, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(r, path)
			if strings.HasSuffix(rel, "test") || filepath.Base(rel) == "testdata" || !hasGo(path) {
				return nil
			}
			if !names[rel] && !names[strings.TrimPrefix(rel, top+"/")] {
				t.Errorf("docs/architecture.md does not name package %s", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// hasGo reports whether dir holds a Go file that is not a test.
func hasGo(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range m {
		if !strings.HasSuffix(f, "_test.go") {
			return true
		}
	}
	return false
}
