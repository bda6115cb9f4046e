"""A real, local Kubernetes control plane with fake GPU nodes, Prometheus and a fake dcgm-exporter.

Lifecycle:

    cluster = LocalCluster(ClusterConfig())
    cluster.start()          # blocks until every component is ready
    ... cluster.kubeconfig, cluster.prometheus_url ...
    cluster.stop()           # every process gone; logs stay in cluster.log_dir

or `with LocalCluster(config) as cluster: ...`. Components, in start order:

| component               | listens on          | ready when                         |
|-------------------------|---------------------|------------------------------------|
| etcd                    | 127.0.0.1, http     | GET /health                        |
| kube-apiserver          | 127.0.0.1, https    | GET /readyz (RBAC bootstrap done)  |
| kube-controller-manager | 127.0.0.1, https    | GET /healthz                       |
| kwok                    | 127.0.0.1, http     | GET /healthz                       |
| kube-scheduler          | 127.0.0.1, https    | GET /healthz (optional: baseline)  |
| fake dcgm-exporter      | 127.0.0.1, http     | GET /healthz (optional)            |
| prometheus              | 127.0.0.1, http     | GET /-/ready (optional)            |

kwok plays the pod lifecycle of `kwok_stages` (kwok's defaults, plus pods annotated to run until
deleted and to terminate like a kubelet's, for Kueue's Jobs). Kueue is not a component of its own
here: a test starts it on a running cluster (`kueue.Kueue`).

Ports are free ports picked at start, so several clusters can run side by side. The API server runs
with RBAC (and the Node authorizer) and the default admission plugins; the controller manager runs
the controllers that the project's behaviour depends on (see `CONTROLLERS`).
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import yaml

from hack.localcluster import kwok_stages, prometheus
from hack.localcluster.binaries import Binaries, ensure_binaries
from hack.localcluster.pki import Pki, write_pki
from hack.localcluster.processes import Component, ProcessGroup
from hack.localcluster.realnode import RealNode, host_ip

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRACE = REPO_ROOT / "tests" / "data" / "h200" / "gpu-util-trace.csv"

# kube-controller-manager controllers: namespaces and service accounts (pods need their
# `default` ServiceAccount), garbage collection, PDB status (disruption), node lifecycle (it removes
# the not-ready taint that TaintNodesByCondition puts on every new node once kwok reports it
# Ready), the PV controller (binds claims to the volumes VolumeBinding pre-binds), the
# ResourceClaim controller (Dynamic Resource Allocation: it creates a pod's claims from its
# ResourceClaimTemplates, writes pod.status.resourceClaimStatuses, removes finished pods from
# reservedFor, deallocates and deletes generated claims; k8s.io/kubernetes@v1.37.2
# pkg/controller/resourceclaim/controller.go), and the workload controllers users' manifests rely
# on. Every controller uses the admin kubeconfig (--use-service-account-credentials=false), so
# RBAC lets each do its work. Taint-based eviction stays off: a heartbeat that lags under
# benchmark load must not evict pods behind the test's back; so does the device taint eviction
# controller (pods on devices tainted NoExecute).
CONTROLLERS = (
    "serviceaccount-token-controller",
    "serviceaccount-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "disruption-controller",
    "node-lifecycle-controller",
    "root-ca-certificate-publisher-controller",
    "replicaset-controller",
    "deployment-controller",
    "job-controller",
    "persistentvolume-binder-controller",
    "resourceclaim-controller",
)
REAL_NODE_CONTROLLERS = ("endpointslice-controller",)
"""Also run with a real node: its pods serve Services (the webhooks' Service), whose endpoints
kube-proxy routes to; kwok's pods serve nothing, so the default cluster does without them."""
READY_TIMEOUT_S = 90.0

FEATURE_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
"""GenericWorkload: beta in Kubernetes 1.37 but off by default: the Workload and PodGroup API
(scheduling.k8s.io/v1beta1) and the components' support for it (gang scheduling).
TopologyAwareWorkloadScheduling (alpha): without it the API server drops a PodGroup's
spec.schedulingConstraints (the topology key a gang must share)."""
RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"
"""Beta APIs are served only when asked for."""


@dataclass(frozen=True)
class ClusterConfig:
    """What to start. Every optional component defaults to on."""

    work_dir: Path | None = None
    """Folder for certificates, etcd data and logs; a fresh temporary folder when None."""
    kube_scheduler: bool = True
    """Run kube-scheduler (the baseline the benchmarks compare against)."""
    prometheus: bool = True
    fake_dcgm: bool = True
    scrape_interval_s: float = 1.0
    """Prometheus scrape interval for the fake exporter (the real exporter's default is 30 s)."""
    dcgm_trace: Path | None = DEFAULT_TRACE
    """CSV that `trace:` usage shapes replay; None when the file is not there."""
    dcgm_profiling: bool = False
    """Serve DCGM_FI_PROF_GR_ENGINE_ACTIVE for every GPU, not only on annotated nodes."""
    client_qps: int = 200
    """Client rate limit of kube-controller-manager and kube-scheduler (burst is twice this)."""
    extra_apiserver_args: tuple[str, ...] = ()
    real_node: bool = False
    """Also run a real node (containerd, kubelet, kube-proxy; `realnode.RealNode`): needs root
    and the Debian packages `hack/setup.sh` installs. The API server then listens on
    every address and advertises this machine's, so pods reach it through the `kubernetes`
    Service."""
    env: dict[str, str] = field(default_factory=dict)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


class LocalCluster:
    """The processes of one local control plane; see the module docstring."""

    def __init__(self, config: ClusterConfig | None = None) -> None:
        self.config = config or ClusterConfig()
        if self.config.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="gpu-scheduler-cluster-"))
        else:
            self.work_dir = self.config.work_dir
            self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.work_dir / "logs"
        self.kubeconfig = self.work_dir / "admin.kubeconfig"
        self.processes = ProcessGroup(self.log_dir)
        self.binaries: Binaries | None = None
        self.pki: Pki | None = None
        self.server = ""
        self.etcd_url = ""
        self.prometheus_url: str | None = None
        self.dcgm_url: str | None = None
        self.started_in_s = 0.0
        self.real_node: RealNode | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start every configured component and wait until each is ready.

        Raises ComponentError (naming the component and quoting its log) when one fails; whatever
        was started is stopped again before the error propagates.
        """
        started = time.monotonic()
        try:
            self.binaries = ensure_binaries()
            self.pki = write_pki(self.work_dir / "pki")
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            self._start_controller_manager()
            self._start_kwok()
            if self.config.kube_scheduler:
                self._start_kube_scheduler()
            if self.config.fake_dcgm:
                self._start_fake_dcgm()
            if self.config.prometheus:
                self._start_prometheus()
            if self.config.real_node:
                self.real_node = RealNode(self)
                self.real_node.start()
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - started

    def stop(self) -> None:
        """Stop every process (newest first); the real node first, while the API server still
        answers. Logs stay in `log_dir`."""
        if self.real_node is not None:
            self.real_node.stop()
        self.processes.stop()

    def alive(self) -> dict[str, bool]:
        """Whether each started component is still running, by name."""
        return {c.name: c.alive() for c in self.processes.components}

    # -- clients -------------------------------------------------------------------------------

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this cluster and capture its output."""
        assert self.binaries is not None, "start() first"
        return subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            check=check,
            capture_output=True,
            text=True,
        )

    def tls_context(self) -> ssl.SSLContext:
        """An SSL context trusting the cluster CA and presenting the admin client certificate."""
        assert self.pki is not None, "start() first"
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    # -- components ----------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        assert self.binaries is not None
        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        component = self.processes.start(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=local",
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=local=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        self.processes.wait_ready(
            component, lambda: http_ok(f"{self.etcd_url}/health"), READY_TIMEOUT_S
        )

    def _start_apiserver(self) -> None:
        assert self.binaries is not None and self.pki is not None
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        pki = self.pki
        # Loopback only, unless a real node's pods must reach the API server: then every address,
        # with this machine's advertised, so the `kubernetes` Service's endpoints (kept by the
        # default lease reconciler) point where kube-proxy can send pods.
        network = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"]
        # Since 1.37 the endpoint reconciler refuses a loopback address; nothing here
        # reaches the API server through the `kubernetes` Service.
        network.append("--endpoint-reconciler-type=none")
        if self.config.real_node:
            network = [
                "--bind-address=0.0.0.0",
                f"--advertise-address={host_ip()}",
                f"--kubelet-client-certificate={pki.admin_cert}",
                f"--kubelet-client-key={pki.admin_key}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
            ]
        component = self.processes.start(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers={self.etcd_url}",
                *network,
                f"--secure-port={port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-key-file={pki.service_account_pub}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--allow-privileged=true",
                "--profiling=false",
                "--max-requests-inflight=1000",
                "--max-mutating-requests-inflight=500",
                f"--cert-dir={self.work_dir / 'apiserver-certs'}",
                "--v=1",
                f"--feature-gates={FEATURE_GATES}",
                f"--runtime-config={RUNTIME_CONFIG}",
                *self.config.extra_apiserver_args,
            ],
        )
        context = self.tls_context()
        self.processes.wait_ready(
            component, lambda: http_ok(f"{self.server}/readyz", context), READY_TIMEOUT_S
        )

    def _write_kubeconfig(self) -> None:
        assert self.pki is not None

        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(self.pki.ca_cert),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": b64(self.pki.admin_cert),
                        "client-key-data": b64(self.pki.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig))
        self.kubeconfig.chmod(0o600)

    def _start_controller_manager(self) -> None:
        assert self.binaries is not None and self.pki is not None
        qps = self.config.client_qps
        controllers = CONTROLLERS + (REAL_NODE_CONTROLLERS if self.config.real_node else ())
        self._start_secure_component(
            "kube-controller-manager",
            self.binaries.kube_controller_manager,
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(controllers)}",
                f"--service-account-private-key-file={self.pki.service_account_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                "--use-service-account-credentials=false",
                "--leader-elect=false",
                f"--kube-api-qps={qps}",
                f"--kube-api-burst={2 * qps}",
                f"--feature-gates={FEATURE_GATES}",
            ],
        )

    def _start_secure_component(self, name: str, binary: Path, args: list[str]) -> Component:
        """Start a component that serves /healthz over HTTPS and authenticates with the admin
        kubeconfig (kube-controller-manager, kube-scheduler), wait until it is healthy, and
        return it."""
        port = free_port()
        kubeconfig = str(self.kubeconfig)
        component = self.processes.start(
            name,
            [
                str(binary),
                *args,
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.work_dir / (name + '-certs')}",
                "--v=1",
            ],
        )
        insecure = ssl._create_unverified_context()  # a self-signed serving cert, loopback only
        self.processes.wait_ready(
            component,
            lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure),
            READY_TIMEOUT_S,
        )
        return component

    def _start_kwok(self) -> None:
        assert self.binaries is not None
        port = free_port()
        config = self.work_dir / "kwok.yaml"
        options = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": {"nodeLeaseParallelism": 16, "podPlayStageParallelism": 16},
        }
        config.write_text(yaml.safe_dump_all([options, *kwok_stages.pod_stages()]))
        component = self.processes.start(
            "kwok",
            [
                str(self.binaries.kwok),
                f"--config={config}",
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--node-lease-duration-seconds=40",
                "--cidr=10.0.0.1/12",
                "--node-ip=10.0.0.1",
                f"--server-address=127.0.0.1:{port}",
            ],
        )
        self.processes.wait_ready(
            component, lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), READY_TIMEOUT_S
        )

    def _start_kube_scheduler(self) -> None:
        self.start_kube_scheduler()

    def start_kube_scheduler(
        self,
        name: str = "kube-scheduler",
        scheduler_name: str | None = None,
        client_defaults: bool = False,
    ) -> Component:
        """Start a kube-scheduler (leader election off) as the component `name` and return it
        once healthy. `scheduler_name` names its one profile (None: kube-scheduler's default,
        `default-scheduler`). Its client's rate limit is `ClusterConfig.client_qps` (burst twice
        that), or with `client_defaults` kube-scheduler's own (qps 50, burst 100)."""
        assert self.binaries is not None
        qps = self.config.client_qps
        connection: dict[str, object] = {"kubeconfig": str(self.kubeconfig)}
        if not client_defaults:
            connection.update(qps=qps, burst=2 * qps)
        document: dict[str, object] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": connection,
            "leaderElection": {"leaderElect": False},
        }
        if scheduler_name is not None:
            document["profiles"] = [{"schedulerName": scheduler_name}]
        config = self.work_dir / f"{name}.yaml"
        config.write_text(yaml.safe_dump(document))
        return self._start_secure_component(
            name,
            self.binaries.kube_scheduler,
            [f"--config={config}", f"--feature-gates={FEATURE_GATES}"],
        )

    def _start_fake_dcgm(self) -> None:
        port = free_port()
        self.dcgm_url = f"http://127.0.0.1:{port}"
        argv = [
            sys.executable,
            "-m",
            "hack.fake_dcgm",
            f"--kubeconfig={self.kubeconfig}",
            f"--listen=127.0.0.1:{port}",
        ]
        trace = self.config.dcgm_trace
        if trace is not None and trace.is_file():
            argv.append(f"--trace={trace}")
        if self.config.dcgm_profiling:
            argv.append("--profiling")
        env = {**os.environ, **self.config.env}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        component = self.processes.start("fake-dcgm-exporter", argv, env=env, cwd=REPO_ROOT)
        self.processes.wait_ready(
            component, lambda: http_ok(f"{self.dcgm_url}/healthz"), READY_TIMEOUT_S
        )

    def _start_prometheus(self) -> None:
        assert self.binaries is not None
        port = free_port()
        self.prometheus_url = f"http://127.0.0.1:{port}"
        target = self.dcgm_url.removeprefix("http://") if self.dcgm_url else None
        config = prometheus.write_config(
            self.work_dir / "prometheus.yml", target, self.config.scrape_interval_s
        )
        component = self.processes.start(
            "prometheus",
            prometheus.argv(
                self.binaries.prometheus,
                config,
                self.work_dir / "prometheus",
                port,
                # Pods on the real node query it at this machine's address.
                "0.0.0.0" if self.config.real_node else "127.0.0.1",
            ),
        )
        self.processes.wait_ready(
            component, lambda: http_ok(f"{self.prometheus_url}/-/ready"), READY_TIMEOUT_S
        )


def restart_component(cluster: LocalCluster, name: str) -> None:
    """Stop one running component (SIGTERM, SIGKILL after the grace period) and start it again
    with the same command line, so on the same port, then wait until it is ready. Supported:
    kube-apiserver, kube-controller-manager, etcd, prometheus and kwok (their readiness probes
    are known here). Raises
    ComponentError when it does not come back, KeyError for an unknown or stopped name."""

    def secure_healthz(component: str) -> bool:
        argv = next(c.argv for c in cluster.processes.components if c.name == component)
        port = next(a.split("=", 1)[1] for a in argv if a.startswith("--secure-port="))
        insecure = ssl._create_unverified_context()  # a self-signed serving cert, loopback only
        return http_ok(f"https://127.0.0.1:{port}/healthz", insecure)

    def kwok_healthz() -> bool:
        argv = next(c.argv for c in cluster.processes.components if c.name == "kwok")
        address = next(a.split("=", 1)[1] for a in argv if a.startswith("--server-address="))
        return http_ok(f"http://{address}/healthz")

    probes = {
        "kwok": kwok_healthz,
        "kube-apiserver": lambda: http_ok(f"{cluster.server}/readyz", cluster.tls_context()),
        "kube-controller-manager": lambda: secure_healthz("kube-controller-manager"),
        "etcd": lambda: http_ok(f"{cluster.etcd_url}/health"),
        "prometheus": lambda: http_ok(f"{cluster.prometheus_url}/-/ready"),
    }
    components = cluster.processes.components
    index = next(i for i, c in enumerate(components) if c.name == name and c.alive())
    old = components[index]
    old.stop()
    new = cluster.processes.start(name, old.argv)
    components.pop()  # keep the start order, so stop() still goes newest first
    components[index] = new
    cluster.processes.wait_ready(new, probes[name], READY_TIMEOUT_S)
