"""Kueue, the job-queueing controller, as an opt-in component of a running `LocalCluster`.

    kueue = Kueue(cluster)
    kueue.start()     # builds it first if needed; CRDs, webhooks and the process ready
    ...               # Jobs labelled kueue.x-k8s.io/queue-name are admitted against quota
    kueue.stop()      # webhook configurations deleted first, then the process

Nothing starts it unless a test asks (the `kueue` fixture of tests/conftest.py).

It runs out of cluster, as a process of the cluster's `ProcessGroup` (its log is
`<log_dir>/kueue.log`), with the admin kubeconfig and the version pinned in hack/versions.env
(`hack/build-binaries.sh --kueue` builds it, with its CRDs and webhook definitions, into the cache
outside the repository). What differs from an in-cluster install, and why:

- Certificates: internal cert management is off (it would need a Service and a Secret); the
  webhook server presents a certificate of the cluster's CA for 127.0.0.1, and the webhook
  configurations reach it by URL with that CA as caBundle.
- Metrics certificate: with internal cert management off, Kueue loads a key pair from the fixed
  folder `METRICS_CERT_DIR` at start even when its metrics server is off (it is off here). `start`
  writes a self-signed pair there when none is present (root is needed for /etc; the error says
  what to run otherwise) and never replaces one.
- Integrations: batch/v1 Job and plain Pods (`pod`: pods labelled with a queue name are gated
  until admitted; `kueue.x-k8s.io/pod-group-name` makes a group of them one Workload).
  TopologyAwareScheduling is a beta feature gate, on by default in v0.17.0.
- Dynamic Resource Allocation: the alpha feature gate `DynamicResourceAllocation` is on and
  `resources.deviceClassMappings` maps the DeviceClass of the DRA nodes' GPUs (`gpu.nvidia.com`,
  hack/localcluster/dra.py) to `GPU_QUOTA_RESOURCE`, `nvidia.com/gpu`: Kueue counts the devices
  of the ResourceClaimTemplates a queued pod template uses against that quota, the same quota
  name the device plugin's GPUs are counted under. `DRAExtendedResources` stays off.
- Webhooks: only those of the enabled integrations (Jobs, Pods) and of Kueue's own API are
  registered; the others would point at paths nothing serves and, with failurePolicy Fail, refuse
  every Deployment or StatefulSet. The Pod webhooks skip `SYSTEM_NAMESPACES` (a namespaceSelector,
  as Kueue's own install does), so a Kueue that is down cannot block the system pods. For the same
  reason `stop` deletes the webhook configurations BEFORE it stops the process: else every later
  Job or Pod create in the cluster fails.
- The CRDs are applied server-side (the Workload CRD is 1.4 MB, beyond a client-side apply's
  last-applied annotation) and stay installed after `stop`.
- VisibilityOnDemand (an aggregated API server) is off.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hack.localcluster.binaries import cache_dir, pinned_versions, run_build_script
from hack.localcluster.cluster import LocalCluster, free_port
from hack.localcluster.dra import GPU_CLASS
from hack.localcluster.pki import Pki, issue_serving_cert
from hack.localcluster.processes import Component

METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
NAMESPACE = "kueue-system"
WEBHOOK_GROUPS = frozenset({"kueue.x-k8s.io", "batch", ""})
"""API groups whose webhooks are registered: Kueue's own, batch (the Job integration) and the core
group, of which only `pods` (the Pod integration; `CORE_RESOURCES`)."""
CORE_RESOURCES = frozenset({"pods"})
"""Resources of the core API group whose webhooks are registered."""
SYSTEM_NAMESPACES = ("kube-system", NAMESPACE)
"""Namespaces the Pod webhooks never see (namespaceSelector on kubernetes.io/metadata.name)."""
WEBHOOK_CONFIGURATIONS = {
    "MutatingWebhookConfiguration": "local-kueue-mutating",
    "ValidatingWebhookConfiguration": "local-kueue-validating",
}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
"""The scheduling gate Kueue's Pod webhook puts on a queued pod until its Workload is admitted."""
FRAMEWORKS = ("batch/job", "pod")
"""Kueue's enabled integrations (Configuration integrations.frameworks)."""
READY_TIMEOUT_S = 90.0
GPU_QUOTA_RESOURCE = "nvidia.com/gpu"
"""The logical resource Kueue counts DRA GPUs of DeviceClass `GPU_CLASS` as (its
`deviceClassMappings`); ClusterQueues give quota for it under this name."""
DEVICE_CLASS_MAPPINGS: tuple[dict[str, Any], ...] = (
    {"name": GPU_QUOTA_RESOURCE, "deviceClassNames": [GPU_CLASS]},
)
"""Kueue's Configuration `resources.deviceClassMappings` (v0.17.0: a logical resource name and
the DeviceClasses whose requested devices count as it)."""
FEATURE_GATES = {"VisibilityOnDemand": False, "DynamicResourceAllocation": True}
"""Kueue's feature gates as the local cluster sets them."""


class KueueError(RuntimeError):
    """Kueue could not be built, installed or started; the message says what to do."""


@dataclass(frozen=True)
class KueueFiles:
    """What `hack/build-binaries.sh --kueue` puts in the cache."""

    binary: Path
    crds: Path
    """Folder of the CRD manifests (config/components/crd/bases of the same module version)."""
    webhooks: Path
    """Kueue's webhook definitions (config/components/webhook/manifests.yaml)."""

    def missing(self) -> list[Path]:
        wanted = [self.binary, self.crds / "kueue.x-k8s.io_workloads.yaml", self.webhooks]
        return [path for path in wanted if not path.is_file()]


def kueue_files(build: bool = True) -> KueueFiles:
    """The pinned Kueue's files, running `hack/build-binaries.sh --kueue` first when any is
    missing (a cold build takes minutes). Raises KueueError naming what is still missing."""
    folder = cache_dir() / "bin" / f"kueue-{pinned_versions()['KUEUE_VERSION']}"
    files = KueueFiles(folder / "kueue", folder / "crds", folder / "webhooks.yaml")
    if files.missing() and build:
        failed = run_build_script("--kueue")
        if failed is not None:
            raise KueueError(f"building Kueue failed:\n{failed}")
    absent = files.missing()
    if absent:
        raise KueueError(
            f"Kueue is not built ({', '.join(map(str, absent))}); "
            "run hack/build-binaries.sh --kueue"
        )
    return files


def ensure_metrics_certs(pki: Pki, folder: Path = METRICS_CERT_DIR) -> None:
    """Make sure `folder` holds tls.crt and tls.key; writes a pair signed by the CA of `pki`
    when either is missing, and leaves existing files alone (idempotent)."""
    if (folder / "tls.crt").is_file() and (folder / "tls.key").is_file():
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        issue_serving_cert(pki, folder, "tls", ["kueue-metrics"])
    except PermissionError as error:
        raise KueueError(
            f"Kueue (internal cert management off) reads a metrics key pair from {folder} and "
            f"this user cannot create it ({error}); create it once as root, any PEM pair will "
            f"do: sudo mkdir -p {folder} && sudo openssl req -x509 -nodes -days 3650 "
            "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -subj /CN=kueue-metrics "
            f"-keyout {folder}/tls.key -out {folder}/tls.crt"
        ) from error


def _registered(webhook: dict[str, Any]) -> bool:
    """Whether every rule of `webhook` is about `WEBHOOK_GROUPS` (and, in the core group, only
    about `CORE_RESOURCES`)."""
    rules = webhook.get("rules") or ()
    if not rules:
        return False
    for rule in rules:
        groups = set(rule.get("apiGroups") or ())
        if not groups or not groups <= WEBHOOK_GROUPS:
            return False
        if "" in groups and not set(rule.get("resources") or ()) <= CORE_RESOURCES:
            return False
    return True


def _covers_pods(webhook: dict[str, Any]) -> bool:
    return any(
        "" in (rule.get("apiGroups") or ()) and "pods" in (rule.get("resources") or ())
        for rule in webhook.get("rules") or ()
    )


def local_webhooks(definitions: Path, base_url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations from `definitions`, reduced to `WEBHOOK_GROUPS` and pointed
    at `base_url` + each webhook's path, trusting `ca_bundle` (PEM); the Pod webhooks skip
    `SYSTEM_NAMESPACES`."""
    bundle = base64.b64encode(ca_bundle).decode()
    configurations = []
    for document in yaml.safe_load_all(definitions.read_text()):
        if not document or document.get("kind") not in WEBHOOK_CONFIGURATIONS:
            continue
        webhooks = []
        for webhook in document.get("webhooks") or ():
            if not _registered(webhook):
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": bundle}
            if _covers_pods(webhook):
                webhook["namespaceSelector"] = {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": list(SYSTEM_NAMESPACES),
                        }
                    ]
                }
            webhooks.append(webhook)
        kind = document["kind"]
        configurations.append(
            {
                "apiVersion": document["apiVersion"],
                "kind": kind,
                "metadata": {"name": WEBHOOK_CONFIGURATIONS[kind]},
                "webhooks": webhooks,
            }
        )
    if {c["kind"] for c in configurations} != set(WEBHOOK_CONFIGURATIONS):
        raise KueueError(f"{definitions} lacks a mutating or a validating webhook configuration")
    return configurations


def configuration(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration for the local cluster (config.kueue.x-k8s.io/v1beta2)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 100, "burst": 200},
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "featureGates": dict(FEATURE_GATES),
        "resources": {"deviceClassMappings": copy.deepcopy(list(DEVICE_CLASS_MAPPINGS))},
    }


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class Kueue:
    """Kueue running against one `LocalCluster`; see the module docstring."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.folder = cluster.work_dir / "kueue"
        self.component: Component | None = None

    def start(self) -> None:
        """Build if needed, install the CRDs, start the process and register its webhooks; returns
        once a Job labelled with a queue name comes back suspended, and such a Pod gated, from a
        server-side dry run (the mutating webhooks answer). Raises KueueError or ComponentError,
        after undoing what it did."""
        cluster = self.cluster
        assert cluster.pki is not None, "start the cluster first"
        assert self.component is None, "Kueue is already running"
        files = kueue_files()
        ensure_metrics_certs(cluster.pki)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._kubectl("apply", "--server-side", "--force-conflicts", "-f", str(files.crds))
        self._kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(files.crds))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        self._kubectl_apply([namespace])
        cert_dir = self.folder / "webhook-certs"
        issue_serving_cert(cluster.pki, cert_dir, "tls", ["localhost"], ips=["127.0.0.1"])
        webhook_port, health_port = free_port(), free_port()
        config_file = self.folder / "kueue.yaml"
        config_file.write_text(yaml.safe_dump(configuration(webhook_port, health_port, cert_dir)))
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        self.component = cluster.processes.start(
            "kueue", [str(files.binary), f"--config={config_file}", "--zap-log-level=2"], env=env
        )
        try:
            cluster.processes.wait_ready(
                self.component,
                lambda: _http_ok(f"http://127.0.0.1:{health_port}/readyz"),
                READY_TIMEOUT_S,
            )
            webhooks = local_webhooks(
                files.webhooks,
                f"https://127.0.0.1:{webhook_port}",
                cluster.pki.ca_cert.read_bytes(),
            )
            self._kubectl_apply(webhooks)
            self._wait_webhooks_answer()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Delete the webhook configurations, then stop the process. Safe to call twice, and
        when the API server is already gone."""
        if self.cluster.binaries is not None:
            for kind, name in WEBHOOK_CONFIGURATIONS.items():
                self.cluster.kubectl(
                    "delete", kind.lower(), name, "--ignore-not-found", "--wait=true", check=False
                )
        if self.component is not None:
            self.component.stop()
            if self.component in self.cluster.processes.components:
                self.cluster.processes.components.remove(self.component)
            self.component = None

    # -- helpers -----------------------------------------------------------------------------

    def _kubectl(self, *args: str) -> str:
        result = self.cluster.kubectl(*args, check=False)
        if result.returncode != 0:
            raise KueueError(f"kubectl {' '.join(args[:2])} failed: {result.stderr.strip()}")
        return result.stdout

    def _kubectl_apply(self, documents: list[dict[str, Any]]) -> None:
        path = self.folder / f"apply-{documents[0]['kind'].lower()}.yaml"
        path.write_text(yaml.safe_dump_all(documents))
        self._kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))

    def _wait_webhooks_answer(self) -> None:
        """Dry-run a queued Job and a queued Pod until the mutating webhooks suspend the one and
        gate the other: the API server picks up a new webhook configuration asynchronously."""
        container = {"name": "main", "image": "example.invalid/probe:1"}
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "kueue-webhook-probe", "labels": {QUEUE_LABEL: "probe"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kueue-webhook-probe", "labels": {QUEUE_LABEL: "probe"}},
            "spec": {"containers": [container]},
        }

        def suspended(body: dict[str, Any]) -> bool:
            return bool(body["spec"].get("suspend"))

        def gated(body: dict[str, Any]) -> bool:
            gates = body["spec"].get("schedulingGates") or ()
            return any(g.get("name") == ADMISSION_GATE for g in gates)

        deadline = time.monotonic() + READY_TIMEOUT_S
        probes: list[tuple[dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
            (job, suspended),
            (pod, gated),
        ]
        for probe, answered in probes:
            path = self.folder / f"webhook-probe-{str(probe['kind']).lower()}.yaml"
            path.write_text(yaml.safe_dump(probe))
            last = ""
            while True:
                result = self.cluster.kubectl(
                    "create",
                    "--dry-run=server",
                    "-n",
                    "default",
                    "-o",
                    "json",
                    "-f",
                    str(path),
                    check=False,
                )
                if result.returncode == 0 and answered(json.loads(result.stdout)):
                    break
                last = result.stderr.strip() or f"the {probe['kind']} came back unchanged"
                if time.monotonic() >= deadline:
                    raise KueueError(
                        f"Kueue's webhooks did not answer within {READY_TIMEOUT_S:.0f} s: {last}"
                    )
                time.sleep(0.5)
