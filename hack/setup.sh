#!/usr/bin/env bash
# Installs everything gpu-scheduler's demo and tests need, skipping what is already there:
#   1. Debian's packages (apt-get; as root, or through sudo): `prometheus`, and what the local
#      cluster's opt-in real node runs beside its own Go-built parts (hack/localcluster/realnode.py):
#      `runc`, `containernetworking-plugins`, `iptables`, `conntrack`, `nftables`; the offline image
#      build (hack/image, tests/integration/test_image.py): `mmdebstrap`, `buildah`, `umoci`; the
#      shell lint (tests/unit/test_shellcheck.py): `shellcheck`,
#   2. the virtualenv .venv with the project and its test extra (re-installed when pyproject.toml changes),
#   3. the Go-built control plane binaries (hack/build-binaries.sh; cached outside the repository;
#      the real node's kubelet, kube-proxy, containerd 2 and DRA test driver, Kueue and Helm are
#      built when a test first needs them: `hack/build-binaries.sh --node` / `--kueue` / `--helm`).
# Needs: Python >= 3.11, Go >= 1.26 (Kubernetes v1.37 needs it), and a Debian-like system for apt-get.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
started=$SECONDS

python="${PYTHON:-python3}"
"$python" - <<'PY' || { log "Python >= 3.11 is required (set PYTHON=/path/to/python3.11)"; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY
command -v go >/dev/null || { log "Go >= 1.26 is required to build the Kubernetes binaries"; exit 1; }

# Debian package -> a file it installs (present means installed).
declare -A packages=(
  [prometheus]=/usr/bin/prometheus
  [runc]=/usr/sbin/runc
  [containernetworking-plugins]=/usr/lib/cni/bridge
  [iptables]=/usr/sbin/iptables
  [conntrack]=/usr/sbin/conntrack
  [nftables]=/usr/sbin/nft
  [mmdebstrap]=/usr/bin/mmdebstrap
  [buildah]=/usr/bin/buildah
  [umoci]=/usr/bin/umoci
  [shellcheck]=/usr/bin/shellcheck
)
absent=()
for package in "${!packages[@]}"; do
  [[ -e "${packages[$package]}" ]] || absent+=("$package")
done
if ((${#absent[@]})); then
  log "installing Debian packages: ${absent[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${absent[@]}" >/dev/null
fi

stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [[ ! -f "$stamp" ]]; then
  log "creating .venv and installing gpu-scheduler[test]"
  [[ -x .venv/bin/python ]] || "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  rm -f .venv/.installed-* && touch "$stamp"
fi

bash hack/build-binaries.sh >/dev/null
log "set-up complete in $((SECONDS - started)) s"
