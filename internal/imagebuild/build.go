package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DefaultCACerts is where Debian, Ubuntu and Alpine keep the CA bundle, and where Go's crypto/x509
// looks first on Linux.
const DefaultCACerts = "/etc/ssl/certs/ca-certificates.crt"

// User is the image's user and group: distroless' "nonroot", not root, and the runAsUser of
// deploy/'s pods.
const User = 65532

// Source is the org.opencontainers.image.source label.
const Source = "https://github.com/navemesh/nave"

// Options say how the images are stamped and assembled.
type Options struct {
	Version, Revision string
	// Time is every file's modification time and the image's creation time.
	Time time.Time
	// Arch is the binaries' GOARCH and the image's architecture.
	Arch string
	// CACerts is the CA bundle file copied into the image.
	CACerts string
	// ProxyBase is the tarball of the base of the ProxyBase images (an Envoy image with iptables).
	ProxyBase string
}

// programPkg is where -ldflags -X sets Version and Revision.
const programPkg = "github.com/navemesh/nave/shared/program"

// BuildBinary builds pkg (relative to root) into out: static, without file system paths, a
// build ID or the toolchain's VCS stamp (which differs between a clone and a worktree, and counts
// untracked files as modifications), with the version and revision stamped instead.
func BuildBinary(root, pkg, out string, o Options) error {
	ldflags := fmt.Sprintf("-s -w -buildid= -X %s.Version=%s -X %s.Revision=%s", programPkg, o.Version, programPkg, o.Revision)
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Entrypoint is where the image holds its binary.
func Entrypoint(im Image) string {
	if im.Binary != "" {
		return "/usr/local/bin/" + im.Binary
	}
	return "/usr/local/bin/" + im.Name
}

// Assemble makes im's image from the binary at bin: a base layer (users, CA bundle, /tmp) and a
// layer with the binary, every time set to o.Time. The manifest is Docker's schema 2 (the OCI
// manifest's twin): a `docker save` tarball cannot carry any other, its readers (docker load,
// kind load, crane push, go-containerregistry's tarball package) make a schema 2 manifest from
// it, so building one here keeps the digest printed the digest pushed (decision 017).
func Assemble(im Image, bin string, o Options) (v1.Image, error) {
	base, err := baseLayer(o)
	if err != nil {
		return nil, err
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	app, err := layer(o.Time, []entry{
		{name: "usr/", dir: true}, {name: "usr/local/", dir: true}, {name: "usr/local/bin/", dir: true},
		{name: strings.TrimPrefix(Entrypoint(im), "/"), mode: 0o755, body: exe},
	})
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.DockerManifestSchema2)
	img = mutate.ConfigMediaType(img, types.DockerConfigJSON)
	img, err = mutate.AppendLayers(img, base, app)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: o.Time}
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Author = ""
	cf.History = nil
	for range 2 {
		cf.History = append(cf.History, v1.History{Created: v1.Time{Time: o.Time}, CreatedBy: "internal/imagebuild"})
	}
	ports := map[string]struct{}{}
	for _, p := range im.Ports {
		ports[strconv.Itoa(p)+"/tcp"] = struct{}{}
	}
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", User, User),
		Entrypoint:   []string{Entrypoint(im)},
		WorkingDir:   "/",
		Env:          []string{"PATH=/usr/local/bin"},
		ExposedPorts: ports,
		Labels: map[string]string{
			"org.opencontainers.image.title":    im.Name,
			"org.opencontainers.image.version":  o.Version,
			"org.opencontainers.image.revision": o.Revision,
			"org.opencontainers.image.source":   Source,
			"org.opencontainers.image.created":  o.Time.Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// WriteImage assembles im's image and writes it to path as a tarball tagged <name>:<tag>; it
// returns the image's digest. One tag only: with several, the order of the tarball's RepoTags
// would vary from run to run.
func WriteImage(path string, im Image, bin, tag string, o Options) (string, error) {
	var img v1.Image
	var err error
	if im.ProxyBase {
		var base v1.Image
		if base, err = LoadBase(o.ProxyBase); err == nil {
			img, err = AssembleProxy(im, base, bin, o)
		}
	} else {
		img, err = Assemble(im, bin, o)
	}
	if err != nil {
		return "", err
	}
	t, err := name.NewTag(im.Name+":"+tag, name.WithDefaultRegistry(""))
	if err != nil {
		return "", fmt.Errorf("tag %s:%s: %w", im.Name, tag, err)
	}
	if err := tarball.WriteToFile(path, t, img); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// baseLayer is the minimal base: the users, the CA bundle, /tmp.
func baseLayer(o Options) (v1.Layer, error) {
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("CA bundle (-ca-certs): %w", err)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", User, User)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", User)
	return layer(o.Time, []entry{
		{name: "etc/", dir: true},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/ssl/", dir: true},
		{name: "etc/ssl/certs/", dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, body: ca},
		{name: "home/", dir: true},
		{name: "home/nonroot/", dir: true, uid: User, mode: 0o700},
		{name: "tmp/", dir: true, mode: 0o1777},
	})
}

type entry struct {
	name string
	dir  bool
	mode int64
	uid  int
	body []byte
}

// layer is an uncompressed tar of entries, sorted by name, owned by uid (0 unless set), at t.
func layer(t time.Time, entries []entry) (v1.Layer, error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: t, Uid: e.uid, Gid: e.uid, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.DockerLayer))
}
