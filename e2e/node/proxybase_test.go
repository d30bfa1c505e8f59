package node

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// xtables is Debian's multi-call iptables binary (nf_tables backend); the restores are links to it.
const xtables = "/usr/sbin/xtables-nft-multi"

// writeStandInProxyBase writes, as a docker save tarball at path, the stand-in for the Envoy
// base image a user names for nave-proxy (no registry is reachable, and no Envoy binary is to
// be had here): this machine's iptables (the nf_tables multi-call binary, its shared libraries
// and extensions) and, as /usr/local/bin/envoy, the pause program (pauseBin), which starts and
// waits. The capture runs for real; Envoy does not.
func writeStandInProxyBase(path, pauseBin string) error {
	files := map[string]string{} // path in the image -> file on this machine
	links := map[string]string{} // path in the image -> link target
	files[xtables] = xtables
	for _, l := range []string{"iptables", "iptables-restore", "iptables-save", "ip6tables", "ip6tables-restore", "ip6tables-save"} {
		links["/usr/sbin/"+l] = "xtables-nft-multi"
	}
	files["/usr/local/bin/envoy"] = pauseBin
	libs, err := sharedLibraries(xtables)
	if err != nil {
		return err
	}
	exts, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/xtables/*.so")
	for _, f := range append(libs, exts...) {
		files[f] = f
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	var names []string
	for p := range files {
		names = append(names, p)
	}
	for p := range links {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		for d := filepath.Dir(p); d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	dirs["/tmp"] = true
	var dirNames []string
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames)
	for _, d := range dirNames {
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Typeflag: tar.TypeDir, Mode: mode}); err != nil {
			return err
		}
	}
	for _, p := range names {
		if target, ok := links[p]; ok {
			if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(p, "/"), Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}); err != nil {
				return err
			}
			continue
		}
		body, err := os.ReadFile(files[p]) // follows links: the libraries' real files
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(p, "/"), Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body))}); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/usr/local/bin:/usr/sbin:/usr/bin"}})
	if err != nil {
		return err
	}
	tag, err := name.NewTag("nave-envoy-standin:dev", name.WithDefaultRegistry(""))
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, img)
}

// sharedLibraries lists the libraries ldd says bin loads, and its loader.
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
			}
		}
	}
	return libs, nil
}
