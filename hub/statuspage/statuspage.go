// Package statuspage is the hub's status page: one HTML page, a style sheet and a script,
// embedded in the binary, that the browser refreshes every 2 s from the hub's JSON debug views
// (/debug/spokes, /debug/syncz, /debug/meshes, /debug/services). The page itself holds no data,
// so it shows an operator exactly what the views show that operator's certificate (a tenant's
// mesh, or every mesh for the vendor). It loads nothing from elsewhere: a Content-Security-Policy
// allows only this server's own script, style and JSON, and the script builds the page with DOM
// text nodes, never markup from the data.
package statuspage

import (
	"embed"
	"io/fs"
	"net/http"
)

// Path is where the hub's admin server serves the page.
const Path = "/status/"

//go:embed assets
var assets embed.FS

// csp allows the page's own files and JSON from the same server, nothing else: no inline
// script or style, no other origin, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page's files under Path.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Path, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
