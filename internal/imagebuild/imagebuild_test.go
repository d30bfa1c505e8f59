package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/navemesh/nave/internal/manifests"
)

// TestImages builds every image of Images whose package is in the tree (each binary once, as
// make images does), loads each tarball with go-containerregistry's tarball reader and checks
// it: the digest WriteImage printed (what a registry will hold); the config's user (non-root), entrypoint, exposed ports (each a
// containerPort of the workload of the same name in deploy/), labels and creation time; the
// files of the base (the user in /etc/passwd, the CA bundle, /tmp); the entrypoint binary,
// extracted from the layers and run with --help, exits 0 and prints its usage. Written twice,
// a tarball is the same bytes (the same digest).
func TestImages(t *testing.T) {
	root, err := manifests.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Version: "v0.0.0-test", Revision: "0123456789abcdef0123456789abcdef01234567",
		Time: time.Unix(1764000000, 0).UTC(), Arch: runtime.GOARCH, CACerts: DefaultCACerts}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		t.Fatalf("the build machine's CA bundle: %v", err)
	}
	containerPorts := workloadPorts(t, root)
	dir := t.TempDir()
	built := 0
	for _, im := range Images {
		if _, err := os.Stat(filepath.Join(root, im.Package)); err != nil {
			t.Logf("skip %s: no package %s in this tree", im.Name, im.Package)
			continue
		}
		if im.OnlyNamed || im.ProxyBase {
			continue // test images and nave-proxy (needs a base), run in real pods by e2e/node
		}
		built++
		t.Run(im.Name, func(t *testing.T) {
			bin := filepath.Join(dir, im.Name)
			if err := BuildBinary(root, im.Package, bin, o); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, im.Name+".tar")
			digest, err := WriteImage(path, im, bin, "dev", o)
			if err != nil {
				t.Fatal(err)
			}
			again := filepath.Join(dir, im.Name+"-again.tar")
			digest2, err := WriteImage(again, im, bin, "dev", o)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := os.ReadFile(path)
			b, _ := os.ReadFile(again)
			if digest != digest2 || !bytes.Equal(a, b) {
				t.Errorf("written twice from the same binary: digests %s and %s, tarballs equal %v", digest, digest2, bytes.Equal(a, b))
			}

			img, err := tarball.ImageFromPath(path, nil)
			if err != nil {
				t.Fatalf("loading %s: %v", path, err)
			}
			if d, err := img.Digest(); err != nil || d.String() != digest {
				t.Errorf("loaded digest %v (%v); WriteImage said %s", d, err, digest)
			}
			if mt, err := img.MediaType(); err != nil || mt != types.DockerManifestSchema2 {
				t.Errorf("manifest media type %s (%v); want %s", mt, err, types.DockerManifestSchema2)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, im, cf, o, containerPorts[im.Name])

			files := extract(t, img)
			if p := string(files["etc/passwd"].body); !strings.Contains(p, "nonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd has no user 65532:\n%s", p)
			}
			if !bytes.Equal(files["etc/ssl/certs/ca-certificates.crt"].body, ca) {
				t.Errorf("/etc/ssl/certs/ca-certificates.crt is not the build machine's %s", o.CACerts)
			}
			if h := files["tmp"].hdr; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o1777 != 0o1777 {
				t.Errorf("/tmp: %+v; want a directory with mode 1777", h)
			}
			for n, f := range files {
				if !f.hdr.ModTime.Equal(o.Time) {
					t.Errorf("/%s has time %s; want %s", n, f.hdr.ModTime, o.Time)
				}
			}
			exe := files[strings.TrimPrefix(Entrypoint(im), "/")]
			if exe.hdr == nil || exe.hdr.Mode&0o111 == 0 {
				t.Fatalf("the image has no executable %s", Entrypoint(im))
			}
			out := filepath.Join(t.TempDir(), im.Name)
			if err := os.WriteFile(out, exe.body, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(out, "--help")
			cmd.Env = []string{}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s --help: %v\n%s", Entrypoint(im), err, stderr.String())
			}
			// nave's settings print "Usage: NAME ..." to stdout; the flag package "Usage of ..."
			// to stderr
			if !strings.Contains(strings.ToLower(stdout.String()+stderr.String()), "usage") {
				t.Errorf("%s --help printed no usage:\n%s%s", Entrypoint(im), stdout.String(), stderr.String())
			}
		})
	}
	if built == 0 {
		t.Fatal("no image's package is in the tree")
	}
}

func checkConfig(t *testing.T, im Image, cf *v1.ConfigFile, o Options, containerPorts []int) {
	t.Helper()
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q; want 65532:65532 (non-root)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/" + im.Name}) || len(c.Cmd) > 0 {
		t.Errorf("entrypoint %q cmd %q; want [/usr/local/bin/%s] and no cmd", c.Entrypoint, c.Cmd, im.Name)
	}
	var ports []int
	for p := range c.ExposedPorts {
		n, proto, _ := strings.Cut(p, "/")
		port, err := strconv.Atoi(n)
		if err != nil || proto != "tcp" {
			t.Errorf("exposed port %q; want PORT/tcp", p)
		}
		ports = append(ports, port)
		if containerPorts != nil && !slices.Contains(containerPorts, port) {
			t.Errorf("exposes port %d, which the workload %s in deploy/ does not declare (it has %v)", port, im.Name, containerPorts)
		}
	}
	slices.Sort(ports)
	if !slices.Equal(ports, im.Ports) {
		t.Errorf("exposed ports %v; want %v", ports, im.Ports)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.title":    im.Name,
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q; want %q", k, got, want)
		}
	}
	if !cf.Created.Time.Equal(o.Time) || cf.OS != "linux" || cf.Architecture != o.Arch {
		t.Errorf("created %s, %s/%s; want %s, linux/%s", cf.Created.Time, cf.OS, cf.Architecture, o.Time, o.Arch)
	}
}

type file struct {
	hdr  *tar.Header
	body []byte
}

// extract reads the image's flattened file system, by path without a leading or trailing slash.
func extract(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]file{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.Trim(h.Name, "/")] = file{hdr: h, body: b}
	}
}

// workloadPorts are the containerPorts of every Deployment and StatefulSet that deploy/hub and
// deploy/spoke render, by workload name; each must run as the images' user.
func workloadPorts(t *testing.T, root string) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, d := range []string{"hub", "spoke"} {
		b, err := manifests.Render(filepath.Join(root, "deploy", d))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := manifests.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if !slices.Contains(manifests.WorkloadKinds, o.GetKind()) {
				continue
			}
			c, err := manifests.ContainerOf(objs, o.GetNamespace(), o.GetName(), o.GetName())
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range c.Spec.Ports {
				out[o.GetName()] = append(out[o.GetName()], int(p.ContainerPort))
			}
			if sc := c.Pod.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != User || sc.RunAsGroup == nil || *sc.RunAsGroup != User {
				t.Errorf("%s %s in deploy/%s does not run as %d:%d, the images' user", o.GetKind(), o.GetName(), d, User, User)
			}
		}
	}
	return out
}

// TestRunBuildsTheNamedImages runs the command as make images does, naming one image: only that
// tarball is written, with its digest file; an unknown name is a usage error (exit 2).
func TestRunBuildsTheNamedImages(t *testing.T) {
	out := t.TempDir()
	common := []string{"-out", out, "-version", "v0.0.0-test", "-revision", "0123abc", "-epoch", "1764000000"}
	if code := run(append(common, "nave-hub")); code != 0 {
		t.Fatalf("imagebuild nave-hub: exit %d", code)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"nave-hub.digest", "nave-hub.tar"}) {
		t.Fatalf("imagebuild nave-hub wrote %v; want nave-hub.digest and nave-hub.tar", names)
	}
	img, err := tarball.ImageFromPath(filepath.Join(out, "nave-hub.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "nave-hub.digest")); strings.TrimSpace(string(b)) != d.String() {
		t.Errorf("nave-hub.digest says %q; the tarball's image is %s", b, d)
	}
	if code := run(append(common, "nave-nothing")); code != 2 {
		t.Errorf("imagebuild nave-nothing: exit %d; want 2", code)
	}
}

// TestProxyImage builds nave-proxy on a base: with envoy and both iptables restores on its PATH
// the image holds nave-agent as its entrypoint, PATH leading with /usr/local/bin and the base's
// files; a base lacking them is refused, naming what is missing. (e2e/node runs the image.)
func TestProxyImage(t *testing.T) {
	o := Options{Version: "v0.0.0-test", Revision: "0123abc", Time: time.Unix(1764000000, 0).UTC(), Arch: runtime.GOARCH}
	im := Image{Name: "nave-proxy", Binary: "nave-agent", ProxyBase: true}
	bin := filepath.Join(t.TempDir(), "nave-agent")
	if err := os.WriteFile(bin, []byte("#!agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := func(files ...string) v1.Image {
		var entries []entry
		for _, f := range files {
			entries = append(entries, entry{name: f, mode: 0o755, body: []byte("x")})
		}
		l, err := layer(o.Time, entries)
		if err != nil {
			t.Fatal(err)
		}
		img, err := mutate.AppendLayers(empty.Image, l)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	img, err := AssembleProxy(im, base("usr/local/bin/envoy", "usr/sbin/iptables-restore", "usr/sbin/ip6tables-restore"), bin, o)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/nave-agent"}) || !slices.Contains(cf.Config.Env, "PATH="+proxyPath) {
		t.Errorf("entrypoint %v, env %v; want /usr/local/bin/nave-agent and PATH=%s", cf.Config.Entrypoint, cf.Config.Env, proxyPath)
	}
	files := extract(t, img)
	for _, f := range []string{"usr/local/bin/nave-agent", "usr/local/bin/envoy", "usr/sbin/iptables-restore"} {
		if files[f].hdr == nil {
			t.Errorf("nave-proxy lacks /%s", f)
		}
	}
	_, err = AssembleProxy(im, base("usr/local/bin/envoy"), bin, o)
	if err == nil || !strings.Contains(err.Error(), "iptables-restore, ip6tables-restore") {
		t.Errorf("a base without iptables: %v; want a refusal naming iptables-restore and ip6tables-restore", err)
	}
}
