#!/usr/bin/env bash
# Builds the local control plane's binaries from the Go module proxy, at the versions pinned in
# hack/versions.env, into a cache outside the repository:
#
#   $GPU_SCHEDULER_CACHE/bin/kubernetes-<v>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
#   $GPU_SCHEDULER_CACHE/bin/etcd-<v>/etcd
#   $GPU_SCHEDULER_CACHE/bin/kwok-<v>/kwok
#
# With --node (or GPU_SCHEDULER_REAL_NODE=1) it also builds what the local cluster's opt-in real
# node runs (hack/localcluster/realnode.py), as components of their own so that a machine with the
# control plane cached does not rebuild it, and one without the flag never builds them:
#
#   $GPU_SCHEDULER_CACHE/bin/kubernetes-node-<v>/{kubelet,kube-proxy}   same k8s.io/kubernetes module
#   $GPU_SCHEDULER_CACHE/bin/dra-test-driver-<v>/test-driver            same module's
#                                                   test/e2e/dra/test-driver (the real node's DRA driver)
#   $GPU_SCHEDULER_CACHE/bin/containerd-<v>/{containerd,ctr,containerd-shim-runc-v2}
#                                                   github.com/containerd/containerd/v2 (CDI; runc is Debian's)
#   $GPU_SCHEDULER_CACHE/bin/node-images-<hash>/{pause,probe}           hack/localcluster/images,
#                                                                        <hash> of its sources
#
# With --kueue (or GPU_SCHEDULER_KUEUE=1) it also builds Kueue, which the local cluster runs only
# when a test or the demo asks for it (hack/localcluster/kueue.py), with its CRDs and webhook
# definitions beside it (the module's config/components/crd/bases and
# config/components/webhook/manifests.yaml, copied from the Go module cache):
#
#   $GPU_SCHEDULER_CACHE/bin/kueue-<v>/kueue
#   $GPU_SCHEDULER_CACHE/bin/kueue-<v>/crds/*.yaml
#   $GPU_SCHEDULER_CACHE/bin/kueue-<v>/webhooks.yaml
#
# With --celcheck it builds hack/celcheck, the DRA CEL reference (k8s.io/dynamic-resource-allocation
# cel at the staging version matching KUBERNETES_VERSION) that tests/integration/test_dra_cel_exact.py
# compares scheduler/dra/cel.py against, cached under a hash of its source and that version:
#
#   $GPU_SCHEDULER_CACHE/bin/celcheck-<hash>/celcheck
#
# With --helm it builds Helm (helm.sh/helm/v4/cmd/helm; its go.mod has no replaces), which the
# chart's tests run (charts/gpu-scheduler, tests/unit/test_chart*.py and
# tests/integration/test_helm*.py):
#
#   $GPU_SCHEDULER_CACHE/bin/helm-<v>/helm
#
# GPU_SCHEDULER_CACHE defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/gpu-scheduler. A component is
# rebuilt only when one of its binaries is missing; a build lands in a temporary folder first and is
# moved into place whole, so an interrupted build never leaves a half-filled version folder.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every k8s.io staging module with a
# folder inside its own tree. A wrapper module requires k8s.io/kubernetes and replaces each of those
# staging modules with its published v0.<minor>.<patch> release instead; the list is read from
# k8s.io/kubernetes's own go.mod, so it stays right when the pinned version changes.
#
# Output: one line per component on stderr, with its elapsed time ("etcd v3.6.5: built in 41 s");
# everything go prints goes to $GPU_SCHEDULER_CACHE/build/build.log instead, and its last lines are
# printed only when a step fails. Prints the cache folder of each component on the last lines of
# stdout: KUBERNETES_BIN=..., ETCD_BIN=..., KWOK_BIN=... (and KUBERNETES_NODE_BIN=...,
# NODE_IMAGES_BIN=..., DRA_DRIVER_BIN=..., CONTAINERD_BIN=... with --node, KUEUE_BIN=... with --kueue, CELCHECK_BIN=... with --celcheck,
# HELM_BIN=... with --helm)
set -euo pipefail

real_node="${GPU_SCHEDULER_REAL_NODE:-0}"
kueue="${GPU_SCHEDULER_KUEUE:-0}"
celcheck=0
helm=0
for arg in "$@"; do
  case "$arg" in
    --node) real_node=1 ;;
    --kueue) kueue=1 ;;
    --celcheck) celcheck=1 ;;
    --helm) helm=1 ;;
    *) printf 'usage: %s [--node] [--kueue] [--celcheck] [--helm]\n' "$0" >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

cache="${GPU_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-scheduler}"
mkdir -p "$cache/bin" "$cache/build"
# One build at a time per cache: a second run (another checkout, a parallel `make`) waits for the
# first and then finds the binaries cached.
exec 9>"$cache/build/.lock"
if ! flock -n 9; then
  printf '[build-binaries %s] another build holds %s; waiting for it\n' "$(date +%H:%M:%S)" "$cache/build/.lock" >&2
  flock 9
fi
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export CGO_ENABLED=0

log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

have_all() { # folder, binaries...
  local dir="$1"; shift
  local b
  for b in "$@"; do [[ -x "$dir/$b" ]] || return 1; done
}

build_log="$cache/build/build.log"
: >"$build_log"

# Runs a command with its output appended to the build log; on failure prints the log's last lines
# and exits.
quiet() { # what, command...
  local what="$1"; shift
  printf '\n$ %s\n' "$*" >>"$build_log"
  if ! "$@" >>"$build_log" 2>&1; then
    echo >&2
    log "$what failed; the last lines of $build_log:"
    tail -n 40 "$build_log" >&2
    exit 1
  fi
}

# One line per component: "<what>: building ..." completed in place with the elapsed time.
begin() { printf '[build-binaries %s] %s: building ...' "$(date +%H:%M:%S)" "$1" >&2; }
done_in() { printf ' built in %d s into %s\n' "$(( SECONDS - $1 ))" "$2" >&2; }

# build_kubernetes [<component> <packages...>]: the commands of k8s.io/kubernetes of the pinned
# version into $cache/bin/<component>-<v>, each named by its last path element; a package without a
# slash is cmd/<package>. By default the control plane's.
build_kubernetes() {
  local component="${1:-kubernetes}"
  local packages=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  [[ $# -gt 1 ]] && packages=("${@:2}")
  local p bins=() targets=()
  for p in "${packages[@]}"; do
    [[ "$p" == */* ]] || p="cmd/$p"
    targets+=("k8s.io/kubernetes/$p")
    bins+=("${p##*/}")
  done
  local version="$KUBERNETES_VERSION"
  local out="$cache/bin/$component-$version"
  if have_all "$out" "${bins[@]}"; then log "$component $version: cached in $out"; return; fi
  local started=$SECONDS
  local staging_version="v0.${version#v1.}"
  local work="$cache/build/$component-$version"
  rm -rf "$work" && mkdir -p "$work"
  begin "$component $version"
  quiet "kubernetes $version: downloading its module" go mod download -json "k8s.io/kubernetes@$version"
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$version" 2>>"$build_log" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
  local staging
  staging="$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod")"
  [[ -n "$staging" ]] || { echo >&2; log "no staging replaces found in $gomod"; exit 1; }
  {
    echo "module gpu-scheduler.local/$component-build"
    echo
    echo "go 1.24.0"
    echo
    echo "require k8s.io/kubernetes $version"
    echo
    local m
    for m in $staging; do echo "replace $m => $m $staging_version"; done
  } >"$work/go.mod"
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    local t
    for t in "${targets[@]}"; do echo "	_ \"$t\""; done
    echo ")"
  } >"$work/tools.go"
  (cd "$work" && quiet "$component $version: resolving modules" go mod tidy -e)
  local commit
  commit="$(go mod download -json "k8s.io/kubernetes@$version" 2>>"$build_log" | sed -n 's/.*"Hash": "\(.*\)".*/\1/p' | head -n1)"
  local minor="${version#v1.}"; minor="${minor%%.*}"
  local pkg=k8s.io/component-base/version
  local ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  [[ -n "$commit" ]] && ldflags+=" -X $pkg.gitCommit=$commit"
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  (cd "$work" && quiet "$component $version: compiling" go build -tags tools -trimpath -ldflags "$ldflags" -o "$tmp/" "${targets[@]}")
  rm -rf "$out" && mv "$tmp" "$out"
  done_in "$started" "$out"
}

build_etcd() {
  local version="$ETCD_VERSION"
  local out="$cache/bin/etcd-$version"
  if have_all "$out" etcd; then log "etcd $version: cached in $out"; return; fi
  local started=$SECONDS
  local work="$cache/build/etcd-$version"
  rm -rf "$work" && mkdir -p "$work"
  cat >"$work/go.mod" <<EOF
module gpu-scheduler.local/etcd-build

go 1.24.0
EOF
  cat >"$work/main.go" <<'EOF'
// Command etcd is etcd's server, built from its published module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  begin "etcd $version"
  (cd "$work" && quiet "etcd $version: resolving modules" go get "go.etcd.io/etcd/server/v3@$version" "go.etcd.io/etcd/api/v3@$version")
  (cd "$work" && quiet "etcd $version: resolving modules" go mod tidy)
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  (cd "$work" && quiet "etcd $version: compiling" go build -trimpath \
    -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$version" -o "$tmp/etcd" .)
  rm -rf "$out" && mv "$tmp" "$out"
  done_in "$started" "$out"
}

build_kwok() {
  local version="$KWOK_VERSION"
  local out="$cache/bin/kwok-$version"
  if have_all "$out" kwok; then log "kwok $version: cached in $out"; return; fi
  local started=$SECONDS
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  begin "kwok $version"
  GOBIN="$tmp" quiet "kwok $version: compiling" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${version#v}" "sigs.k8s.io/kwok/cmd/kwok@$version"
  rm -rf "$out" && mv "$tmp" "$out"
  done_in "$started" "$out"
}

# containerd 2 (CDI on by default), its ctr client and its runc shim, from its published module (no
# replaces in its go.mod, so `go install` builds it); static (CGO_ENABLED=0: no btrfs snapshotter,
# which the real node does not use). runc stays Debian's.
build_containerd() {
  local version="$CONTAINERD_VERSION"
  local out="$cache/bin/containerd-$version"
  if have_all "$out" containerd ctr containerd-shim-runc-v2; then log "containerd $version: cached in $out"; return; fi
  local started=$SECONDS
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  begin "containerd $version"
  local module=github.com/containerd/containerd/v2
  GOBIN="$tmp" quiet "containerd $version: compiling" go install -trimpath \
    -ldflags "-s -w -X $module/version.Version=$version -X $module/version.Package=github.com/containerd/containerd" \
    "$module/cmd/containerd@$version" "$module/cmd/ctr@$version" "$module/cmd/containerd-shim-runc-v2@$version"
  rm -rf "$out" && mv "$tmp" "$out"
  done_in "$started" "$out"
}

# The sandbox (pause) and probe programs of the real node's images, static, from the Go module in
# hack/localcluster/images (standard library only); cached under a hash of its sources.
build_node_images() {
  local src="$here/localcluster/images"
  local hash
  hash="$(cd "$src" && find . -type f \( -name '*.go' -o -name go.mod \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)"
  local out="$cache/bin/node-images-$hash"
  NODE_IMAGES_OUT="$out"
  if have_all "$out" pause probe; then log "node images $hash: cached in $out"; return; fi
  local started=$SECONDS
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  begin "node images $hash"
  (cd "$src" && quiet "node images: compiling" go build -trimpath -ldflags "-s -w" -o "$tmp/" ./pause ./probe)
  rm -rf "$out" && mv "$tmp" "$out"
  done_in "$started" "$out"
}

# Kueue's controller manager (sigs.k8s.io/kueue/cmd/kueue; its go.mod has no replaces, so a
# plain `go install` builds it) and the CRDs of the same module version.
build_kueue() {
  local version="$KUEUE_VERSION"
  local out="$cache/bin/kueue-$version"
  if have_all "$out" kueue && [[ -f "$out/crds/kueue.x-k8s.io_workloads.yaml" && -f "$out/webhooks.yaml" ]]; then
    log "kueue $version: cached in $out"
    return
  fi
  local started=$SECONDS
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp/crds"
  begin "kueue $version"
  quiet "kueue $version: downloading its module" go mod download -json "sigs.k8s.io/kueue@$version"
  local dir
  dir="$(go mod download -json "sigs.k8s.io/kueue@$version" 2>>"$build_log" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
  [[ -d "$dir/config/components/crd/bases" ]] || { echo >&2; log "no CRDs in $dir/config/components/crd/bases"; exit 1; }
  cp "$dir"/config/components/crd/bases/*.yaml "$tmp/crds/"
  cp "$dir/config/components/webhook/manifests.yaml" "$tmp/webhooks.yaml"
  chmod -R u+w "$tmp"  # the module cache's files are read-only
  GOBIN="$tmp" quiet "kueue $version: compiling" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version" "sigs.k8s.io/kueue/cmd/kueue@$version"
  rm -rf "$out" && mv "$tmp" "$out"
  done_in "$started" "$out"
}

# hack/celcheck/main.go in a wrapper module that requires k8s.io/dynamic-resource-allocation at the
# staging version of KUBERNETES_VERSION (published staging modules need no replaces); cached under a
# hash of that version and the program's source.
build_celcheck() {
  local staging_version="v0.${KUBERNETES_VERSION#v1.}"
  local hash
  hash="$( { echo "$staging_version"; cat "$here/celcheck/main.go"; } | sha256sum | cut -c1-12)"
  local out="$cache/bin/celcheck-$hash"
  CELCHECK_OUT="$out"
  if have_all "$out" celcheck; then log "celcheck $hash: cached in $out"; return; fi
  local started=$SECONDS
  local work="$cache/build/celcheck-$hash"
  rm -rf "$work" && mkdir -p "$work"
  cp "$here/celcheck/main.go" "$work/"
  printf 'module gpu-scheduler.local/celcheck-build\n\ngo 1.24.0\n\nrequire k8s.io/dynamic-resource-allocation %s\n' \
    "$staging_version" >"$work/go.mod"
  begin "celcheck $hash"
  (cd "$work" && quiet "celcheck: resolving modules" go mod tidy)
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  (cd "$work" && quiet "celcheck: compiling" go build -trimpath -ldflags "-s -w" -o "$tmp/celcheck" .)
  rm -rf "$out" && mv "$tmp" "$out"
  done_in "$started" "$out"
}

# Helm's command from its published module, stamped with its version as Helm's Makefile does
# (internal/version: version, and no "unreleased" metadata for a tag).
build_helm() {
  local version="$HELM_VERSION"
  local out="$cache/bin/helm-$version"
  if have_all "$out" helm; then log "helm $version: cached in $out"; return; fi
  local started=$SECONDS
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  begin "helm $version"
  local pkg=helm.sh/helm/v4/internal/version
  GOBIN="$tmp" quiet "helm $version: compiling" go install -trimpath \
    -ldflags "-s -w -X $pkg.version=$version -X $pkg.metadata= -X $pkg.gitTreeState=clean" \
    "helm.sh/helm/v4/cmd/helm@$version"
  rm -rf "$out" && mv "$tmp" "$out"
  done_in "$started" "$out"
}

command -v go >/dev/null || { log "go is not installed; install Go >= 1.26 first"; exit 1; }
total=$SECONDS
if ! have_all "$cache/bin/kubernetes-$KUBERNETES_VERSION" kube-apiserver kube-controller-manager kube-scheduler kubectl \
  || ! have_all "$cache/bin/etcd-$ETCD_VERSION" etcd || ! have_all "$cache/bin/kwok-$KWOK_VERSION" kwok; then
  log "building the control plane from the Go module proxy (a first run on a machine: about 8.5 min on 2 cores); go's output: $build_log"
fi
build_etcd
build_kwok
build_kubernetes
if [[ "$real_node" == 1 ]]; then
  build_kubernetes kubernetes-node kubelet kube-proxy
  build_kubernetes dra-test-driver test/e2e/dra/test-driver
  build_containerd
  build_node_images
fi
if [[ "$kueue" == 1 ]]; then
  build_kueue
fi
if [[ "$celcheck" == 1 ]]; then
  build_celcheck
fi
if [[ "$helm" == 1 ]]; then
  build_helm
fi
log "all binaries ready in $((SECONDS - total)) s"
echo "KUBERNETES_BIN=$cache/bin/kubernetes-$KUBERNETES_VERSION"
echo "ETCD_BIN=$cache/bin/etcd-$ETCD_VERSION"
echo "KWOK_BIN=$cache/bin/kwok-$KWOK_VERSION"
if [[ "$real_node" == 1 ]]; then
  echo "KUBERNETES_NODE_BIN=$cache/bin/kubernetes-node-$KUBERNETES_VERSION"
  echo "NODE_IMAGES_BIN=$NODE_IMAGES_OUT"
  echo "DRA_DRIVER_BIN=$cache/bin/dra-test-driver-$KUBERNETES_VERSION"
  echo "CONTAINERD_BIN=$cache/bin/containerd-$CONTAINERD_VERSION"
fi
if [[ "$kueue" == 1 ]]; then
  echo "KUEUE_BIN=$cache/bin/kueue-$KUEUE_VERSION"
fi
if [[ "$celcheck" == 1 ]]; then
  echo "CELCHECK_BIN=$CELCHECK_OUT"
fi
if [[ "$helm" == 1 ]]; then
  echo "HELM_BIN=$cache/bin/helm-$HELM_VERSION"
fi
