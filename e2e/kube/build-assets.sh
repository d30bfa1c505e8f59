#!/usr/bin/env bash
# Builds the Kubernetes test binaries (kube-apiserver and etcd) from the Go module proxy into a
# version-keyed cache folder, for the tests in internal/kubetest. Usage:
#
#   e2e/kube/build-assets.sh [DEST]      # DEST defaults to <repo>/.cache/kube/v$KUBE_VERSION
#
# Each binary is skipped when it is already in DEST and reports the expected version. A cold build
# costs about 700 CPU-seconds for kube-apiserver and 2 minutes for etcd, ~2 GB of memory and ~2.5 GB
# of Go build cache. The builds run in throwaway modules outside the repository (GOWORK=off), so the
# repository's go.mod and go.sum are never touched. See e2e/kube/README.md.
set -euo pipefail

KUBE_VERSION=1.36.3   # kube-apiserver; internal/kubetest.KubeVersion must match
ETCD_VERSION=3.5.35   # newest v3.5 release on the module proxy; the series kube-apiserver 1.36 expects
# kubelet for e2e/node (internal/kubenode.KubeletVersion must match): 1.34 is the newest kubelet that
# still runs on cgroup v1 without an opt-out and talks to containerd 1.x (docs/node-tests.md); two
# minors under the API server is within the version-skew policy.
KUBELET_VERSION=1.34.4

repo="$(cd "$(dirname "$0")/../.." && pwd)"
dest="${1:-$repo/.cache/kube/v$KUBE_VERSION}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"

export GOWORK=off GOFLAGS=-mod=mod
unset GOOS GOARCH
export CGO_ENABLED=0

start=$SECONDS
log() { printf '[build-assets %4ds] %s\n' "$((SECONDS - start))" "$*"; }

# Serialize concurrent runs (two make targets, two shells) on the same DEST.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$dest/.lock"
	if ! flock -n 9; then
		log "another build is running in $dest; waiting for it"
		flock 9
	fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/nave-kube-assets.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# has NAME WANT: NAME is in DEST and its --version output contains WANT.
has() {
	# Capture first: with pipefail, grep -q closing the pipe early would fail the check.
	local out
	[ -x "$dest/$1" ] && out="$("$dest/$1" --version 2>/dev/null)" && grep -qF -- "$2" <<<"$out"
}

# build_kube NAME VERSION: builds k8s.io/kubernetes/cmd/NAME at VERSION into DEST/NAME, in a throwaway
# module of its own per version (staging modules replaced by their published v0.Y.Z).
build_kube() {
	local name="$1" version="$2"
	local want="Kubernetes v$version"
	if has "$name" "$want"; then
		log "$name v$version already built in $dest"
		return
	fi
	local t0=$SECONDS mod dir gomod godebug m staging=() skipped=()
	dir="$work/kube-$version"
	mkdir -p "$dir"
	if [ ! -f "$dir/go.mod" ]; then
		log "v$version: resolving k8s.io/kubernetes and its staging modules"
		gomod="$(cd "$dir" && go mod download -json "k8s.io/kubernetes@v$version" |
			sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
		[ -f "$gomod" ] || { log "cannot download k8s.io/kubernetes@v$version"; exit 1; }
		godebug="$(grep -E '^godebug ' "$gomod" || true)"
		mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#\1#p' "$gomod")
		{
			echo "module nave.invalid/kube-build"
			echo
			echo "go 1.26.0"
			[ -n "$godebug" ] && { echo; echo "$godebug"; }
			echo
			echo "require k8s.io/kubernetes v$version"
			echo
			echo "replace ("
			for m in "${staging[@]}"; do
				# The proxy lacks a few staging modules at some versions (sample-cli-plugin); the
				# binaries built here import none of them.
				if (cd "$dir" && go list -m -json "$m@v0.${version#1.}" >/dev/null 2>&1); then
					echo "	$m => $m v0.${version#1.}"
				else
					skipped+=("$m")
				fi
			done
			echo ")"
		} >"$dir/go.mod.new"
		mv "$dir/go.mod.new" "$dir/go.mod"
		[ "${#skipped[@]}" -eq 0 ] || log "staging modules missing from the proxy (skipped): ${skipped[*]}"
	fi
	log "$name v$version: downloading modules"
	(cd "$dir" && go get -tool "k8s.io/kubernetes/cmd/$name@v$version")
	local ld="-s -w"
	for mod in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld="$ld -X $mod.gitVersion=v$version -X $mod.gitMajor=1 -X $mod.gitMinor=$(echo "$version" | cut -d. -f2)"
	done
	ld="$ld -X k8s.io/component-base/version.gitTreeState=clean"
	log "$name v$version: compiling (cold: 6-15 minutes)"
	(cd "$dir" && go build -trimpath -ldflags "$ld" -o "$dest/$name.tmp" "k8s.io/kubernetes/cmd/$name")
	mv "$dest/$name.tmp" "$dest/$name"
	has "$name" "$want" || { log "built $name does not report $want"; exit 1; }
	log "$name v$version built in $((SECONDS - t0))s: $dest/$name"
}

build_etcd() {
	local want="etcd Version: $ETCD_VERSION"
	if has etcd "$want"; then
		log "etcd v$ETCD_VERSION already built in $dest"
		return
	fi
	local t0=$SECONDS dir="$work/etcd"
	mkdir -p "$dir"
	log "etcd v$ETCD_VERSION: downloading modules"
	printf 'module nave.invalid/etcd-build\n\ngo 1.26.0\n' >"$dir/go.mod"
	cat >"$dir/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
	(cd "$dir" && go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION")
	log "etcd v$ETCD_VERSION: compiling"
	(cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$dest/etcd.tmp" .)
	mv "$dest/etcd.tmp" "$dest/etcd"
	has etcd "$want" || { log "built etcd does not report $want"; exit 1; }
	log "etcd v$ETCD_VERSION built in $((SECONDS - t0))s: $dest/etcd"
}

build_etcd
build_kube kube-apiserver "$KUBE_VERSION"
# With NAVE_NODE_ASSETS=1 (make node-assets): the rest of a single-node cluster for e2e/node.
if [ "${NAVE_NODE_ASSETS:-}" = 1 ]; then
	build_kube kubelet "$KUBELET_VERSION"
	build_kube kube-controller-manager "$KUBE_VERSION"
fi
log "done: $dest"
