"""The shipped image and manifests as a Deployment on the local cluster's real node.

The offline image (`hack/image`) is imported into the real node's containerd and `manifests/` is
applied through an overlay that only names that image (`imagePullPolicy: Never`), pins the pods
to the real node and generates the ConfigMap as docs/operations.md installs it, its name ending
in a hash of its content (`hack/localcluster/incluster.py`). Then, in order: both replicas Ready
and one leader; GPU pods bound onto kwok nodes from inside the cluster with the shipped
ServiceAccount; a pod with a DRA claim template scheduled by the Deployment runs on the real node
with the devices it allocated (kubelet prepares them through the node's DRA test driver), and its
claim is deallocated once it is deleted; the mutating webhook served through its Service; both
pods scraped by the cluster's Prometheus over HTTPS with a token bound to the
gpu-scheduler-metrics-reader ClusterRole (the shipped `metricsServing.secure`; no token: 401);
the hardening seen on the host's view of the container
processes (uid, capabilities, no new privileges, read-only root, RSS under the memory limit); a
ConfigMap change rolls the Deployment while pods are created, none bound twice; deleting the
leader hands over to the other replica.

Tests of this module share one cluster and run in file order (each leaves the Deployment Ready).
"""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client, config

from hack.image import IMAGE_NAME
from hack.localcluster import LocalCluster
from hack.localcluster.cluster import REPO_ROOT
from hack.localcluster.dradriver import claim_env_name
from hack.localcluster.incluster import (
    CONFIG_MAP,
    NAMESPACE,
    POD_LABEL,
    Deployed,
    apply_overlay,
    deploy,
    leader,
    wait_rollout,
    write_overlay,
)
from hack.localcluster.nodes import G2, create_nodes, wait_nodes_ready
from scheduler.kube.client import api_client_for
from scheduler.model.claims import DELETE_PROTECTION_FINALIZER
from tests.conftest import announce
from tests.dra_objects import claim_template
from tests.integration.test_image import require_tools
from tests.kube import eventually, gpu_pod
from tests.real_node_dra import (
    POD_TIMEOUT_S,
    allocation,
    claim_json,
    claim_names,
    claim_variables,
    devices,
    env_pod,
    prepared,
    running,
)

pytestmark = pytest.mark.real_node

WORKLOAD_NAMESPACE = "in-cluster-work"
NODE_LABEL = "gpu-scheduler.io/in-cluster-test"
SHIPPED_CONFIG = yaml.safe_load(
    (REPO_ROOT / "manifests" / "webhooks" / "configmap.yaml").read_text()
)["data"]["config.yaml"]
"""The shipped configuration with the admission webhooks on (the Component's ConfigMap)."""
TIMEOUT_S = 120.0
MEMORY_MARGIN = 2.0
"""The memory limit holds at least this many times the measured peak RSS of a replica."""
SCRAPER = "metrics-scraper"
"""ServiceAccount bound to gpu-scheduler-metrics-reader: this module scrapes with its token."""
UNVERIFIED = ssl.create_default_context()
UNVERIFIED.check_hostname = False
UNVERIFIED.verify_mode = ssl.CERT_NONE  # each replica's metrics certificate is self-signed
TIMINGS: dict[str, float] = {}
"""Seconds of each step, printed at the module's end (docs/local-cluster.md quotes them)."""
MEASURED: dict[str, float] = {}
"""Other measurements printed with them."""


def until(
    check: Any, what: str, timeout: float = TIMEOUT_S, cluster: LocalCluster | None = None
) -> Any:
    """Poll `check()` every 0.5 s until it returns something truthy; fails naming `what` (and,
    given `cluster`, with the Lease and the pods of both namespaces)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    state = ""
    if cluster is not None:
        lease = cluster.kubectl("get", "lease", "-n", NAMESPACE, "-o", "yaml", check=False)
        pods = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False)
        state = f"\n{lease.stdout[-1500:]}\n{pods.stdout[-2500:]}"
    pytest.fail(f"timed out waiting for {what}{state}")


def get_json(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return result


def scheduler_pods(cluster: LocalCluster) -> list[dict[str, Any]]:
    """The Deployment's pods that are not being deleted."""
    items = get_json(cluster, "pods", "-n", NAMESPACE, "-l", POD_LABEL)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def metrics_of(pod: dict[str, Any], token: str) -> str:
    """GET /metrics of the pod's metrics port over HTTPS with `token`, from the host (the CNI
    bridge routes pod IPs)."""
    request = urllib.request.Request(
        f"https://{pod['status']['podIP']}:10261/metrics",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=5, context=UNVERIFIED) as response:
        return str(response.read().decode())


def status_without_token(pod: dict[str, Any]) -> int:
    """The HTTP status of GET /metrics of the pod without a token."""
    url = f"https://{pod['status']['podIP']}:10261/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5, context=UNVERIFIED) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f"{name} ") or line.startswith(f"{name}{{"):
            return float(line.rsplit(" ", 1)[1])
    return None


async def make_nodes(kubeconfig: Path) -> list[str]:
    """Two Ready kwok nodes of 4 GPUs (`incl-0`, `incl-1`) labelled `NODE_LABEL`."""
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        core = client.CoreV1Api(api)
        spec = G2.with_count(2)
        spec = type(spec)(**{**vars(spec), "type_name": "incl", "labels": {NODE_LABEL: "yes"}})
        names = await create_nodes(core, [spec])
        await wait_nodes_ready(core, names)
        return names


def work_pod(name: str) -> dict[str, Any]:
    """A one-GPU pod for the shipped scheduler name, on this module's kwok nodes."""
    pod = gpu_pod(name, 1, node_selector={NODE_LABEL: "yes"})
    pod["metadata"]["namespace"] = WORKLOAD_NAMESPACE
    return pod


def create_pods(cluster: LocalCluster, folder: Path, pods: list[dict[str, Any]]) -> None:
    path = folder / f"pods-{pods[0]['metadata']['name']}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    cluster.kubectl("create", "-f", str(path))


def bound_nodes(cluster: LocalCluster, names: list[str]) -> dict[str, str]:
    items = get_json(cluster, "pods", "-n", WORKLOAD_NAMESPACE)["items"]
    nodes = {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in items}
    return {name: nodes.get(name, "") for name in names}


def all_bound(cluster: LocalCluster, names: list[str]) -> dict[str, str] | None:
    nodes = bound_nodes(cluster, names)
    return nodes if all(nodes.values()) else None


def delete_work(cluster: LocalCluster) -> None:
    cluster.kubectl(
        "delete", "pods", "--all", "-n", WORKLOAD_NAMESPACE, "--wait=true", "--timeout=60s"
    )


def create_namespace(cluster: LocalCluster, name: str, *labels: str) -> None:
    """Create namespace `name` with `labels` ("key=value") and wait for its default
    ServiceAccount (pods cannot be created before it)."""
    cluster.kubectl("create", "namespace", name)
    if labels:
        cluster.kubectl("label", "namespace", name, *labels)
    until(
        lambda: (
            cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode
            == 0
        ),
        f"the ServiceAccount of namespace {name}",
    )


def create_scraper(cluster: LocalCluster, name: str) -> None:
    """A ServiceAccount `name` in the scheduler's namespace, bound (a ClusterRoleBinding of the
    same name) to the gpu-scheduler-metrics-reader ClusterRole: its tokens read /metrics."""
    cluster.kubectl("create", "serviceaccount", name, "-n", NAMESPACE)
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        name,
        "--clusterrole=gpu-scheduler-metrics-reader",
        f"--serviceaccount={NAMESPACE}:{name}",
    )


def bind_work_pods(cluster: LocalCluster, folder: Path, prefix: str) -> str:
    """Create a one-GPU pod per GPU of the two kwok nodes (`<prefix>-0` ... `<prefix>-7`) and
    check that all are bound there, each with one Scheduled event, by the Lease's holder;
    returns the holder."""
    names = [f"{prefix}-{i}" for i in range(8)]
    create_pods(cluster, folder, [work_pod(name) for name in names])
    nodes = until(lambda: all_bound(cluster, names), "8 GPU pods bound")
    assert set(nodes.values()) == {"incl-0", "incl-1"}  # 2 nodes x 4 GPUs, all used
    holder = leader(cluster)
    events = get_json(cluster, "events", "-n", WORKLOAD_NAMESPACE)["items"]
    scheduled = [e for e in events if e["reason"] == "Scheduled"]
    assert {e["involvedObject"]["name"] for e in scheduled} == set(names)
    assert {e.get("reportingInstance") or e["source"].get("host", "") for e in scheduled} <= {
        holder,
        "",
    }
    return holder


def check_the_webhook_mutates(cluster: LocalCluster, folder: Path, namespace: str) -> None:
    """A GPU pod naming no scheduler, created in a new namespace `namespace` labelled
    gpu-scheduler.io/enabled=true, gets spec.schedulerName gpu-scheduler from the replicas'
    webhook and is bound; the namespace is deleted afterwards."""
    create_namespace(cluster, namespace, "gpu-scheduler.io/enabled=true")
    pod = gpu_pod("unnamed", 1, node_selector={NODE_LABEL: "yes"})
    del pod["spec"]["schedulerName"]
    pod["metadata"]["namespace"] = namespace
    path = folder / "pod.json"
    path.write_text(json.dumps(pod))
    cluster.kubectl("create", "-f", str(path))
    created = get_json(cluster, "pod", "unnamed", "-n", namespace)
    assert created["spec"]["schedulerName"] == "gpu-scheduler"
    until(
        lambda: get_json(cluster, "pod", "unnamed", "-n", namespace)["spec"].get("nodeName"),
        "the mutated pod bound",
    )
    cluster.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=60s")


def roll_while_creating_pods(
    cluster: LocalCluster, folder: Path, prefix: str, roll: Callable[[], None]
) -> float:
    """Call `roll`, which returns once the Deployment has rolled, while a one-GPU pod is created
    every second (`<prefix>-0` ... `<prefix>-7`, the GPUs of the two kwok nodes). Checks that
    both replicas were replaced, every pod was bound with exactly one Scheduled event (none
    bound twice), and no old replica's log has a bind refused as already bound. Returns the
    seconds `roll` took, pod creation running beside it."""
    before = {p["metadata"]["name"] for p in scheduler_pods(cluster)}
    names = [f"{prefix}-{i}" for i in range(8)]

    def create_slowly() -> None:
        for name in names:
            create_pods(cluster, folder, [work_pod(name)])
            time.sleep(1.0)

    creating = threading.Thread(target=create_slowly)
    started = time.monotonic()
    creating.start()
    roll()
    took = time.monotonic() - started
    creating.join(timeout=60)
    assert not creating.is_alive()

    pods = scheduler_pods(cluster)
    assert len(pods) == 2 and not before & {p["metadata"]["name"] for p in pods}
    until(lambda: all_bound(cluster, names), "the pods created during the roll bound", 180)
    events = get_json(cluster, "events", "-n", WORKLOAD_NAMESPACE)["items"]
    scheduled = Counter(
        e["involvedObject"]["name"]
        for e in events
        if e["reason"] == "Scheduled" and e["involvedObject"]["name"] in names
    )
    assert set(scheduled) == set(names) and set(scheduled.values()) == {1}, scheduled
    for pod in before:  # the old replicas' logs: no bind refused as already bound
        log = cluster.kubectl("logs", "-n", NAMESPACE, pod, check=False).stdout
        assert "already assigned" not in log
    return took


@pytest.fixture(scope="module")
def deployed(real_node_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    require_tools()
    from hack.image import image_archive

    started = time.monotonic()
    archive = image_archive()
    TIMINGS["image build or cache"] = time.monotonic() - started
    folder = tmp_path_factory.mktemp("in-cluster")
    done = deploy(
        real_node_cluster, archive, IMAGE_NAME, SHIPPED_CONFIG, folder / "overlay", webhooks=True
    )
    TIMINGS.update(done.timings)
    create_scraper(real_node_cluster, SCRAPER)
    asyncio.run(make_nodes(real_node_cluster.kubeconfig))
    create_namespace(real_node_cluster, WORKLOAD_NAMESPACE)
    return done


@pytest.fixture(scope="module")
def scraper_token(real_node_cluster: LocalCluster, deployed: Deployed) -> str:
    """A token of `SCRAPER` (TokenRequest API), good for an hour."""
    created = real_node_cluster.kubectl(
        "create", "token", SCRAPER, "-n", NAMESPACE, "--duration=1h"
    )
    return str(created.stdout).strip()


@pytest.fixture(scope="module", autouse=True)
def report_timings(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if TIMINGS:
        steps = ", ".join(
            [f"{k} {v:.1f} s" for k, v in TIMINGS.items()]
            + [f"{k} {v:.0f}" for k, v in MEASURED.items()]
        )
        announce(request.config, f"in-cluster timings: {steps}")


def test_both_replicas_ready_on_the_real_node_with_one_leader(
    real_node_cluster: LocalCluster, deployed: Deployed, scraper_token: str
) -> None:
    cluster = real_node_cluster
    assert cluster.real_node is not None
    pods = scheduler_pods(cluster)
    assert len(pods) == 2
    for pod in pods:
        assert pod["status"]["phase"] == "Running" and ready(pod), pod["status"]
        assert pod["spec"]["nodeName"] == cluster.real_node.name
        assert pod["spec"]["serviceAccountName"] == "gpu-scheduler"
        assert pod["spec"]["containers"][0]["image"] == IMAGE_NAME
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    names = {p["metadata"]["name"] for p in pods}
    holder = until(lambda: leader(cluster), "a Lease holder")
    assert holder in names

    # Each replica says whether it leads: exactly one does, and it is the Lease's holder.
    def one_leading() -> dict[str, float] | None:
        values = {
            p["metadata"]["name"]: sample(metrics_of(p, scraper_token), "gpu_scheduler_leader")
            or 0.0
            for p in pods
        }
        return values if sorted(values.values()) == [0.0, 1.0] else None

    leading = until(one_leading, "one replica reporting gpu_scheduler_leader 1")
    assert [name for name, value in leading.items() if value == 1.0] == [holder]


def test_binds_gpu_pods_onto_kwok_nodes_from_inside_the_cluster(
    real_node_cluster: LocalCluster, deployed: Deployed, tmp_path: Path
) -> None:
    cluster = real_node_cluster
    holder = bind_work_pods(cluster, tmp_path, "gpu")
    # The pods have no kubeconfig: in-cluster config, the mounted ServiceAccount token.
    assert "--kubeconfig" not in json.dumps(scheduler_pods(cluster)[0]["spec"]["containers"])
    log = cluster.kubectl("logs", "-n", NAMESPACE, holder).stdout
    assert "Traceback" not in log
    delete_work(cluster)


async def test_a_dra_pod_runs_on_the_real_node_with_the_devices_the_deployment_allocated(
    real_node_cluster: LocalCluster, deployed: Deployed
) -> None:
    """A pod with a claim template for two devices of the real node's DRA driver, scheduled by
    the Deployment (schedulerName gpu-scheduler, the shipped ServiceAccount's RBAC), runs on the
    real node. Its container's environment holds the driver's variable of its claim and no other;
    kubelet prepared exactly the devices of the claim's allocation, which lie in one NVLink
    domain of the node (gpu-scheduler's default layout for its 4 devices, two pairs); the claim
    carries the delete-protection finalizer and is reserved for the pod alone. Deleting the pod
    deallocates the claim (the resourceclaim controller removes the finalizer and deletes it) and
    kubelet unprepares it."""
    cluster = real_node_cluster
    assert cluster.real_node is not None and cluster.real_node.dra_driver is not None
    driver = cluster.real_node.dra_driver
    namespace, name = WORKLOAD_NAMESPACE, "dra-pair"
    started = time.monotonic()
    api = await api_client_for(str(cluster.kubeconfig))
    try:
        # Typed Any: these calls take plain manifests, which the client serializes as they are.
        core: Any = client.CoreV1Api(api)
        resource: Any = client.ResourceV1Api(api)
        await resource.create_namespaced_resource_claim_template(
            namespace, claim_template("pair", namespace, devices(2))
        )
        entry = [{"name": "gpus", "resourceClaimTemplateName": "pair"}]
        pod = env_pod(namespace, name, entry, scheduler="gpu-scheduler")
        await core.create_namespaced_pod(namespace, pod)
        ran = await running(api, namespace, name)
        TIMINGS["DRA pod created to Running"] = time.monotonic() - started
        claim = (await claim_names(api, namespace, name))["gpus"]
        body = await claim_json(api, namespace, claim)
        allocated = await allocation(api, namespace, claim)
        variables = await claim_variables(api, namespace, name)
        kubelet = prepared(driver, namespace, claim)

        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=1)

        async def deallocated() -> bool:
            claims = await resource.list_namespaced_resource_claim(namespace)
            return claim not in {c.metadata.name for c in claims.items}

        await eventually(deallocated, timeout=POD_TIMEOUT_S, what=f"claim {claim} deallocated")
        await eventually(
            lambda: asyncio.to_thread(lambda: not prepared(driver, namespace, claim)),
            what=f"kubelet unprepared {claim}",
        )
        await resource.delete_namespaced_resource_claim_template("pair", namespace)
    finally:
        await api.close()
    node = cluster.real_node.name
    assert ran["spec"]["nodeName"] == node
    assert variables == {f"{claim_env_name(claim, 'devices')}=true"}
    assert len(allocated) == 2 and kubelet == sorted(allocated)
    assert {pool for pool, _ in allocated} == {node}
    pairs = ({"device-00", "device-01"}, {"device-02", "device-03"})
    assert {device for _, device in allocated} in pairs, allocated
    assert DELETE_PROTECTION_FINALIZER in body["metadata"]["finalizers"]
    reserved = body["status"]["reservedFor"]
    assert [(r["resource"], r["name"], r["uid"]) for r in reserved] == [
        ("pods", name, ran["metadata"]["uid"])
    ]
    # Bound by the Lease holder (Scheduled events name the replica that bound the pod).
    holder = leader(cluster)
    events = get_json(cluster, "events", "-n", namespace)["items"]
    scheduled = [
        e for e in events if e["reason"] == "Scheduled" and e["involvedObject"]["name"] == name
    ]
    assert len(scheduled) == 1, scheduled
    event = scheduled[0]
    assert (event.get("reportingInstance") or event["source"].get("host", "")) in {holder, ""}


def test_the_mutating_webhook_is_served_through_its_service(
    real_node_cluster: LocalCluster, deployed: Deployed, tmp_path: Path
) -> None:
    """A GPU pod naming no scheduler, in a namespace labelled for it, gets spec.schedulerName
    gpu-scheduler from the replicas' webhook (the API server calls the Service, TLS with the
    test's certificate), and is bound."""
    check_the_webhook_mutates(real_node_cluster, tmp_path, "in-cluster-mutated")


def test_prometheus_scrapes_both_replicas(
    real_node_cluster: LocalCluster, deployed: Deployed, scraper_token: str
) -> None:
    """Through the secure metrics server: HTTPS, the scraper's bearer token (as
    manifests/monitoring/prometheus.yml scrapes, with the token inline instead of a file)."""
    cluster = real_node_cluster
    assert cluster.prometheus_url is not None
    pods = scheduler_pods(cluster)
    assert [status_without_token(p) for p in pods] == [401, 401]
    targets = [f"{p['status']['podIP']}:10261" for p in pods]
    path = cluster.work_dir / "prometheus.yml"
    settings = yaml.safe_load(path.read_text())
    settings["scrape_configs"].append(
        {
            "job_name": "gpu-scheduler",
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "scheme": "https",
            "tls_config": {"insecure_skip_verify": True},
            "authorization": {"credentials": scraper_token},
            "static_configs": [{"targets": targets}],
        }
    )
    path.write_text(yaml.safe_dump(settings, sort_keys=False))
    [prometheus] = [c for c in cluster.processes.components if c.name == "prometheus"]
    prometheus.process.send_signal(signal.SIGHUP)  # reload its configuration

    def query(expression: str) -> list[dict[str, Any]]:
        url = f"{cluster.prometheus_url}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expression}
        )
        with urllib.request.urlopen(url, timeout=5) as response:
            result: list[dict[str, Any]] = json.loads(response.read())["data"]["result"]
        return result

    up = until(
        lambda: (lambda r: r if len(r) == 2 and all(s["value"][1] == "1" for s in r) else None)(
            query('up{job="gpu-scheduler"}')
        ),
        "both replicas up in Prometheus",
    )
    assert {s["metric"]["instance"] for s in up} == set(targets)
    leaders = until(lambda: query('gpu_scheduler_leader{job="gpu-scheduler"} == 1'), "a leader")
    assert len(leaders) == 1


def test_hardening_seen_on_the_host(real_node_cluster: LocalCluster, deployed: Deployed) -> None:
    """After the pods above were scheduled: each replica's container process, as the host's
    /proc shows it, runs as the image's non-root uid, with no capabilities, no new privileges, a
    read-only root, and a peak RSS well under the memory limit."""
    cluster = real_node_cluster
    node = cluster.real_node
    assert node is not None and node.binaries is not None
    tasks = node._ctr("tasks", "list").stdout.splitlines()[1:]
    pids = {line.split()[0]: int(line.split()[1]) for line in tasks if line.split()}
    peaks = []
    for pod in scheduler_pods(cluster):
        container = pod["spec"]["containers"][0]
        limit = container["resources"]["limits"]["memory"]
        assert limit.endswith("Mi") or limit.endswith("Gi"), limit
        limit_kib = int(limit[:-2]) * (1024 if limit.endswith("Mi") else 1024 * 1024)
        container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        pid = pids[container_id]
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        uids = status["Uid"].split()
        assert len(set(uids)) == 1 and int(uids[0]) != 0, status["Uid"]
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
        assert int(status["CapBnd"], 16) == 0
        assert status["NoNewPrivs"].strip() == "1"
        root = next(
            line.split()
            for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
            if line.split()[4] == "/"
        )
        assert "ro" in root[5].split(","), root
        peak_kib = int(status["VmHWM"].split()[0])
        peaks.append(peak_kib)
        assert peak_kib * MEMORY_MARGIN <= limit_kib, (pod["metadata"]["name"], peak_kib, limit)
    MEASURED["peak RSS of a replica (MiB)"] = max(peaks) / 1024


def test_a_configmap_change_rolls_the_deployment_without_a_pod_bound_twice(
    real_node_cluster: LocalCluster, deployed: Deployed, tmp_path: Path
) -> None:
    cluster = real_node_cluster
    changed = SHIPPED_CONFIG.replace("logLevel: info", "logLevel: debug")
    assert changed != SHIPPED_CONFIG

    def roll() -> None:
        apply_overlay(cluster, write_overlay(cluster, deployed.overlay, IMAGE_NAME, changed, True))
        wait_rollout(cluster)

    TIMINGS["config roll"] = roll_while_creating_pods(cluster, tmp_path, "roll", roll)
    mounted = {p["spec"]["volumes"][0]["configMap"]["name"] for p in scheduler_pods(cluster)}
    [config_map] = mounted
    assert config_map.startswith(f"{CONFIG_MAP}-")
    configmap = get_json(cluster, "configmap", config_map, "-n", NAMESPACE)
    assert configmap["data"]["config.yaml"] == changed
    delete_work(cluster)


def test_deleting_the_leader_hands_over_to_the_other_replica(
    real_node_cluster: LocalCluster, deployed: Deployed, tmp_path: Path
) -> None:
    cluster = real_node_cluster
    holder = until(lambda: leader(cluster), "a Lease holder")
    others = [p["metadata"]["name"] for p in scheduler_pods(cluster)]
    assert holder in others and len(others) == 2
    started = time.monotonic()
    cluster.kubectl("delete", "pod", holder, "-n", NAMESPACE, "--wait=false")

    def successor() -> str | None:
        """The new holder: the other replica, or the Deployment's replacement for the deleted
        pod when it starts fast enough to win the released Lease."""
        current = leader(cluster)
        return current if current and current != holder else None

    other = until(successor, f"a replica other than {holder} to lead", cluster=cluster)
    TIMINGS["leader handover"] = time.monotonic() - started
    names = ["after-handover"]
    create_pods(cluster, tmp_path, [work_pod(name) for name in names])
    until(lambda: all_bound(cluster, names), "a pod bound by the new leader", cluster=cluster)
    events = get_json(cluster, "events", "-n", WORKLOAD_NAMESPACE)["items"]
    [scheduled] = [
        e
        for e in events
        if e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "after-handover"
    ]
    assert other in json.dumps(scheduled), scheduled
    wait_rollout(cluster)
    delete_work(cluster)
