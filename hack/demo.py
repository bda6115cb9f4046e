"""`make demo`: a local cluster with the three seed GPU node types and gpu-scheduler on it, walking
through what the scheduler does, one step at a time, then running until Ctrl-C.

    python -m hack.demo [--count N] [--nodes NODES.yaml] [--work-dir DIR] [--no-scheduler]
                        [--in-cluster] [--kueue] [--steps NAMES]

Steps (`STEPS`; each prints one line saying what it shows, then its outcome):

1. placement: the example workloads (manifests/examples/workloads.yaml), NVLink-aware;
2. reclaim: an idle notebook in a PriorityClass with a reclaim policy is evicted for a training
   pod that fits nowhere else (manifests/examples/reclaim/), and the events are printed;
3. busy-time: after at least one more accounting period (`ACCOUNTING_PERIOD_S`), the busy share of
   measured GPU time per namespace, read from the daemon's /metrics, and the table of
   `gpu-scheduler idle-report` (pods idle over the last `ACCOUNTING_IDLE_WINDOW_S` s);
4. gang: a 4 x 8-GPU PodGroup gang (scheduling.k8s.io/v1beta1, minCount 4) on four 8-GPU nodes
   of its own (`GANG_NODE`, added by the step), one of them held by another pod: the gang waits
   with nothing bound although 3 members would fit (`gpu-scheduler explain --pod-group` shows
   the plan), then binds all 4 members once that pod is deleted;
5. dra: Dynamic Resource Allocation on an 8-GPU node of its own (`hack.demo_dra.DRA_NODE`, its
   GPUs published as a ResourceSlice of the `gpu.nvidia.com` driver, NVLink domains 0-3 and 4-7):
   a pod holds gpu-0 through a claim selecting that GPU's UUID, then pods of 2 and 4 GPUs ask
   through ResourceClaimTemplates, one at a time; the table shows each claim's node, the devices
   of its status.allocation and their NVLink domain, beside kube-scheduler's first fit computed
   at the same moment (`hack.demo_dra.first_fit`: the allocator in upstream's device order),
   then what gpu-scheduler wrote into the last claim (finalizer, allocation, reservedFor).
   With --in-cluster the step runs on the real node instead (`hack.demo_dra_step.on_real_node`):
   its 4 devices of Kubernetes' DRA test driver in two NVLink domains of two, a holder taking
   one, then a 2-device claim placed by the Deployment inside one domain beside first fit's
   choice across both; both pods run, and their containers' claim variables and the devices
   kubelet prepared are printed;
6. kueue (only with --kueue, which alone starts Kueue, building it first if it is not cached):
   Kueue (hack/localcluster/kueue.py) with docs/kueue.md's recipe on an 8-GPU node of its own
   (`KUEUE_NODE`): team-b borrows team-a's idle quota (4 x 2 GPUs), team-a submits the recipe's
   Job, Kueue preempts team-b's workload and gpu-scheduler binds team-a's pods, each inside one
   NVLink domain. Kueue is stopped (webhook configurations deleted first) when the demo stops.

--steps runs only the named steps (e.g. `--kueue --steps kueue`).

Then the command lines to try next (explain, kubectl), with paths relative to the repository when
they are inside it. The scheduler runs as `gpu-scheduler run` with reclaim enforced against the
cluster's Prometheus (its JSON log is gpu-scheduler.log in the logs folder). With --in-cluster it
runs instead as the shipped Deployment (manifests/, two replicas, leader election) on the cluster's
real node, from the offline image (`hack/image`; needs root, see docs/local-cluster.md), with the
same settings in its ConfigMap; `kubectl logs -n gpu-scheduler` shows its log.

NODES.yaml, when given, is a list of node specs (fields of `hack.localcluster.NodeSpec`), e.g.

    - {type_name: G2-Expansion, count: 4, gpus: 8, nvlink_domains: "0-3,4-7",
       gpu_product: NVIDIA-H200}

The reclaim step adds one node of its own (`RECLAIM_NODE`, tainted so nothing else lands on it),
the gang step four (`GANG_NODE`, likewise), the dra step one (`hack.demo_dra.DRA_NODE`,
likewise; none with --in-cluster, where it uses the real node), each when it starts.
An error before the cluster is up (a missing NODES.yaml, a bad spec) or a component that does not
start ends the demo with one line on stderr, exit 2 or 1, as the `gpu-scheduler` command does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from hack import demo_dra, demo_dra_step
from hack.demo_io import NAMESPACE as NAMESPACE
from hack.demo_io import add_nodes, apply_objects, get_json, poll, say
from hack.localcluster import (
    SEED_NODE_TYPES,
    ClusterConfig,
    LocalCluster,
    NodeSpec,
)
from hack.localcluster.cluster import REPO_ROOT, free_port
from hack.localcluster.kueue import QUEUE_LABEL, Kueue, KueueError
from hack.localcluster.kwok_stages import RUN_ANNOTATION, UNTIL_DELETED
from hack.localcluster.nodes import spec_from_mapping
from hack.localcluster.processes import ComponentError
from scheduler.cli import describe_error
from scheduler.model.objects import NVLINK_DOMAIN_ANNOTATION
from scheduler.tools.errors import EXIT_RUNTIME, CommandError
from topology.occupancy import GPUS_ANNOTATION, NO_DOMAIN

DEFAULT_WORK_DIR = REPO_ROOT / "_out" / "demo"
WORKLOADS = REPO_ROOT / "manifests" / "examples" / "workloads.yaml"
RECLAIM_MANIFESTS = REPO_ROOT / "manifests" / "examples" / "reclaim"
IDLE_NOTEBOOK = RECLAIM_MANIFESTS / "1-idle-notebook.yaml"
TRAINING = RECLAIM_MANIFESTS / "2-training.yaml"
RECLAIM_LABEL = demo_dra.STEP_LABEL
RECLAIM_NODE = NodeSpec(
    "Demo-Reclaim",
    1,
    gpus=2,
    nvlink_domains="0-1",
    gpu_product="NVIDIA-H200",
    cpu="32",
    memory="256Gi",
    labels={RECLAIM_LABEL: "reclaim"},
    taints=({"key": RECLAIM_LABEL, "value": "reclaim", "effect": "NoSchedule"},),
)
"""The reclaim step's node: the notebook's two GPUs are all it has."""
GANG_NODE = NodeSpec(
    "Demo-Gang",
    4,
    gpus=8,
    nvlink_domains="0-3,4-7",
    gpu_product="NVIDIA-H200",
    cpu="96",
    memory="1Ti",
    labels={RECLAIM_LABEL: "gang"},
    taints=({"key": RECLAIM_LABEL, "value": "gang", "effect": "NoSchedule"},),
)
"""The gang step's nodes: one per member of the gang."""
GANG = "gang-ddp"
GANG_MEMBERS = 4
GANG_MEMBER_GPUS = 8
GANG_BLOCKER = "gang-blocker"
GANG_TIMEOUT_SECONDS = 60.0
"""How long the gang step waits for each of its stages (blocker bound, gang refused, gang bound)."""
IDLE_WINDOW_S = 10
"""resource-idle-seconds of the demo-notebooks PriorityClass (manifests/examples/reclaim)."""
SETTLE_TIMEOUT_SECONDS = 60.0
"""How long the demo waits for the scheduler to decide every example pod before printing."""
RECLAIM_TIMEOUT_SECONDS = 90.0
"""How long the reclaim step waits for each of its stages (samples, eviction, binding)."""
ACCOUNTING_PERIOD_S = 5
"""accounting.periodSeconds of the demo's scheduler: a short period, so the busy-time step waits
seconds, not minutes."""
ACCOUNTING_IDLE_WINDOW_S = IDLE_WINDOW_S
"""accounting.idleWindowSeconds of the demo's scheduler (and so of its idle-report): the reclaim
policy's window, which the placement step's pods have outlived by the time the step runs."""
BUSY_TIME_PERIODS = 3
"""How many accounting periods the busy-time step waits at most for one measured period."""
READY_LINE = "demo ready; Ctrl-C stops it."
POD_HEADER = ("POD", "NODE", "GPUS", "DOMAIN", "STATUS", "WHY")
"""The columns of the demo's pod tables."""
NONE_CELL = "<none>"
"""An empty cell, as `kubectl get -o custom-columns` shows it."""
SPANS = "spans"
"""The DOMAIN cell of a pod whose GPUs lie in more than one NVLink domain (the annotation's -1)."""


def domain_cell(value: str | None) -> str:
    """The DOMAIN cell for a pod's `gpu-scheduler.io/nvlink-domain` annotation: its domain,
    `spans` for -1 (the GPUs lie in more than one domain), `<none>` when it has none."""
    if not value:
        return NONE_CELL
    return SPANS if value.strip() == str(NO_DOMAIN) else value


def pod_row(pod: dict[str, Any]) -> tuple[str, ...]:
    """One pod's cells under POD_HEADER."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    status = pod.get("status") or {}
    why = next(
        (
            str(c.get("message") or "")
            for c in status.get("conditions") or []
            if c.get("type") == "PodScheduled"
        ),
        "",
    )
    cells = (
        metadata.get("name"),
        (pod.get("spec") or {}).get("nodeName"),
        annotations.get(GPUS_ANNOTATION),
        domain_cell(annotations.get(NVLINK_DOMAIN_ANNOTATION)),
        status.get("phase"),
        why,
    )
    return tuple(str(cell) if cell else NONE_CELL for cell in cells)


def pod_table(pods: list[dict[str, Any]]) -> str:
    """POD_HEADER and a row per pod (by name), aligned as `kubectl get -o custom-columns`."""
    rows = [POD_HEADER, *sorted(pod_row(pod) for pod in pods)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(POD_HEADER) - 1)]
    return "\n".join(
        "   ".join(
            [*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]
        )
        for row in rows
    )


def pods_table(cluster: LocalCluster, namespace: str, selector: str = "") -> str:
    """The pod table of `namespace` (only those matching label `selector`, if given)."""
    args = ["get", "pods", "-n", namespace, "-o", "json"]
    listed = cluster.kubectl(*args, *(["-l", selector] if selector else [])).stdout
    return pod_table(json.loads(listed).get("items", []) if listed.strip() else [])


def decided(pod: dict[str, Any]) -> bool:
    """Whether the scheduler has decided `pod`: bound to a node, or marked unschedulable."""
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)


def pods_of(cluster: LocalCluster, namespace: str) -> dict[str, dict[str, Any]]:
    listed = cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout
    items = json.loads(listed).get("items", []) if listed.strip() else []
    return {pod["metadata"]["name"]: pod for pod in items}


def wait_for_decisions(cluster: LocalCluster, namespace: str, timeout: float) -> None:
    """Poll until every pod of `namespace` is decided (see `decided`), at most `timeout` s; the
    table printed afterwards shows whatever state the pods are in then."""

    def all_decided() -> bool:
        pods = pods_of(cluster, namespace)
        return bool(pods) and all(decided(pod) for pod in pods.values())

    poll(all_decided, timeout)


def scheduler_config_path(cluster: LocalCluster) -> Path:
    return cluster.work_dir / "gpu-scheduler.yaml"


def write_scheduler_config(cluster: LocalCluster) -> Path:
    """The demo scheduler's configuration: reclaim enforced against the cluster's Prometheus,
    which scrapes the fake dcgm-exporter every second; GPU time accounted every
    `ACCOUNTING_PERIOD_S` s."""
    path = scheduler_config_path(cluster)
    settings = {
        "reclaim": {
            "mode": "enforce",
            "prometheusUrl": cluster.prometheus_url,
            "scrapeIntervalSeconds": cluster.config.scrape_interval_s,
            "cooldownSeconds": 5,
        },
        "queue": {"unschedulableFlushSeconds": 5},
        "accounting": {
            "periodSeconds": ACCOUNTING_PERIOD_S,
            "idleWindowSeconds": ACCOUNTING_IDLE_WINDOW_S,
        },
    }
    path.write_text(yaml.safe_dump(settings))
    return path


def start_scheduler(cluster: LocalCluster) -> str:
    """`gpu-scheduler run` against the demo cluster, as one of the cluster's components; returns
    its metrics URL."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "scheduler.cli",
        "run",
        f"--config={write_scheduler_config(cluster)}",
        f"--kubeconfig={cluster.kubeconfig}",
        "--no-leader-elect",
        f"--metrics-address=127.0.0.1:{port}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cluster.processes.start("gpu-scheduler", argv, env=env, cwd=REPO_ROOT)
    return f"http://127.0.0.1:{port}/metrics"


def start_in_cluster(cluster: LocalCluster) -> str:
    """The shipped Deployment on the cluster's real node (`hack.localcluster.incluster`), with the
    demo's settings over the shipped ConfigMap's, Prometheus at this machine's address; returns
    the leader's metrics URL (a pod IP, which the host routes to)."""
    from hack.image import IMAGE_NAME, image_archive
    from hack.localcluster import incluster

    assert cluster.real_node is not None and cluster.prometheus_url is not None
    shipped = yaml.safe_load((REPO_ROOT / "manifests" / "configmap.yaml").read_text())
    settings = {
        **yaml.safe_load(shipped["data"]["config.yaml"]),
        **yaml.safe_load(write_scheduler_config(cluster).read_text()),
    }
    port = urllib.parse.urlsplit(cluster.prometheus_url).port
    settings["reclaim"]["prometheusUrl"] = f"http://{cluster.real_node.host_ip}:{port}"
    say("importing the image and rolling out the Deployment on the real node ...")
    deployed = incluster.deploy(
        cluster,
        image_archive(),
        IMAGE_NAME,
        yaml.safe_dump(settings, sort_keys=False),
        cluster.work_dir / "in-cluster",
    )
    say(", ".join(f"{step} {seconds:.0f} s" for step, seconds in deployed.timings.items()))
    holder = poll(lambda: bool(incluster.leader(cluster)), 60) and incluster.leader(cluster)
    address = cluster.kubectl(
        "get", "pod", str(holder), "-n", incluster.NAMESPACE, "-o", "jsonpath={.status.podIP}"
    ).stdout
    return f"https://{address}:10261/metrics"


METRICS_READER = "demo-metrics-reader"
"""ServiceAccount the in-cluster demo reads /metrics as (the shipped Deployment serves it over
HTTPS to the gpu-scheduler-metrics-reader ClusterRole only)."""


def metrics_reader_token(cluster: LocalCluster) -> str:
    """A day's token of `METRICS_READER`, bound to gpu-scheduler-metrics-reader."""
    from hack.localcluster import incluster

    cluster.kubectl("create", "serviceaccount", METRICS_READER, "-n", incluster.NAMESPACE)
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        METRICS_READER,
        "--clusterrole=gpu-scheduler-metrics-reader",
        f"--serviceaccount={incluster.NAMESPACE}:{METRICS_READER}",
    )
    token = cluster.kubectl("create", "token", METRICS_READER, "-n", incluster.NAMESPACE)
    return str(token.stdout).strip()


def load_specs(path: Path | None, count: int) -> list[NodeSpec]:
    """The node specs to create; `CommandError` naming the file for anything wrong with it."""
    if path is None:
        return [spec.with_count(count) for spec in SEED_NODE_TYPES]
    hint = "give a YAML list of node specs (python -m hack.demo --help shows one)"
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as error:
        raise CommandError(f"--nodes {path}: {error.strerror or error}; {hint}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise CommandError(f"--nodes {path}{where}: not valid YAML; {hint}") from None
    if not isinstance(raw, list):
        raise CommandError(f"--nodes {path}: expected a list of node specs, got "
                           f"{type(raw).__name__}; {hint}")  # fmt: skip
    for number, item in enumerate(raw, start=1):
        if not isinstance(item, dict):
            raise CommandError(f"--nodes {path}: item {number} is a {type(item).__name__}, "
                               f"not a mapping of node spec fields; {hint}")  # fmt: skip
    try:
        return [spec_from_mapping(item) for item in raw]
    except (TypeError, ValueError) as error:
        raise CommandError(f"--nodes {path}: {str(error)[:300]}") from None


def shown(path: Path) -> str:
    """`path` relative to the repository when it is inside it (what to type from its root)."""
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def command_path() -> str:
    """The `gpu-scheduler` command beside this interpreter (the virtualenv's), as `shown`."""
    return shown(Path(os.path.abspath(sys.executable)).parent / "gpu-scheduler")


@dataclass
class Demo:
    """What the steps share."""

    cluster: LocalCluster
    kubectl: str
    stop: Callable[[], bool]
    """Whether Ctrl-C was pressed; a step ends early when it returns True."""
    notes: list[str] = field(default_factory=list)
    metrics_url: str = ""
    """The scheduler's /metrics URL."""
    metrics_token: str = ""
    """Bearer token for it (in the cluster); "" sends none."""
    kueue: Kueue | None = None
    """Kueue, once the Kueue step (--kueue) has started it; stopped when the demo stops."""


@dataclass(frozen=True)
class Step:
    name: str
    explanation: str
    """One line: what the step shows and how."""
    run: Callable[[Demo], None]


def placement(demo: Demo) -> None:
    cluster = demo.cluster
    say(cluster.kubectl("apply", "-f", str(WORKLOADS)).stdout.rstrip())
    wait_for_decisions(cluster, NAMESPACE, SETTLE_TIMEOUT_SECONDS)
    say(pods_table(cluster, NAMESPACE) + "\n")


def _samples(prometheus_url: str, pod: str, span_s: int) -> float:
    """Samples Prometheus holds of `pod`'s GPU utilization over the last `span_s` s (0: none)."""
    query = (
        f'count_over_time(DCGM_FI_DEV_GPU_UTIL{{namespace="{NAMESPACE}",pod="{pod}"}}[{span_s}s])'
    )
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            result = json.loads(response.read())["data"]["result"]
    except (OSError, ValueError, KeyError):
        return 0.0
    return min((float(series["value"][1]) for series in result), default=0.0)


def _events(cluster: LocalCluster, pods: tuple[str, ...]) -> list[str]:
    listed = json.loads(cluster.kubectl("get", "events", "-n", NAMESPACE, "-o", "json").stdout)
    rows = [
        (
            event.get("eventTime") or event.get("lastTimestamp") or "",
            event["involvedObject"]["name"],
            event.get("reason", ""),
            event.get("message", ""),
        )
        for event in listed.get("items", [])
        if event.get("involvedObject", {}).get("name") in pods
    ]
    return [f"  {pod:<14} {reason:<16} {message}" for _, pod, reason, message in sorted(rows)]


def reclaim(demo: Demo) -> None:
    cluster = demo.cluster
    span = IDLE_WINDOW_S + 3
    say(cluster.kubectl("apply", "-f", str(IDLE_NOTEBOOK)).stdout.rstrip())
    started = time.monotonic()
    holding = poll(
        lambda: (
            demo.stop()
            or (pods_of(cluster, NAMESPACE).get("notebook-idle", {}).get("status") or {}).get(
                "phase"
            )
            == "Running"
        ),
        RECLAIM_TIMEOUT_SECONDS,
    )
    full = holding and poll(
        lambda: (
            demo.stop() or _samples(cluster.prometheus_url or "", "notebook-idle", span) >= span - 1
        ),
        RECLAIM_TIMEOUT_SECONDS,
    )
    if demo.stop():
        return
    if not full:
        say(f"reclaim: notebook-idle never had {span} s of GPU samples; see {cluster.log_dir}")
        return
    say(f"notebook-idle has held its 2 GPUs at 0 % for {time.monotonic() - started:.0f} s; "
        "now a training pod needs them:")  # fmt: skip
    say(cluster.kubectl("apply", "-f", str(TRAINING)).stdout.rstrip())

    def reclaimed() -> bool:
        pods = pods_of(cluster, NAMESPACE)
        return demo.stop() or (
            "notebook-idle" not in pods
            and bool((pods.get("training", {}).get("spec") or {}).get("nodeName"))
        )

    done = poll(reclaimed, RECLAIM_TIMEOUT_SECONDS)
    if demo.stop():
        return
    training = pods_of(cluster, NAMESPACE).get("training", {})
    node = (training.get("spec") or {}).get("nodeName")
    gpus = (training.get("metadata") or {}).get("annotations", {}).get("gpu-scheduler.io/gpus")
    if done:
        say(f"reclaim: notebook-idle evicted; training bound to {node} on GPUs {gpus}")
    else:
        say(f"reclaim: not done after {RECLAIM_TIMEOUT_SECONDS:.0f} s; see gpu-scheduler.log in "
            f"{cluster.log_dir}")  # fmt: skip
    say("events:")
    say("\n".join(_events(cluster, ("notebook-idle", "training"))))
    say()


GPU_TIME_FAMILIES = {
    "gpu_scheduler_gpu_allocated_seconds": "allocated",
    "gpu_scheduler_gpu_busy_seconds": "busy",
    "gpu_scheduler_gpu_unmeasured_seconds": "unmeasured",
}


@dataclass(frozen=True)
class GpuTime:
    """What the daemon's /metrics says about GPU time: per-namespace totals (GPU seconds, summed
    over priority classes) and the measured accounting periods."""

    allocated: dict[str, float]
    busy: dict[str, float]
    unmeasured: dict[str, float]
    measured_periods: float

    def share(self, namespace: str) -> float | None:
        """busy / (allocated - unmeasured) of `namespace`; None when nothing was measured."""
        measured = self.allocated.get(namespace, 0.0) - self.unmeasured.get(namespace, 0.0)
        return self.busy.get(namespace, 0.0) / measured if measured > 0 else None


def parse_gpu_time(text: str) -> GpuTime:
    """`GpuTime` from the Prometheus text exposition `text` (prometheus_client's parser; families
    other than the GPU time ones are ignored). ValueError for text the parser refuses."""
    totals: dict[str, dict[str, float]] = {kind: {} for kind in GPU_TIME_FAMILIES.values()}
    periods = 0.0
    for family in text_string_to_metric_families(text):
        kind = GPU_TIME_FAMILIES.get(family.name)
        for sample in family.samples:
            if kind is not None and sample.name.endswith("_total"):
                namespace = sample.labels.get("namespace", "")
                totals[kind][namespace] = totals[kind].get(namespace, 0.0) + sample.value
            elif (
                sample.name == "gpu_scheduler_accounting_periods_total"
                and sample.labels.get("result") == "measured"
            ):
                periods = sample.value
    return GpuTime(totals["allocated"], totals["busy"], totals["unmeasured"], periods)


def read_gpu_time(metrics_url: str, token: str = "") -> GpuTime | None:
    """The daemon's GPU time now, with `token` as the bearer token when given (HTTPS: the
    replica's self-signed certificate is not verified); None when /metrics does not answer or
    cannot be parsed."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(metrics_url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5, context=unverified) as response:
            return parse_gpu_time(response.read().decode())
    except (OSError, ValueError):
        return None


def busy_table(gpu_time: GpuTime) -> str:
    """One row per namespace: its busy share of measured GPU time and the GPU seconds behind it."""
    rows = [["NAMESPACE", "BUSY SHARE", "BUSY GPU-S", "MEASURED GPU-S", "ALLOCATED GPU-S"]]
    for namespace in sorted(gpu_time.allocated):
        share = gpu_time.share(namespace)
        allocated = gpu_time.allocated[namespace]
        measured = allocated - gpu_time.unmeasured.get(namespace, 0.0)
        rows.append(
            [
                namespace,
                "-" if share is None else f"{share:.3f}",
                f"{gpu_time.busy.get(namespace, 0.0):.0f}",
                f"{measured:.0f}",
                f"{allocated:.0f}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  "
        + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def idle_report_command(demo: Demo) -> list[str]:
    """`gpu-scheduler idle-report` against the demo, with the scheduler's configuration (its
    Prometheus and idle window), as it is printed: paths relative to the repository."""
    cluster = demo.cluster
    return [
        command_path(),
        "idle-report",
        "--kubeconfig",
        shown(cluster.kubeconfig),
        "--config",
        shown(scheduler_config_path(cluster)),
    ]


def busy_time(demo: Demo) -> None:
    before = read_gpu_time(demo.metrics_url, demo.metrics_token)
    start = before.measured_periods if before is not None else 0.0
    latest: list[GpuTime] = []

    def one_more_period() -> bool:
        now = read_gpu_time(demo.metrics_url, demo.metrics_token)
        if now is not None and now.measured_periods > start:
            latest.append(now)
            return True
        return demo.stop()

    poll(one_more_period, ACCOUNTING_PERIOD_S * BUSY_TIME_PERIODS)
    if demo.stop():
        return
    if not latest:
        say(f"busy-time: no measured accounting period in {ACCOUNTING_PERIOD_S * BUSY_TIME_PERIODS}"
            f" s; see gpu-scheduler.log in {demo.cluster.log_dir}")  # fmt: skip
        return
    gpu_time = latest[-1]
    say(f"busy share of measured GPU time since the scheduler started "
        f"({gpu_time.measured_periods:.0f} accounting periods):")  # fmt: skip
    say(busy_table(gpu_time))
    command = idle_report_command(demo)
    say(f"$ {' '.join(command)}")
    argv = [sys.executable, "-m", "scheduler.cli", *command[1:]]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    say((result.stdout or result.stderr).rstrip())
    say()


def _gang_pod(name: str, group: str | None) -> dict[str, Any]:
    """A pod of `GANG_MEMBER_GPUS` GPUs for the gang nodes (a member of `group`, if given)."""
    spec: dict[str, Any] = {
        "schedulerName": "gpu-scheduler",
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {RECLAIM_LABEL: "gang"},
        "tolerations": [
            {"key": RECLAIM_LABEL, "operator": "Equal", "value": "gang", "effect": "NoSchedule"}
        ],
        "containers": [
            {
                "name": "worker",
                "image": "example.invalid/train:1",
                "resources": {"limits": {"nvidia.com/gpu": str(GANG_MEMBER_GPUS)}},
            }
        ],
    }
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    labels = {RECLAIM_LABEL: group or "blocker"}
    metadata = {"name": name, "namespace": NAMESPACE, "labels": labels}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def gang_manifests() -> list[dict[str, Any]]:
    """The PodGroup `GANG` (gang, minCount `GANG_MEMBERS`) and its member pods."""
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": GANG, "namespace": NAMESPACE},
        "spec": {"schedulingPolicy": {"gang": {"minCount": GANG_MEMBERS}}},
    }
    return [group, *(_gang_pod(f"{GANG}-{i}", GANG) for i in range(GANG_MEMBERS))]


def gang_condition(cluster: LocalCluster) -> tuple[str, str, str] | None:
    """(status, reason, message) of the gang's PodGroupInitiallyScheduled condition, if set."""
    result = cluster.kubectl(
        "get",
        "podgroups.v1beta1.scheduling.k8s.io",
        GANG,
        "-n",
        NAMESPACE,
        "-o",
        "json",
        check=False,
    )
    try:
        conditions = (json.loads(result.stdout).get("status") or {}).get("conditions") or []
    except ValueError:
        return None
    for condition in conditions:
        if condition.get("type") == "PodGroupInitiallyScheduled":
            return (
                str(condition.get("status")),
                str(condition.get("reason")),
                str(condition.get("message")),
            )
    return None


def gang_bound(cluster: LocalCluster) -> list[str]:
    """Names of the gang's members bound to a node."""
    pods = pods_of(cluster, NAMESPACE)
    return sorted(
        name
        for name, pod in pods.items()
        if name.startswith(f"{GANG}-") and (pod.get("spec") or {}).get("nodeName")
    )


def explain_gang_command(demo: Demo) -> list[str]:
    """`gpu-scheduler explain --pod-group` of the demo's gang, as it is printed."""
    kubeconfig = shown(demo.cluster.kubeconfig)
    return [command_path(), "explain", "--pod-group", f"{NAMESPACE}/{GANG}", "--kubeconfig",
            kubeconfig]  # fmt: skip


def gang(demo: Demo) -> None:
    cluster = demo.cluster
    names = asyncio.run(add_nodes(cluster.kubeconfig, [GANG_NODE]))
    say(f"added {len(names)} nodes of {GANG_NODE.gpus} GPUs for this step: {', '.join(names)}")
    apply_objects(demo.cluster, "gang-blocker.yaml", [_gang_pod(GANG_BLOCKER, None)])

    def blocker_node() -> str:
        pod = pods_of(cluster, NAMESPACE).get(GANG_BLOCKER, {})
        return str((pod.get("spec") or {}).get("nodeName") or "")

    if not poll(lambda: demo.stop() or bool(blocker_node()), GANG_TIMEOUT_SECONDS):
        say(f"gang: {GANG_BLOCKER} was not bound in {GANG_TIMEOUT_SECONDS:.0f} s; see "
            f"gpu-scheduler.log in {cluster.log_dir}")  # fmt: skip
        return
    if demo.stop():
        return
    free = (len(names) - 1) * GANG_NODE.gpus
    say(f"{GANG_BLOCKER} holds all {GANG_NODE.gpus} GPUs of {blocker_node()}; {free} GPUs are "
        f"free for a gang of {GANG_MEMBERS} x {GANG_MEMBER_GPUS} GPUs:")  # fmt: skip
    apply_objects(demo.cluster, "gang.yaml", gang_manifests())
    refused = poll(
        lambda: demo.stop() or (gang_condition(cluster) or ("",))[0] == "False",
        GANG_TIMEOUT_SECONDS,
    )
    if demo.stop():
        return
    condition = gang_condition(cluster)
    bound = gang_bound(cluster)
    if not refused or condition is None:
        say(f"gang: no verdict on {GANG} in {GANG_TIMEOUT_SECONDS:.0f} s; see gpu-scheduler.log "
            f"in {cluster.log_dir}")  # fmt: skip
        return
    say(f"gang: {len(bound)} of {GANG_MEMBERS} members bound, all wait although "
        f"{free // GANG_MEMBER_GPUS} would fit; PodGroup {GANG}: PodGroupInitiallyScheduled="
        f"{condition[0]} {condition[1]}: {condition[2]}")  # fmt: skip
    command = explain_gang_command(demo)
    say(f"$ {' '.join(command)}")
    argv = [sys.executable, "-m", "scheduler.cli", *command[1:]]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    say((result.stdout or result.stderr).rstrip())
    say(f"deleting {GANG_BLOCKER} frees {GANG_NODE.gpus} GPUs:")
    say(cluster.kubectl("delete", "pod", GANG_BLOCKER, "-n", NAMESPACE, "--wait=false")
        .stdout.rstrip())  # fmt: skip
    done = poll(
        lambda: demo.stop() or len(gang_bound(cluster)) == GANG_MEMBERS, GANG_TIMEOUT_SECONDS
    )
    if demo.stop():
        return
    if not done:
        count = len(gang_bound(cluster))
        say(f"gang: {count} of {GANG_MEMBERS} members bound after {GANG_TIMEOUT_SECONDS:.0f} s; "
            f"see gpu-scheduler.log in {cluster.log_dir}")  # fmt: skip
        return
    selector = f"{RECLAIM_LABEL}={GANG}"
    say(pods_table(cluster, NAMESPACE, selector))
    poll(lambda: demo.stop() or (gang_condition(cluster) or ("",))[0] == "True", 10.0)
    status, reason, message = gang_condition(cluster) or ("?", "?", "?")
    say(f"gang: all {GANG_MEMBERS} members of {GANG} bound, one per node; PodGroup {GANG}: "
        f"PodGroupInitiallyScheduled={status} {reason}: {message}")  # fmt: skip
    say()


def dra(demo: Demo) -> None:
    """The DRA step (`hack.demo_dra_step`): on the real node with --in-cluster, else on a kwok
    node of its own."""
    demo_dra_step.run(demo.cluster, demo.stop)
    say()


# -- the Kueue step (--kueue) --------------------------------------------------------------------

KUEUE_DOC = REPO_ROOT / "docs" / "kueue.md"
KUEUE_NODE = NodeSpec(
    "Demo-Kueue",
    1,
    gpus=8,
    nvlink_domains="0-3,4-7",
    gpu_product="NVIDIA-H200",
    cpu="96",
    memory="1Ti",
    labels={RECLAIM_LABEL: "kueue"},
    taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
)
"""The Kueue step's node, tainted like docs/kueue.md's flavor: its two NVLink domains of 4 GPUs
are what the two teams share."""
LENDER, BORROWER = "team-a", "team-b"
BORROWING_JOB = "borrow"
LENDING_JOB = "train"
BORROWING_PODS, BORROWING_GPUS = 4, 2
KUEUE_TIMEOUT_SECONDS = 90.0
"""How long the Kueue step waits for each of its stages (admitted, bound, preempted, gone)."""
KUEUE_GROUP = "kueue.x-k8s.io"


def kueue_recipe(text: str) -> list[dict[str, Any]]:
    """The objects of the `## Recipe` yaml block of docs/kueue.md (`text`), in order."""
    start = text.index("\n## Recipe\n")
    block = text[text.index("```yaml\n", start) + len("```yaml\n") :]
    return [d for d in yaml.safe_load_all(block[: block.index("```")]) if d]


def kueue_objects(recipe: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The recipe's admin objects for the demo (the flavor pointed at `KUEUE_NODE`, a LocalQueue
    for each team) and its Job, unchanged but for running on kwok until deleted."""
    objects: list[dict[str, Any]] = []
    job: dict[str, Any] = {}
    for document in recipe:
        document = json.loads(json.dumps(document))
        if document["kind"] == "ResourceFlavor":
            document["spec"]["nodeLabels"] = dict(KUEUE_NODE.labels)
        if document["kind"] == "Job":
            job = document
            continue
        objects.append(document)
        if document["kind"] == "LocalQueue":
            other = json.loads(json.dumps(document))
            other["metadata"] = {"name": BORROWER, "namespace": BORROWER}
            other["spec"]["clusterQueue"] = BORROWER
            objects.append(other)
    if not job:
        raise CommandError(f"{shown(KUEUE_DOC)}: the Recipe section has no Job")
    job["spec"]["template"].setdefault("metadata", {})["annotations"] = {
        RUN_ANNOTATION: UNTIL_DELETED
    }
    job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 0
    return objects, job


def borrowing_job(job: dict[str, Any]) -> dict[str, Any]:
    """The recipe's Job for team B: `BORROWING_PODS` x `BORROWING_GPUS` GPUs."""
    borrowing: dict[str, Any] = json.loads(json.dumps(job))
    borrowing["metadata"] = {
        "name": BORROWING_JOB,
        "namespace": BORROWER,
        "labels": {QUEUE_LABEL: BORROWER},
    }
    borrowing["spec"].update(parallelism=BORROWING_PODS, completions=BORROWING_PODS)
    (container,) = borrowing["spec"]["template"]["spec"]["containers"]
    container["resources"]["requests"]["nvidia.com/gpu"] = BORROWING_GPUS
    container["resources"]["limits"]["nvidia.com/gpu"] = BORROWING_GPUS
    return borrowing


def workload_condition(
    cluster: LocalCluster, namespace: str, job: str, kind: str
) -> dict[str, Any]:
    """Condition `kind` of the Workload Kueue made for Job `job` ({} when absent)."""
    listed = get_json(cluster, "get", f"workloads.{KUEUE_GROUP}", "-n", namespace)
    for item in listed.get("items", []):
        owners = item["metadata"].get("ownerReferences") or ()
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
            for condition in (item.get("status") or {}).get("conditions") or ():
                if condition.get("type") == kind:
                    found: dict[str, Any] = condition
                    return found
    return {}


def job_pods(cluster: LocalCluster, namespace: str, job: str) -> list[dict[str, Any]]:
    return [
        pod
        for pod in pods_of(cluster, namespace).values()
        if (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == job
    ]


def all_bound(cluster: LocalCluster, namespace: str, job: str, count: int) -> bool:
    """Whether Job `job` has `count` pods, each bound with its GPUs and Running."""
    pods = job_pods(cluster, namespace, job)
    return len(pods) == count and all(
        (pod.get("spec") or {}).get("nodeName")
        and (pod["metadata"].get("annotations") or {}).get("gpu-scheduler.io/gpus")
        and (pod.get("status") or {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
        for pod in pods
    )


def borrowed_gpus(cluster: LocalCluster, queue: str) -> str:
    """GPUs ClusterQueue `queue` borrows from its cohort now, from its status ("0" when none)."""
    status = get_json(cluster, "get", f"clusterqueues.{KUEUE_GROUP}", queue).get("status") or {}
    for flavor in status.get("flavorsUsage") or ():
        for resource in flavor.get("resources") or ():
            if resource.get("name") == "nvidia.com/gpu":
                return str(resource.get("borrowed", 0))
    return "0"


def kueue(demo: Demo) -> None:
    cluster = demo.cluster
    say("starting Kueue (a first run builds it) ...")
    local = Kueue(cluster)
    demo.kueue = local
    try:
        local.start()
    except (KueueError, ComponentError) as error:
        first = " ".join(str(error).split())[:300]
        say(f"kueue: Kueue did not start: {first}; see kueue.log in {shown(cluster.log_dir)}")
        return
    names = asyncio.run(add_nodes(cluster.kubeconfig, [KUEUE_NODE]))
    objects, job = kueue_objects(kueue_recipe(KUEUE_DOC.read_text()))
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}}
        for team in (LENDER, BORROWER)
    ]
    say(f"Kueue ready; added {names[0]} ({KUEUE_NODE.gpus} GPUs, NVLink domains "
        f"{KUEUE_NODE.nvlink_domains}) and applied the {shown(KUEUE_DOC)} recipe, its flavor "
        f"pointed at that node: {LENDER} and {BORROWER} own 4 GPUs each in one cohort, "
        f"{BORROWER} may borrow 4, {LENDER} takes lent quota back:")  # fmt: skip
    apply_objects(demo.cluster, "kueue-recipe.yaml", [*namespaces, *objects])
    if not poll(
        lambda: demo.stop()
        or all(
            any(
                c.get("type") == "Active" and c.get("status") == "True"
                for c in (get_json(cluster, "get", f"clusterqueues.{KUEUE_GROUP}", q).get("status")
                          or {}).get("conditions") or ()
            )
            for q in (LENDER, BORROWER)
        ),
        KUEUE_TIMEOUT_SECONDS,
    ):  # fmt: skip
        say(f"kueue: the ClusterQueues did not become Active; see kueue.log in {cluster.log_dir}")
        return
    if demo.stop():
        return
    total = BORROWING_PODS * BORROWING_GPUS
    say(f"{BORROWER} submits {BORROWING_JOB}: {BORROWING_PODS} x {BORROWING_GPUS} GPUs = {total}, "
        f"4 beyond its quota, while {LENDER} is idle:")  # fmt: skip
    apply_objects(demo.cluster, "kueue-borrow.yaml", [borrowing_job(job)])
    bound = poll(
        lambda: demo.stop() or all_bound(cluster, BORROWER, BORROWING_JOB, BORROWING_PODS),
        KUEUE_TIMEOUT_SECONDS,
    )
    if demo.stop():
        return
    if not bound:
        say(f"kueue: {BORROWING_JOB} was not admitted and bound in {KUEUE_TIMEOUT_SECONDS:.0f} s; "
            f"see kueue.log and gpu-scheduler.log in {cluster.log_dir}")  # fmt: skip
        return
    # The ClusterQueue's usage in its status follows the admission by a moment.
    poll(lambda: demo.stop() or borrowed_gpus(cluster, BORROWER) != "0", 10.0)
    say(f"kueue: {BORROWING_JOB} admitted to {BORROWER}, borrowing "
        f"{borrowed_gpus(cluster, BORROWER)} GPUs of {LENDER}'s idle quota; gpu-scheduler bound "
        f"its {BORROWING_PODS} pods:")  # fmt: skip
    selector = f"batch.kubernetes.io/job-name={BORROWING_JOB}"
    say(pods_table(cluster, BORROWER, selector))
    count = int(job["spec"]["parallelism"])
    (container,) = job["spec"]["template"]["spec"]["containers"]
    each = container["resources"]["requests"]["nvidia.com/gpu"]
    say(f"{LENDER} submits {LENDING_JOB} (the recipe's Job: {count} x {each} GPUs), within its own "
        "quota, which is lent out:")  # fmt: skip
    apply_objects(demo.cluster, "kueue-train.yaml", [job])
    preempted = poll(
        lambda: (
            demo.stop()
            or workload_condition(cluster, BORROWER, BORROWING_JOB, "Preempted").get("status")
            == "True"
        ),
        KUEUE_TIMEOUT_SECONDS,
    )
    if demo.stop():
        return
    condition = workload_condition(cluster, BORROWER, BORROWING_JOB, "Preempted")
    if not preempted:
        say(f"kueue: {BORROWING_JOB} was not preempted in {KUEUE_TIMEOUT_SECONDS:.0f} s; see "
            f"kueue.log in {cluster.log_dir}")  # fmt: skip
        return
    say(f"kueue: {BORROWER}'s {BORROWING_JOB} preempted ({condition.get('reason')}): "
        f"{condition.get('message')}")  # fmt: skip
    done = poll(
        lambda: (
            demo.stop()
            or (
                all_bound(cluster, LENDER, LENDING_JOB, count)
                and not job_pods(cluster, BORROWER, BORROWING_JOB)
            )
        ),
        KUEUE_TIMEOUT_SECONDS,
    )
    if demo.stop():
        return
    if not done:
        say(f"kueue: {LENDING_JOB} was not bound in {KUEUE_TIMEOUT_SECONDS:.0f} s; see "
            f"gpu-scheduler.log in {cluster.log_dir}")  # fmt: skip
        return
    say(f"kueue: {BORROWING_JOB}'s pods are gone; {LENDING_JOB} admitted to {LENDER}, and "
        f"gpu-scheduler bound its {count} pods, each inside one NVLink domain:")  # fmt: skip
    selector = f"batch.kubernetes.io/job-name={LENDING_JOB}"
    say(pods_table(cluster, LENDER, selector))
    poll(
        lambda: (
            demo.stop()
            or workload_condition(cluster, BORROWER, BORROWING_JOB, "QuotaReserved").get("status")
            == "False"
        ),
        10.0,
    )
    waiting = workload_condition(cluster, BORROWER, BORROWING_JOB, "QuotaReserved")
    say(f"kueue: {BORROWING_JOB} waits in {BORROWER}'s queue, suspended "
        f"(QuotaReserved={waiting.get('status')}): {waiting.get('message')}")  # fmt: skip
    say()


KUEUE_STEP = Step(
    "kueue",
    f"Kueue lends idle quota and takes it back: {BORROWER} borrows {LENDER}'s idle GPUs, "
    f"{LENDER} submits, Kueue preempts the borrower, gpu-scheduler places every pod "
    "NVLink-aware (docs/kueue.md)",
    kueue,
)


STEPS: tuple[Step, ...] = (
    Step(
        "placement",
        "the example workloads, placed NVLink-aware: multi-GPU pods inside one NVLink domain, "
        "small pods packed, the impossible one explained",
        placement,
    ),
    Step(
        "reclaim",
        f"an idle notebook (PriorityClass demo-notebooks: reclaimable after {IDLE_WINDOW_S} s "
        "below 10 %) holds the only GPUs a training pod can use; the scheduler evicts it",
        reclaim,
    ),
    Step(
        "busy-time",
        "GPU busy time: the share of measured GPU time each namespace's GPUs did work, from the "
        f"daemon's /metrics (accounted every {ACCOUNTING_PERIOD_S} s; waits for one more period, "
        f"at most {ACCOUNTING_PERIOD_S * BUSY_TIME_PERIODS} s), then `gpu-scheduler idle-report`",
        busy_time,
    ),
    Step(
        "gang",
        f"a gang of {GANG_MEMBERS} x {GANG_MEMBER_GPUS} GPUs (PodGroup {GANG}, minCount "
        f"{GANG_MEMBERS}) starts all at once or not at all: while another pod holds one of its "
        "four nodes nothing is bound; once that pod goes, all members bind together",
        gang,
    ),
    Step(
        "dra",
        "GPUs through Dynamic Resource Allocation: a node publishing its GPUs as a ResourceSlice, "
        "pods asking through ResourceClaims; gpu-scheduler allocates the devices inside one "
        "NVLink domain where kube-scheduler's first fit would split them (docs/dra.md)",
        dra,
    ),
    # Further steps go here, in the order they are shown, each a Step(name, one line, function).
)


def next_commands(demo: Demo) -> str:
    """The command lines to copy, from the repository root in a second terminal."""
    kubeconfig = shown(demo.cluster.kubeconfig)
    tool = command_path()
    return "\n".join(
        [
            "try next, from the repository root in a second terminal:",
            f"  {tool} explain --pod {NAMESPACE}/too-big --kubeconfig {kubeconfig}",
            f"  {tool} explain --pod-group {NAMESPACE}/{GANG} --kubeconfig {kubeconfig}",
            f"  {shown(Path(demo.kubectl))} --kubeconfig {kubeconfig} get events -n {NAMESPACE}",
            f"  {shown(Path(demo.kubectl))} --kubeconfig {kubeconfig} get resourceclaims -n "
            f"{NAMESPACE} -o custom-columns=NAME:.metadata.name,DEVICES:.status.allocation.devices"
            ".results[*].device,RESERVED-FOR:.status.reservedFor[*].name",
            f"  {shown(Path(demo.kubectl))} --kubeconfig {kubeconfig} get nodes "
            "-o custom-columns=NAME:.metadata.name,TYPE:.metadata.labels.node\\.kubernetes\\.io/"
            "instance-type,GPUS:.status.allocatable.nvidia\\.com/gpu,"
            "NVLINK:.metadata.annotations.gpu-scheduler\\.io/nvlink-domains",
            *(
                [
                    f"  {shown(Path(demo.kubectl))} --kubeconfig {kubeconfig} get "
                    "clusterqueues,workloads.kueue.x-k8s.io -A"
                ]
                if demo.kueue is not None
                else []
            ),
        ]
    )


def chosen_steps(kueue: bool, names: str | None) -> list[Step]:
    """The steps to run: `STEPS`, then `KUEUE_STEP` with --kueue; only those `names` (a comma
    list) gives, in their order of `STEPS`. CommandError for a name that is not a step."""
    steps = [*STEPS, KUEUE_STEP] if kueue else list(STEPS)
    if names is None:
        return steps
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    known = [step.name for step in steps]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise CommandError(f"--steps: no step {', '.join(n[:40] for n in unknown[:5])}; the steps "
                           f"are {', '.join(known)}")  # fmt: skip
    return [step for step in steps if step.name in wanted]


def run(args: argparse.Namespace) -> int:
    specs = load_specs(args.nodes, args.count)
    steps = chosen_steps(args.kueue, args.steps)
    if not args.no_scheduler:
        specs.append(RECLAIM_NODE)
    shutil.rmtree(args.work_dir, ignore_errors=True)
    cluster = LocalCluster(ClusterConfig(work_dir=args.work_dir, real_node=args.in_cluster))
    say("starting the local control plane (a first run builds the Kubernetes binaries) ...")
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    with cluster:
        # From here on Ctrl-C (or SIGTERM) asks for a clean stop, whatever the demo is doing.
        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        names = asyncio.run(add_nodes(cluster.kubeconfig, specs))
        kubectl = str(cluster.binaries.kubectl) if cluster.binaries else "kubectl"
        start = start_in_cluster if args.in_cluster else start_scheduler
        scheduler_url = "not started" if args.no_scheduler else start(cluster)
        say(
            f"\nlocal cluster ready in {cluster.started_in_s:.0f} s "
            f"with {len(names)} fake GPU nodes\n"
            f"  kubeconfig:  {shown(cluster.kubeconfig)}\n"
            f"  prometheus:  {cluster.prometheus_url}\n"
            f"  dcgm:        {cluster.dcgm_url}/metrics\n"
            f"  logs:        {shown(cluster.log_dir)}\n"
            f"  scheduler:   {scheduler_url} (log: gpu-scheduler.log)\n"
        )
        token = metrics_reader_token(cluster) if args.in_cluster and not args.no_scheduler else ""
        demo = Demo(cluster, kubectl, lambda: stop, metrics_url=scheduler_url, metrics_token=token)
        try:
            if not args.no_scheduler:
                for step in steps:
                    if stop:
                        break
                    number = [*STEPS, KUEUE_STEP].index(step) + 1
                    say(f"step {number}, {step.name}: {step.explanation}")
                    step.run(demo)
                say(next_commands(demo) + "\n")
            say(READY_LINE)
            while not stop:
                time.sleep(1)
                dead = [name for name, alive in cluster.alive().items() if not alive]
                if dead:
                    print(
                        f"component(s) exited: {', '.join(dead)}; see {cluster.log_dir}",
                        file=sys.stderr,
                    )
                    return EXIT_RUNTIME
            say("\nstopping ...")
        finally:
            if demo.kueue is not None:
                demo.kueue.stop()
                say("Kueue stopped, its webhook configurations deleted.")
    say("stopped; every component is gone.")
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2, help="nodes of each seed type (default 2)")
    parser.add_argument(
        "--nodes", type=Path, help="YAML list of node specs instead of the seed types"
    )
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    parser.add_argument(
        "--no-scheduler", action="store_true", help="only the cluster: no scheduler, no workloads"
    )
    parser.add_argument(
        "--in-cluster",
        action="store_true",
        help="the scheduler as the shipped Deployment on a real node (root; docs/local-cluster.md)",
    )
    parser.add_argument(
        "--kueue",
        action="store_true",
        help="one more step: Kueue lends a team's idle GPU quota and takes it back (docs/kueue.md)",
    )
    parser.add_argument(
        "--steps", help="comma list of the steps to run (default: all), e.g. --steps kueue"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the demo; known errors end it with one line on stderr (see the module docstring)."""
    args = parser().parse_args(argv)
    try:
        return run(args)
    except ComponentError as error:
        first = " ".join(str(error).split())[:300]
        print(f"make demo: a component did not start: {first}", file=sys.stderr)
        return EXIT_RUNTIME
    except Exception as error:
        described = describe_error(error)
        if described is None:
            raise
        message, code = described
        print(f"make demo: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
