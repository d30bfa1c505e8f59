package statuspage

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// The page and its files are served under Path with a policy that allows
// nothing from elsewhere; the page names only its own files.
func TestServesPageAndFiles(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, Handler())
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	for path, want := range map[string]string{
		Path:                 "text/html",
		Path + "status.js":   "text/javascript",
		Path + "status.css":  "text/css",
		Path + "index.html":  "", // FileServer redirects to the directory
		Path + "nothing.png": "",
	} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want == "" {
			if path == Path+"nothing.png" && resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) {
			t.Errorf("GET %s: %d %s, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if len(body) == 0 {
			t.Errorf("GET %s: empty", path)
		}
	}
}

// No external assets: every reference in the files is relative (the page's
// own files, the debug views) and the script writes data as text only.
func TestNoExternalAssets(t *testing.T) {
	ref := regexp.MustCompile(`(?:src|href)="([^"]*)"|url\(([^)]*)\)|@import|fetch\(\s*"([^"]*)"`)
	err := fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
			target := m[1] + m[2] + m[3]
			if m[0] == "@import" || strings.Contains(target, "//") && target != "data:," {
				t.Errorf("%s refers to %q: the page must not load anything from elsewhere", path, m[0])
			}
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %s: data must go into text nodes", path, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
