"""The real node's container runtime configuration: containerd 2 with CDI, runc, and CNI.

`containerd_config` writes containerd 2's config (format version 3; the keys are those of
`github.com/containerd/containerd/v2@v2.4.2 internal/cri/config/config.go`): the CRI plugin is
split into `io.containerd.cri.v1.images` (snapshotter, the pinned sandbox image),
`io.containerd.cri.v1.runtime` (runtimes, CNI, CDI) and `io.containerd.grpc.v1.cri` (the
streaming server). CDI is always on in
containerd 2 (the 1.x `enable_cdi` key is gone; `plugins/cri/runtime/plugin.go` drops it when it
migrates an old config); `cdi_spec_dirs` names the one folder that the node's DRA driver writes its
specs to, so no spec of the machine's /etc/cdi or /var/run/cdi reaches a pod.

Every path containerd would otherwise take from its defaults (/var/lib/containerd, /run/containerd,
/opt/containerd, /var/run/nri) is under the node's folder or switched off, except the shims' socket
folder /run/containerd/s, which containerd 2 fixes for root (`core/runtime/v2/shim_unix.go`) and
which teardown removes when it was not there before. The runc shim is containerd 2's own
(`runtime_path`), not whichever `containerd-shim-runc-v2` is first on PATH; runc is Debian's.

`cni_config` is the pods' network; `can_lower_oom_score` says whether runc may be asked to lower an
oom_score_adj here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PAUSE_IMAGE = "localhost/gpu-scheduler/pause:1"
BRIDGE = "gpus-cni0"
CNI_NETWORK = "gpu-scheduler-pods"
DISABLED_PLUGINS = (
    "io.containerd.snapshotter.v1.blockfile",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.erofs",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.tracing.processor.v1.otlp",
)
"""Snapshotters the node does not use (some need host set-up) and the tracing exporter."""


@dataclass(frozen=True)
class RuntimeBinaries:
    """Absolute paths of the container runtime's programs."""

    containerd: Path
    ctr: Path
    shim: Path
    """containerd-shim-runc-v2 of the same containerd build."""
    runc: Path
    cni_bin_dir: Path


@dataclass(frozen=True)
class RuntimeFolders:
    """Where the runtime keeps its state and reads its CNI and CDI configuration."""

    containerd: Path
    """containerd's root, state, opt and runc root live under it."""
    socket: Path
    cni_conf: Path
    cdi_specs: Path


def containerd_config(
    folders: RuntimeFolders, binaries: RuntimeBinaries, restrict_oom: bool
) -> str:
    """containerd 2's config (version 3): state under `folders.containerd`, the CRI plugin with the
    offline sandbox image, runc through containerd 2's own shim with cgroupfs, CNI from
    `folders.cni_conf`, CDI specs from `folders.cdi_specs` only, NRI off; `restrict_oom` when this
    process cannot lower an oom_score_adj (`can_lower_oom_score`)."""
    folder = folders.containerd
    runtime = 'plugins."io.containerd.cri.v1.runtime"'
    runc = f"{runtime}.containerd.runtimes.runc"
    disabled = "".join(f'  "{name}",\n' for name in DISABLED_PLUGINS)
    return f"""version = 3
root = "{folder / "root"}"
state = "{folder / "state"}"
disabled_plugins = [
{disabled}]

[grpc]
  address = "{folders.socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{folder / "opt"}"

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{PAUSE_IMAGE}"

[{runtime}]
  netns_mounts_under_state_dir = true
  enable_selinux = false
  cdi_spec_dirs = ["{folders.cdi_specs}"]
  # Lowering a process's oom_score_adj needs CAP_SYS_RESOURCE, which some sandboxes (such as
  # these machines') withhold even from root: runc then fails creating every pod sandbox (kubelet
  # asks -998 for it). Clamp to no lower than containerd's own, as rootless set-ups do.
  restrict_oom_score_adj = {"true" if restrict_oom else "false"}

[{runtime}.cni]
  bin_dirs = ["{binaries.cni_bin_dir}"]
  conf_dir = "{folders.cni_conf}"
  max_conf_num = 1

[{runtime}.containerd]
  default_runtime_name = "runc"

[{runc}]
  runtime_type = "io.containerd.runc.v2"
  runtime_path = "{binaries.shim}"

[{runc}.options]
  BinaryName = "{binaries.runc}"
  Root = "{folder / "runc"}"
  SystemdCgroup = false
"""


def cni_config(pod_cidr: str, ipam_dir: Path) -> dict[str, object]:
    """The CNI network: a bridge that is the pods' gateway (so pods reach this machine's
    addresses, and through kube-proxy's rules the Service ClusterIPs), without masquerading
    (pods reach nothing beyond this machine), IPs from `pod_cidr`."""
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
    }


def can_lower_oom_score() -> bool:
    """Whether this process holds CAP_SYS_RESOURCE, needed to lower an oom_score_adj."""
    cap_sys_resource = 24
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> cap_sys_resource & 1)
    return False
