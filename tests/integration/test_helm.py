"""The Helm chart installed with the pinned helm on the local cluster's real node, as a user
installs it: the offline image (`hack/image`) imported into the node's containerd, then
`helm install` of `charts/gpu-scheduler` with values that only name that image
(`pullPolicy: Never`), pin the pods to the real node and turn the admission webhooks on with the
chart's own certificate (no cert-manager here). Then, in order, on one cluster: a bad value
refused by `helm install`, naming the field, with nothing applied; both replicas Ready with one
leader; GPU pods bound by the release onto kwok nodes, and the mutating webhook
answering through its Service with the chart-made certificate; `helm upgrade` with a changed
value rolling the Deployment while pods are created, none bound twice; `helm rollback` to the
first revision; `helm uninstall` leaving only what it should (listed, cluster-scoped objects
included); a new install after it scheduling again (the fence's binding was kept).

Helm is built into the cache first when it is not there (`hack/build-binaries.sh --helm`).
Tests of this module share one cluster and run in file order.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.image import IMAGE_NAME
from hack.localcluster import LocalCluster
from hack.localcluster.helm import CHART, Helm, HelmError, helm_binary
from hack.localcluster.incluster import NAMESPACE, import_image, leader, wait_rollout
from tests.conftest import announce, fail_or_skip
from tests.integration.test_image import require_tools
from tests.integration.test_in_cluster import (
    WORKLOAD_NAMESPACE,
    all_bound,
    bind_work_pods,
    check_the_webhook_mutates,
    create_namespace,
    create_pods,
    create_scraper,
    delete_work,
    get_json,
    make_nodes,
    metrics_of,
    ready,
    roll_while_creating_pods,
    sample,
    scheduler_pods,
    until,
    work_pod,
)

pytestmark = pytest.mark.real_node

RELEASE = "gpu-scheduler"
SCRAPER = "helm-metrics-scraper"
"""A ServiceAccount this module binds to the chart's metrics-reader ClusterRole to read
/metrics (the chart's own scraper comes with its Prometheus Operator monitors)."""
TIMEOUT = "180s"
TIMINGS: dict[str, float] = {}
"""Seconds of each step, printed at the module's end (docs/local-cluster.md quotes them)."""
EXPECTED_LEFTOVERS = {
    ("ValidatingAdmissionPolicy", "", "gpu-scheduler-lease-fence"),
    ("ValidatingAdmissionPolicyBinding", "", "gpu-scheduler-lease-fence"),
    ("Namespace", "", NAMESPACE),
    ("Lease", NAMESPACE, "gpu-scheduler"),
    ("ConfigMap", NAMESPACE, "kube-root-ca.crt"),
    ("ServiceAccount", NAMESPACE, "default"),
}
"""What stays after `helm uninstall`: the fence's policy and binding (fencingPolicy.
keepOnUninstall), the namespace `--create-namespace` made, the leader Lease the replicas wrote,
and what Kubernetes puts in every namespace. Events are left out of the listing."""


@dataclass(frozen=True)
class Release:
    """The installed release: helm against the cluster, and the values file it was installed
    with."""

    helm: Helm
    values: Path

    def install(self) -> None:
        install(self.helm, "--values", str(self.values), "--wait", "--timeout", TIMEOUT)


def install(helm: Helm, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`helm install` of the chart as `RELEASE` into `NAMESPACE` (created), with `args`."""
    return helm.run(
        "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", *args, check=check
    )


def values_for(cluster: LocalCluster) -> dict[str, Any]:
    """The values of this cluster: the offline image, the real node, webhooks with the chart's
    certificate."""
    assert cluster.real_node is not None
    repository, _, tag = IMAGE_NAME.rpartition(":")
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "nodeSelector": {"kubernetes.io/hostname": cluster.real_node.name},
        "webhooks": {"enabled": True, "certificate": "helm"},
    }


@pytest.fixture(scope="module")
def helm(real_node_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The pinned helm against the module's cluster, built first when it is not cached."""
    try:
        binary = helm_binary()
    except HelmError as error:
        fail_or_skip(str(error))
    return Helm(binary, real_node_cluster.kubeconfig, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def release(
    real_node_cluster: LocalCluster, helm: Helm, tmp_path_factory: pytest.TempPathFactory
) -> Release:
    require_tools()
    from hack.image import image_archive

    cluster = real_node_cluster
    folder = tmp_path_factory.mktemp("helm")
    values = folder / "values.yaml"
    values.write_text(yaml.safe_dump(values_for(cluster)))
    installed = Release(helm, values)
    started = time.monotonic()
    import_image(cluster, image_archive())
    TIMINGS["image build or cache, import"] = time.monotonic() - started
    started = time.monotonic()
    installed.install()
    TIMINGS["helm install --wait"] = time.monotonic() - started
    create_scraper(cluster, SCRAPER)
    asyncio.run(make_nodes(cluster.kubeconfig))
    create_namespace(cluster, WORKLOAD_NAMESPACE)
    return installed


@pytest.fixture(scope="module", autouse=True)
def report_timings(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if TIMINGS:
        steps = ", ".join(f"{k} {v:.1f} s" for k, v in TIMINGS.items())
        announce(request.config, f"helm timings: {steps}")


def test_helm_install_refuses_a_bad_value_naming_it_and_applies_nothing(
    real_node_cluster: LocalCluster, helm: Helm
) -> None:
    cluster = real_node_cluster
    refused = install(helm, "--set", "config.reclaim.mode=on", check=False)
    assert refused.returncode != 0
    assert "INSTALLATION FAILED: values don't meet the specifications" in refused.stderr
    assert "at '/config/reclaim/mode': value must be one of" in refused.stderr
    assert json.loads(helm.run("list", "-A", "-o", "json").stdout) == []
    assert cluster.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0


def test_helm_install_brings_up_two_ready_replicas_with_one_leader(
    real_node_cluster: LocalCluster, release: Release
) -> None:
    cluster = real_node_cluster
    assert cluster.real_node is not None
    status = json.loads(release.helm.run("status", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed" and status["version"] == 1
    pods = scheduler_pods(cluster)
    assert len(pods) == 2
    for pod in pods:
        assert pod["status"]["phase"] == "Running" and ready(pod), pod["status"]
        assert pod["spec"]["nodeName"] == cluster.real_node.name
        assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
        assert pod["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    holder = until(lambda: leader(cluster), "a Lease holder")
    assert holder in {p["metadata"]["name"] for p in pods}
    token = cluster.kubectl("create", "token", SCRAPER, "-n", NAMESPACE).stdout.strip()

    def leading() -> list[str] | None:
        """The replicas reporting gpu_scheduler_leader 1, once one does and the other 0."""
        values = {
            p["metadata"]["name"]: sample(metrics_of(p, token), "gpu_scheduler_leader") or 0.0
            for p in pods
        }
        if sorted(values.values()) != [0.0, 1.0]:
            return None
        return [name for name, value in values.items() if value == 1.0]

    assert until(leading, "one replica reporting gpu_scheduler_leader 1") == [holder]
    budget = until(
        lambda: get_json(cluster, "pdb", RELEASE, "-n", NAMESPACE)["status"].get(
            "disruptionsAllowed"
        ),
        "the disruption budget to allow one disruption",
    )
    assert budget == 1


def test_gpu_pods_are_scheduled_by_the_release(
    real_node_cluster: LocalCluster, release: Release, tmp_path: Path
) -> None:
    bind_work_pods(real_node_cluster, tmp_path, "helm")
    delete_work(real_node_cluster)


def test_the_mutating_webhook_answers_with_the_charts_own_certificate(
    real_node_cluster: LocalCluster, release: Release, tmp_path: Path
) -> None:
    """A GPU pod naming no scheduler, in a namespace labelled for it, gets spec.schedulerName
    from the replicas' webhook: the API server called the Service over TLS, trusting the CA the
    chart made (genCA) and put in the configuration's caBundle."""
    check_the_webhook_mutates(real_node_cluster, tmp_path, "helm-mutated")


def webhook_ca(cluster: LocalCluster) -> str:
    """The CA of the chart-made webhook certificate (base64), checked to be the one the
    mutating webhook configuration trusts."""
    secret = get_json(cluster, "secret", "gpu-scheduler-webhook-tls", "-n", NAMESPACE)
    configuration = get_json(cluster, "mutatingwebhookconfiguration", RELEASE)
    ca = str(secret["data"]["ca.crt"])
    assert configuration["webhooks"][0]["clientConfig"]["caBundle"] == ca
    return ca


def config_text(cluster: LocalCluster) -> str:
    return str(get_json(cluster, "configmap", RELEASE, "-n", NAMESPACE)["data"]["config.yaml"])


def test_helm_upgrade_with_a_changed_value_rolls_without_a_pod_bound_twice(
    real_node_cluster: LocalCluster, release: Release, tmp_path: Path
) -> None:
    cluster = real_node_cluster
    assert "logLevel: info" in config_text(cluster)
    ca = webhook_ca(cluster)

    def upgrade() -> None:
        release.helm.run(
            "upgrade",
            RELEASE,
            str(CHART),
            "-n",
            NAMESPACE,
            "--reuse-values",
            "--set",
            "config.logLevel=debug",
            "--wait",
            "--timeout",
            TIMEOUT,
        )
        wait_rollout(cluster)

    took = roll_while_creating_pods(cluster, tmp_path, "upgrade", upgrade)
    TIMINGS["helm upgrade --wait (a changed value)"] = took
    assert "logLevel: debug" in config_text(cluster)
    assert webhook_ca(cluster) == ca  # the chart took its certificate over, not made a new one
    delete_work(cluster)


def test_helm_rollback_returns_to_the_first_revisions_values(
    real_node_cluster: LocalCluster, release: Release
) -> None:
    cluster = real_node_cluster
    before = {p["metadata"]["name"] for p in scheduler_pods(cluster)}
    started = time.monotonic()
    release.helm.run("rollback", RELEASE, "1", "-n", NAMESPACE, "--wait", "--timeout", TIMEOUT)
    wait_rollout(cluster)
    TIMINGS["helm rollback --wait"] = time.monotonic() - started
    assert "logLevel: info" in config_text(cluster)
    pods = scheduler_pods(cluster)
    assert len(pods) == 2 and not before & {p["metadata"]["name"] for p in pods}
    history = json.loads(release.helm.run("history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert [(h["revision"], h["status"]) for h in history] == [
        (1, "superseded"),
        (2, "superseded"),
        (3, "deployed"),
    ]


def listed(cluster: LocalCluster, namespaced: bool) -> list[dict[str, Any]]:
    """Every object of every listable resource type, namespaced (in `NAMESPACE`) or
    cluster-scoped, but events."""
    types = cluster.kubectl(
        "api-resources", f"--namespaced={str(namespaced).lower()}", "--verbs=list", "-o", "name"
    ).stdout.split()
    types = [t for t in types if t.split(".")[0] != "events"]
    scope = ["-n", NAMESPACE] if namespaced else []
    items: list[dict[str, Any]] = get_json(cluster, ",".join(types), *scope)["items"]
    return items


def leftovers(cluster: LocalCluster) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of the objects in `NAMESPACE`, and of the cluster-scoped objects
    that name gpu-scheduler or carry the release's labels."""
    found = {(o["kind"], NAMESPACE, o["metadata"]["name"]) for o in listed(cluster, True)}
    for item in listed(cluster, False):
        metadata = item["metadata"]
        labels = metadata.get("labels") or {}
        if (
            "gpu-scheduler" in metadata["name"]
            or labels.get("app.kubernetes.io/instance") == RELEASE
        ):
            found.add((item["kind"], "", metadata["name"]))
    return found


def test_helm_uninstall_leaves_only_the_kept_fence_and_the_namespace(
    real_node_cluster: LocalCluster, release: Release, request: pytest.FixtureRequest
) -> None:
    cluster = real_node_cluster
    cluster.kubectl("delete", "namespace", WORKLOAD_NAMESPACE, "--wait=true", "--timeout=60s")
    cluster.kubectl("delete", "clusterrolebinding", SCRAPER)
    cluster.kubectl("delete", "serviceaccount", SCRAPER, "-n", NAMESPACE)
    started = time.monotonic()
    result = release.helm.run("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", TIMEOUT)
    TIMINGS["helm uninstall --wait"] = time.monotonic() - started
    assert "gpu-scheduler-lease-fence" in result.stdout  # helm names what it kept
    deadline = time.monotonic() + 60  # the garbage collector removes what the objects owned
    remaining = leftovers(cluster)
    while not remaining <= EXPECTED_LEFTOVERS and time.monotonic() < deadline:
        time.sleep(0.5)
        remaining = leftovers(cluster)
    announce(
        request.config,
        "left after helm uninstall: "
        + ", ".join(
            f"{kind} {ns + '/' if ns else ''}{name}" for kind, ns, name in sorted(remaining)
        ),
    )
    assert remaining == EXPECTED_LEFTOVERS, sorted(remaining ^ EXPECTED_LEFTOVERS)
    assert release.helm.run("status", RELEASE, "-n", NAMESPACE, check=False).returncode != 0


def test_a_new_install_after_uninstall_schedules_again(
    real_node_cluster: LocalCluster, release: Release, tmp_path: Path
) -> None:
    """The fence's binding stayed through the uninstall, so the API server still follows the
    Lease: the new release's leader, in a new term of the Lease, binds."""
    cluster = real_node_cluster

    def transitions() -> int:
        lease = get_json(cluster, "lease", "gpu-scheduler", "-n", NAMESPACE)
        return int(lease["spec"].get("leaseTransitions", 0))

    before = transitions()
    started = time.monotonic()
    release.install()
    TIMINGS["helm install again"] = time.monotonic() - started
    create_namespace(cluster, WORKLOAD_NAMESPACE)
    names = ["after-reinstall"]
    create_pods(cluster, tmp_path, [work_pod(name) for name in names])
    until(lambda: all_bound(cluster, names), "a pod bound by the new release", cluster=cluster)
    holder = leader(cluster)
    assert transitions() > before
    assert holder in {p["metadata"]["name"] for p in scheduler_pods(cluster)}
