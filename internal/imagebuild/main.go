// Command imagebuild builds nave's OCI images (make images) without a container daemon and
// without pulling a base image: each is a static Go binary (CGO_ENABLED=0, -trimpath, version
// and revision stamped by -ldflags) on a base assembled here from nothing — /etc/passwd and
// /etc/group with the non-root user 65532, the build machine's CA bundle, an empty /tmp — with
// go-containerregistry. Every file and the config carry one fixed time (the commit's), so the
// same commit and toolchain give the same digest (docs/decisions/017-images-without-a-daemon.md).
//
// It writes, per image, OUT/<name>.tar (a `docker save` style tarball, tagged <name>:dev, what
// deploy/'s kustomizations name) and OUT/<name>.digest, the digest the image keeps when loaded
// or pushed.
//
// nave-proxy, the sidecar template's image, is nave-agent on an Envoy base the user names with
// -proxy-base (a tarball: an Envoy image holding iptables-restore and ip6tables-restore), checked
// to hold envoy and both restores on its PATH; without -proxy-base it is skipped.
//
//	go run ./internal/imagebuild [-out bin/images] [-tag dev] [-version V] [-revision R] [-epoch UNIX] [-proxy-base FILE] [NAME...]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	out := fs.String("out", "bin/images", "directory the image tarballs are written to")
	version := fs.String("version", "", "version label and tag (default: git describe --tags --always --dirty)")
	revision := fs.String("revision", "", "source revision label (default: git rev-parse HEAD)")
	epoch := fs.String("epoch", "", "time of every file and of the image, Unix seconds (default: $SOURCE_DATE_EPOCH, else the commit's time)")
	caCerts := fs.String("ca-certs", DefaultCACerts, "CA bundle copied to /etc/ssl/certs/ca-certificates.crt")
	tag := fs.String("tag", "dev", "tag of the images in the tarballs (deploy/'s kustomizations use dev)")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH of the binaries and the image")
	proxyBase := fs.String("proxy-base", "", "docker save style tarball of the base of nave-proxy: an Envoy image holding iptables-restore (crane pull envoyproxy/envoy:vX base.tar); without it nave-proxy is skipped")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		return 1
	}
	opts := Options{Version: *version, Revision: *revision, Arch: *arch, CACerts: *caCerts, ProxyBase: *proxyBase}
	if opts.Version == "" {
		opts.Version = git(root, "describe", "--tags", "--always", "--dirty")
	}
	if opts.Revision == "" {
		opts.Revision = git(root, "rev-parse", "HEAD")
	}
	e := *epoch
	if e == "" {
		e = os.Getenv("SOURCE_DATE_EPOCH")
	}
	if e == "" {
		e = git(root, "log", "-1", "--format=%ct")
	}
	secs, err := strconv.ParseInt(e, 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imagebuild: -epoch %q: not Unix seconds\n", e)
		return 2
	}
	opts.Time = time.Unix(secs, 0).UTC()
	if opts.Version == "" || opts.Revision == "" {
		fmt.Fprintln(os.Stderr, "imagebuild: no version or revision: not in a git checkout? pass -version and -revision")
		return 2
	}
	want := map[string]bool{}
	for _, n := range fs.Args() {
		if !slices.ContainsFunc(Images, func(im Image) bool { return im.Name == n }) {
			fmt.Fprintf(os.Stderr, "imagebuild: no image %s (see internal/imagebuild/images.go)\n", n)
			return 2
		}
		want[n] = true
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		return 1
	}
	binDir, err := os.MkdirTemp("", "nave-imagebuild-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	for _, im := range Images {
		if len(fs.Args()) > 0 && !want[im.Name] || len(fs.Args()) == 0 && im.OnlyNamed {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, im.Package)); err != nil {
			fmt.Printf("skip %s: no package %s in this tree\n", im.Name, im.Package)
			continue
		}
		if im.ProxyBase && opts.ProxyBase == "" {
			if want[im.Name] {
				fmt.Fprintf(os.Stderr, "imagebuild: %s needs -proxy-base (an Envoy image with iptables, as a tarball)\n", im.Name)
				return 2
			}
			fmt.Printf("skip %s: no -proxy-base (an Envoy image with iptables-restore, as a tarball: docs/injection.md)\n", im.Name)
			continue
		}
		bin := filepath.Join(binDir, im.Name)
		if err := BuildBinary(root, im.Package, bin, opts); err != nil {
			fmt.Fprintln(os.Stderr, "imagebuild:", err)
			return 1
		}
		digest, err := WriteImage(filepath.Join(*out, im.Name+".tar"), im, bin, *tag, opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, "imagebuild:", err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(*out, im.Name+".digest"), []byte(digest+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "imagebuild:", err)
			return 1
		}
		fmt.Printf("%s %s:%s %s (version %s)\n", filepath.Join(*out, im.Name+".tar"), im.Name, *tag, digest, opts.Version)
	}
	return 0
}

// git runs git in dir and returns its trimmed output, "" on any failure.
func git(dir string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func moduleRoot() (string, error) {
	cmd := exec.Command("go", "env", "GOMOD")
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the nave module")
	}
	return filepath.Dir(mod), nil
}
