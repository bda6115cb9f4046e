"""An opt-in real node beside the kwok nodes: containerd, kubelet, a DRA driver and kube-proxy on
this machine.

    cluster = LocalCluster(ClusterConfig(real_node=True))
    cluster.start()      # ... then the node `cluster.real_node.name` is Ready, with DRA devices
    cluster.stop()       # pods, processes, mounts, iptables rules, links and cgroups gone

Parts (state under `<cluster folder>/node/` unless said):

- containerd 2 (`hack/build-binaries.sh --node`, with its runc shim) and Debian's runc: its own
  config, root, state and socket (`containerd.containerd_config`); the CRI plugin with `PAUSE_IMAGE`
  as sandbox image, and CDI specs read from `node/cdi` only.
- CNI: Debian's `containernetworking-plugins`; bridge `BRIDGE` as the pods' gateway (no masquerade),
  host-local IPAM over the node's pod CIDR.
- kubelet: `hack/build-binaries.sh --node`; cgroupfs driver on cgroup v1 (`failCgroupV1: false`),
  cgroup root `CGROUP_NAME`.
- the DRA driver: Kubernetes' test driver as kubelet's plugin (`dradriver.DraDriver`, started after
  kubelet): one ResourceSlice of `dradriver.NUM_DEVICES` devices for the node, the DeviceClass
  `dradriver.DEVICE_CLASS`, and for each prepared claim a CDI spec in `node/cdi` that sets
  environment variables naming the claim and request in the containers that use it.
- kube-proxy: `hack/build-binaries.sh --node`; iptables mode, NodePorts on the host address only.
- images: `images/pause` (the sandbox) and `images/probe` (`PROBE_IMAGE`: GET /livez through the
  `kubernetes` Service; with `-env`, print the environment and wait), static Go programs written
  into OCI archives by `oci.py` and imported with `ctr images import`.

Sockets and kubelet's root folder live in a short folder `/run/gpus-node-*` (a unix socket path
has at most 104 bytes).

containerd 2 rather than Debian's 1.6: 1.6 has no CDI, so a DRA driver's devices never reach a
container there, and kubelet 1.37 accepts 1.6 only through a fallback (1.6 does not answer the CRI
RuntimeConfig call) that ends in 1.38.

The API server, in real-node mode, listens on every address and advertises this machine's address
(`host_ip()`), so the `kubernetes` Service's endpoints (the lease reconciler's) reach it from pods
through kube-proxy's rules; kubelet, the DRA driver and kube-proxy authenticate with client
certificates signed by the cluster CA (`system:node:<name>` in `system:nodes`, allowed by the Node
authorizer, and `system:kube-proxy`, bound by the bootstrap RBAC policy). The Node object is created
before kubelet registers so that it carries `spec.podCIDR` (no controller here allocates pod CIDRs).

Only one real node runs on a machine at a time (`LOCK_FILE`): the bridge, the iptables chains and
some sysctls are host-wide. Teardown (`stop`) cordons the node, deletes its pods and waits for their
sandboxes to go (kubelet unprepares their claims through the driver meanwhile), stops the driver
(deleting its slices and DeviceClass), stops kube-proxy and removes its rules (`kube-proxy
--cleanup`), stops kubelet and containerd, kills whatever still runs in the node's cgroups, unmounts
what is mounted under the node's folder, removes the bridge, the cgroups and the files CNI and
kubelet left in their fixed folders, and restores the sysctls they changed. It is safe to call more
than once (`hostcleanup.clean_host`). What it needs is kept in the lock file while the node runs
(`hostcleanup.HostRecord`), so a start after a launcher that died without its teardown (SIGKILL)
cleans up what that one left.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import yaml

from hack.localcluster import hoststate
from hack.localcluster.binaries import BUILD_SCRIPT, cache_dir, pinned_versions
from hack.localcluster.containerd import (
    BRIDGE,
    PAUSE_IMAGE,
    RuntimeBinaries,
    RuntimeFolders,
    can_lower_oom_score,
    cni_config,
    containerd_config,
)
from hack.localcluster.dradriver import DraDriver, DriverPaths
from hack.localcluster.hostcleanup import CGROUP_NAME, HostRecord, clean_host
from hack.localcluster.nodeconfig import kube_proxy_config, kubelet_config
from hack.localcluster.oci import ImageFile, write_image_archive
from hack.localcluster.pki import issue_client_cert
from hack.localcluster.processes import ComponentError, ProcessGroup

if TYPE_CHECKING:
    from hack.localcluster.cluster import LocalCluster

PROBE_IMAGE = "localhost/gpu-scheduler/probe:1"
LOCK_FILE = Path("/run/lock/gpu-scheduler-real-node.lock")
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
READY_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 60.0
REAL_NODE_LABEL = "gpu-scheduler.io/real-node"


class RealNodeError(ComponentError):
    """The real node cannot start here; the message says what is missing."""


@dataclass(frozen=True)
class RealNodeConfig:
    """The node's name and addresses."""

    name: str = "real-node"
    pod_cidr: str = "10.244.0.0/24"
    """This node's pods' addresses (`spec.podCIDR`); inside `cluster_cidr`."""
    cluster_cidr: str = "10.244.0.0/16"
    """Every pod address (kube-proxy's view of "local" traffic)."""
    max_pods: int = 30


@dataclass(frozen=True)
class NodeBinaries:
    """Absolute paths of what the real node runs."""

    kubelet: Path
    kube_proxy: Path
    pause: Path
    probe: Path
    dra_driver: Path
    runtime: RuntimeBinaries

    @property
    def ctr(self) -> Path:
        """containerd's command-line client (`ctr images import` of an OCI archive)."""
        return self.runtime.ctr


def host_ip() -> str:
    """This machine's address that pods can reach: `GPU_SCHEDULER_NODE_IP`, else the source
    address of the default route, else the first global IPv4 address. Raises RealNodeError when
    there is none."""
    if os.environ.get("GPU_SCHEDULER_NODE_IP"):
        return os.environ["GPU_SCHEDULER_NODE_IP"]
    routes = json.loads(_output(["ip", "-j", "-4", "route", "show", "default"]) or "[]")
    devices = [r["dev"] for r in routes if "dev" in r]
    addresses = json.loads(_output(["ip", "-j", "-4", "addr", "show", "scope", "global"]) or "[]")
    ordered = sorted(addresses, key=lambda a: a.get("ifname") not in devices)
    for link in ordered:
        if link.get("ifname") == BRIDGE:
            continue
        for info in link.get("addr_info", []):
            if info.get("family") == "inet" and info.get("local"):
                return str(info["local"])
    raise RealNodeError("no global IPv4 address on this machine; set GPU_SCHEDULER_NODE_IP")


def node_binaries(build: bool = True) -> NodeBinaries:
    """The real node's binaries, building kubelet, kube-proxy, the DRA driver, containerd 2 and
    the image programs first (`hack/build-binaries.sh --node`) when missing. Raises RealNodeError
    naming what is missing (Debian packages: `hack/setup.sh` installs them)."""
    if os.geteuid() != 0:
        raise RealNodeError("the real node needs root (containerd, mounts, iptables, cgroups)")
    debian = {name: shutil.which(name) for name in ("runc", "iptables")}
    cni = next((Path(d) for d in CNI_BIN_DIRS if (Path(d) / "bridge").is_file()), None)
    absent = [name for name, path in debian.items() if path is None]
    if shutil.which("conntrack") is None:
        absent.append("conntrack")
    if cni is None:
        absent.append("CNI plugins (bridge, host-local, loopback)")
    if absent:
        raise RealNodeError(
            f"the real node needs {', '.join(absent)}; run hack/setup.sh "
            "(Debian packages runc, containernetworking-plugins, iptables, conntrack)"
        )
    folders = _built_folders(build)
    containerd = folders["CONTAINERD_BIN"]
    return NodeBinaries(
        kubelet=folders["KUBERNETES_NODE_BIN"] / "kubelet",
        kube_proxy=folders["KUBERNETES_NODE_BIN"] / "kube-proxy",
        pause=folders["NODE_IMAGES_BIN"] / "pause",
        probe=folders["NODE_IMAGES_BIN"] / "probe",
        dra_driver=folders["DRA_DRIVER_BIN"] / "test-driver",
        runtime=RuntimeBinaries(
            containerd=containerd / "containerd",
            ctr=containerd / "ctr",
            shim=containerd / "containerd-shim-runc-v2",
            runc=Path(str(debian["runc"])),
            cni_bin_dir=cni or Path(CNI_BIN_DIRS[0]),
        ),
    )


def _built_folders(build: bool) -> dict[str, Path]:
    version = pinned_versions()["KUBERNETES_VERSION"]
    kubernetes = cache_dir() / "bin" / f"kubernetes-node-{version}"
    if build or not (kubernetes / "kubelet").is_file():
        # The script is a no-op for what is cached, and the only one that knows the images'
        # source hash, so it names the folders.
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--node"], check=True, capture_output=True, text=True
        )
        folders = dict(line.split("=", 1) for line in result.stdout.splitlines() if "_BIN=" in line)
        return {key: Path(value) for key, value in folders.items()}
    raise RealNodeError(f"kubelet is not built in {kubernetes}; run hack/build-binaries.sh --node")


def _output(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


class RealNode:
    """containerd + kubelet + kube-proxy of one cluster; see the module docstring."""

    def __init__(self, cluster: LocalCluster, config: RealNodeConfig | None = None) -> None:
        self.cluster = cluster
        self.config = config or RealNodeConfig()
        self.name = self.config.name
        self.folder = cluster.work_dir / "node"
        self.socket_dir: Path | None = None
        """A short folder for containerd's socket and kubelet's root folder, which holds sockets
        too (a unix socket path has at most 104 bytes, and a cluster folder may be deep); made at
        start, removed at stop."""
        self.socket = Path("containerd.sock")
        self.kubelet_root = Path("kubelet")
        self.processes = ProcessGroup(cluster.log_dir)
        self.host_ip = ""
        self.binaries: NodeBinaries | None = None
        self.timings: dict[str, float] = {}
        """Seconds each start step took: containerd, images, kubelet (to node Ready), dra-driver
        (to its ResourceSlice), kube-proxy."""
        self.dra_driver: DraDriver | None = None
        """The node's DRA driver once started (`dradriver.DraDriver`)."""
        self._lock: IO[str] | None = None
        self._record = HostRecord(folder=self.folder)
        self.recovered: HostRecord | None = None
        """What a previous real node, whose launcher died before its teardown, left recorded in
        the lock file; cleaned up at this start."""

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start containerd, import the images, start kubelet and wait for the node to be Ready
        with its pod CIDR, then kube-proxy until healthy. Raises RealNodeError or ComponentError
        (naming the part and its log); whatever was started is torn down before it propagates."""
        try:
            self.binaries = node_binaries()
            self._take_lock()
            self.host_ip = host_ip()
            self.folder.mkdir(parents=True, exist_ok=True)
            runtime = Path("/run") if Path("/run").is_dir() else Path(tempfile.gettempdir())
            self.socket_dir = Path(tempfile.mkdtemp(prefix="gpus-node-", dir=runtime))
            self.socket = self.socket_dir / "containerd.sock"
            self.kubelet_root = self.socket_dir / "kubelet"
            self._record = HostRecord.now(self.folder, self.socket_dir)
            self._write_record()
            self._timed("containerd", self._start_containerd)
            self._timed("images", self._import_images)
            self._timed("kubelet", self._start_kubelet)
            self._timed("dra-driver", self._start_dra_driver)
            self._timed("kube-proxy", self._start_kube_proxy)
        except BaseException:
            self.stop()
            raise

    def _timed(self, step: str, action: object) -> None:
        started = time.monotonic()
        assert callable(action)
        action()
        self.timings[step] = time.monotonic() - started

    def _take_lock(self) -> None:
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        lock = LOCK_FILE.open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip()[:80]
            lock.close()
            raise RealNodeError(
                f"another real node runs on this machine ({LOCK_FILE}: {holder}); "
                "one at a time, since its bridge and iptables rules are host-wide"
            ) from None
        self._lock = lock
        lock.seek(0)
        previous = HostRecord.from_json(lock.read())
        if previous is not None:  # its launcher died before tearing it down
            self.recovered = previous
            clean_host(previous, self.binaries.kube_proxy if self.binaries else None)
        self._write_record()

    def _write_record(self) -> None:
        """Keep what teardown needs in the lock file, for the next start if this process dies
        before `stop` (its components die with it, but not mounts, shims, rules or sysctls)."""
        assert self._lock is not None
        self._lock.seek(0)
        self._lock.truncate(0)
        self._lock.write(self._record.to_json())
        self._lock.flush()

    def _start_containerd(self) -> None:
        assert self.binaries is not None
        folders = RuntimeFolders(
            containerd=self.folder / "containerd",
            socket=self.socket,
            cni_conf=self.folder / "cni" / "net.d",
            cdi_specs=self.folder / "cdi",
        )
        folders.cni_conf.mkdir(parents=True, exist_ok=True)
        folders.cdi_specs.mkdir(parents=True, exist_ok=True)
        (folders.cni_conf / "10-gpu-scheduler.conflist").write_text(
            json.dumps(cni_config(self.config.pod_cidr, self.folder / "cni" / "ipam"), indent=2)
        )
        config = folders.containerd / "config.toml"
        folders.containerd.mkdir(parents=True, exist_ok=True)
        config.write_text(
            containerd_config(folders, self.binaries.runtime, not can_lower_oom_score())
        )
        component = self.processes.start(
            "containerd", [str(self.binaries.runtime.containerd), f"--config={config}"]
        )
        self.processes.wait_ready(component, lambda: self._ctr("version").returncode == 0, 30.0)

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self.binaries is not None
        ctr = self.binaries.runtime.ctr
        return subprocess.run(
            [str(ctr), f"--address={self.socket}", "--namespace=k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    def _import_images(self) -> None:
        assert self.binaries is not None
        for name, binary in (
            (PAUSE_IMAGE, self.binaries.pause),
            (PROBE_IMAGE, self.binaries.probe),
        ):
            entry = f"/{binary.name}"
            archive = self.folder / "images" / f"{binary.name}.oci.tar"
            write_image_archive(archive, name, [ImageFile(entry, binary.read_bytes())], [entry])
            result = self._ctr("images", "import", str(archive))
            if result.returncode != 0:
                raise RealNodeError(f"ctr images import {archive} failed: {result.stderr[-500:]}")

    def _start_kubelet(self) -> None:
        assert self.binaries is not None and self.cluster.pki is not None
        folder = self.folder / "kubelet"
        for hierarchy in _cgroup_hierarchies():
            (hierarchy / CGROUP_NAME).mkdir(exist_ok=True)
        kubeconfig = self._client_kubeconfig("kubelet", f"system:node:{self.name}", "system:nodes")
        self._create_node_object()
        config = folder / "config.yaml"
        folder.mkdir(parents=True, exist_ok=True)
        config.write_text(
            yaml.safe_dump(
                kubelet_config(
                    socket=self.socket,
                    ca_file=self.cluster.pki.ca_cert,
                    address=self.host_ip,
                    ports=(free_port_on(self.host_ip), free_port_on("127.0.0.1")),
                    pod_logs=self.folder / "pod-logs",
                    max_pods=self.config.max_pods,
                )
            )
        )
        component = self.processes.start(
            "kubelet",
            [
                str(self.binaries.kubelet),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.kubelet_root}",
                f"--cert-dir={folder / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.host_ip}",
                f"--node-labels={REAL_NODE_LABEL}=true",
                "--v=1",
            ],
        )
        self.processes.wait_ready(component, self.ready, READY_TIMEOUT_S)

    def _start_dra_driver(self) -> None:
        assert self.binaries is not None
        # The driver acts for the node, as the Node authorizer allows (see dradriver).
        kubeconfig = self._client_kubeconfig(
            "dra-driver", f"system:node:{self.name}", "system:nodes"
        )
        paths = DriverPaths(
            binary=self.binaries.dra_driver,
            kubeconfig=kubeconfig,
            kubelet_root=self.kubelet_root,
            cdi_specs=self.folder / "cdi",
        )
        self.dra_driver = DraDriver(self.cluster, self.processes, paths, self.name)
        self.dra_driver.start()

    def _client_kubeconfig(self, name: str, user: str, group: str | None) -> Path:
        assert self.cluster.pki is not None
        cert, key = issue_client_cert(self.cluster.pki, self.folder / "pki", name, user, group)
        kubeconfig = self.folder / f"{name}.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "local",
                            "cluster": {
                                "server": self.cluster.server,
                                "certificate-authority": str(self.cluster.pki.ca_cert),
                            },
                        }
                    ],
                    "users": [
                        {
                            "name": name,
                            "user": {"client-certificate": str(cert), "client-key": str(key)},
                        }
                    ],
                    "contexts": [{"name": "local", "context": {"cluster": "local", "user": name}}],
                    "current-context": "local",
                }
            )
        )
        kubeconfig.chmod(0o600)
        return kubeconfig

    def _create_node_object(self) -> None:
        manifest = self.folder / "node.yaml"
        manifest.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": self.name, "labels": {REAL_NODE_LABEL: "true"}},
                    "spec": {"podCIDR": self.config.pod_cidr, "podCIDRs": [self.config.pod_cidr]},
                }
            )
        )
        self.cluster.kubectl("apply", "-f", str(manifest))

    def node(self) -> dict[str, object] | None:
        """The Node object as JSON, or None when it is not there."""
        result = self.cluster.kubectl("get", "node", self.name, "-o", "json", check=False)
        if result.returncode != 0:
            return None
        node: dict[str, object] = json.loads(result.stdout)
        return node

    def ready(self) -> bool:
        """Whether the Node's Ready condition is True."""
        node = self.node()
        if node is None:
            return False
        status = node.get("status")
        conditions = status.get("conditions", []) if isinstance(status, dict) else []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def _start_kube_proxy(self) -> None:
        assert self.binaries is not None
        from hack.localcluster.cluster import http_ok

        kubeconfig = self._client_kubeconfig("kube-proxy", "system:kube-proxy", None)
        healthz, metrics = free_port_on("127.0.0.1"), free_port_on("127.0.0.1")
        config = self.folder / "kube-proxy.yaml"
        config.write_text(
            yaml.safe_dump(
                kube_proxy_config(kubeconfig, self.name, self.config.cluster_cidr, healthz, metrics)
            )
        )
        component = self.processes.start(
            "kube-proxy", [str(self.binaries.kube_proxy), f"--config={config}", "--v=1"]
        )
        self.processes.wait_ready(
            component, lambda: http_ok(f"http://127.0.0.1:{healthz}/healthz"), READY_TIMEOUT_S
        )

    # -- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Tear everything down; see the module docstring. Safe to call more than once, and
        after a failed start."""
        if self._lock is None:
            return
        running = {c.name for c in self.processes.components if c.alive()}
        if "kubelet" in running:
            self._drain()
        if self.dra_driver is not None:
            self.dra_driver.stop()
            self.dra_driver = None
        self._stop_component("kube-proxy")
        self._stop_component("kubelet")
        if self.cluster.binaries is not None:
            self.cluster.kubectl("delete", "node", self.name, "--ignore-not-found", check=False)
        self.processes.stop()
        clean_host(self._record, self.binaries.kube_proxy if self.binaries else None)
        self.socket_dir = None
        self._record = HostRecord(folder=self.folder)
        self._write_record()  # an empty record: nothing left to clean
        self._lock.close()
        self._lock = None

    def _stop_component(self, name: str) -> None:
        for component in self.processes.components:
            if component.name == name:
                component.stop()

    def _drain(self) -> None:
        """Cordon the node, delete its pods (short grace) and wait until containerd runs no
        sandbox, so that kubelet tears down their networks through CNI."""
        self.cluster.kubectl("cordon", self.name, check=False)
        self.cluster.kubectl(
            "delete",
            "pods",
            "--all-namespaces",
            f"--field-selector=spec.nodeName={self.name}",
            "--grace-period=1",
            "--wait=false",
            check=False,
        )
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self._ctr("tasks", "list", "--quiet").stdout.strip():
                return
            time.sleep(0.5)


def _cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies and the v2 one (each a folder of /sys/fs/cgroup that
    holds cgroup files)."""
    root = hoststate.CGROUP_ROOT
    if (root / "cgroup.controllers").is_file():  # a pure v2 machine: one hierarchy
        return [root]
    return [h for h in sorted(root.iterdir()) if h.is_dir() and not h.is_symlink()]


def free_port_on(address: str) -> int:
    """A TCP port on `address` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])
