package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// proxyNeeds are the programs the sidecar template runs from the proxy image (docs/injection.md):
// Envoy, started by nave-agent, and the capture's iptables-restore and ip6tables-restore. The
// base must hold them in one of proxyPath's directories.
var proxyNeeds = []string{"envoy", "iptables-restore", "ip6tables-restore"}

// proxyPath is the nave-proxy image's PATH: nave-agent's directory first, then the base's usual
// ones.
const proxyPath = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"

// LoadBase returns the base image in the docker save style tarball at path (crane pull REF
// FILE, docker save, podman save make one): the build pulls nothing itself.
func LoadBase(path string) (v1.Image, error) {
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return nil, fmt.Errorf("proxy base %s: %w", path, err)
	}
	return img, nil
}

// AssembleProxy makes the nave-proxy image: base (an Envoy image holding iptables) with the
// nave-agent binary at /usr/local/bin/nave-agent, the entrypoint, and PATH set so the injected
// containers find nave-agent, envoy and iptables-restore. A base lacking one of proxyNeeds is
// refused, naming what is missing.
func AssembleProxy(im Image, base v1.Image, bin string, o Options) (v1.Image, error) {
	if err := checkProxyBase(base); err != nil {
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
	img, err := mutate.AppendLayers(base, app)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	if cf.Architecture != "" && cf.Architecture != o.Arch || cf.OS != "" && cf.OS != "linux" {
		return nil, fmt.Errorf("the proxy base is for %s/%s; nave-agent is built for linux/%s (-arch)", cf.OS, cf.Architecture, o.Arch)
	}
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: o.Time}
	cf.History = append(cf.History, v1.History{Created: v1.Time{Time: o.Time}, CreatedBy: "internal/imagebuild"})
	cf.Config.Entrypoint = []string{Entrypoint(im)}
	cf.Config.Cmd = nil
	env := []string{"PATH=" + proxyPath}
	for _, e := range cf.Config.Env {
		if !strings.HasPrefix(e, "PATH=") {
			env = append(env, e)
		}
	}
	cf.Config.Env = env
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.title":    im.Name,
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   Source,
	} {
		cf.Config.Labels[k] = v
	}
	return mutate.ConfigFile(img, cf)
}

// checkProxyBase finds each of proxyNeeds in the base's file system, in a directory of proxyPath.
func checkProxyBase(base v1.Image) error {
	rc := mutate.Extract(base)
	defer rc.Close()
	found := map[string]bool{}
	dirs := strings.Split(proxyPath, ":")
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the proxy base: %w", err)
		}
		p := "/" + strings.TrimPrefix(path.Clean(h.Name), "./")
		for _, d := range dirs {
			if path.Dir(p) == d {
				found[path.Base(p)] = true
			}
		}
	}
	var missing []string
	for _, n := range proxyNeeds {
		if !found[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the proxy base (-proxy-base) lacks %s in %s: nave-proxy needs Envoy and iptables (docs/injection.md)",
			strings.Join(missing, ", "), proxyPath)
	}
	return nil
}
