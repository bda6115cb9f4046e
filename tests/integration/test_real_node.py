"""The local cluster's opt-in real node: containerd, kubelet and kube-proxy on this machine.

It registers Ready with its pod CIDR, runs a pod from the offline probe image that reaches the API
server through the `kubernetes` Service's ClusterIP (kube-proxy's rules, the CNI bridge, the
ServiceAccount token), serves that pod's log to the API server, refuses a second real node on the
same machine, and its teardown leaves nothing behind on the host.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import pytest

from hack.localcluster import ClusterConfig, LocalCluster, hoststate
from hack.localcluster.binaries import pinned_versions
from hack.localcluster.cluster import REPO_ROOT
from hack.localcluster.containerd import BRIDGE
from hack.localcluster.hostcleanup import CGROUP_NAME
from hack.localcluster.realnode import PROBE_IMAGE, RealNode, RealNodeError

pytestmark = pytest.mark.real_node
POD_TIMEOUT_S = 90.0


def probe_pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    """A pod on `node` running the probe image once (no restarts)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "probe", "image": PROBE_IMAGE, "imagePullPolicy": "Never"}],
        },
    }


def apply(cluster: LocalCluster, manifest: dict[str, Any], folder: Path) -> None:
    """kubectl apply `manifest`; retried while the namespace's default ServiceAccount is not
    there yet (the controller manager creates it a moment after the namespace)."""
    path = folder / f"{manifest['metadata']['name']}.json"
    path.write_text(json.dumps(manifest))
    deadline = time.monotonic() + 30
    while True:
        result = cluster.kubectl("apply", "-f", str(path), check=False)
        if result.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert result.returncode == 0, result.stderr


def finished_pod(cluster: LocalCluster, name: str, namespace: str) -> dict[str, Any]:
    """The pod once its phase is Succeeded or Failed (fails the test after POD_TIMEOUT_S)."""
    deadline = time.monotonic() + POD_TIMEOUT_S
    pod: dict[str, Any] = {}
    while time.monotonic() < deadline:
        result = cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json")
        pod = json.loads(result.stdout)
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            return pod
        time.sleep(0.5)
    pytest.fail(f"pod {namespace}/{name} did not finish: {json.dumps(pod.get('status'))[:2000]}")


@pytest.fixture
def probe_namespace(
    real_node_cluster: LocalCluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    name = request.node.name.replace("_", "-").lower()[:50]
    real_node_cluster.kubectl("create", "namespace", name)
    yield name
    real_node_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_teardown_leaves_nothing_behind(tmp_path: Path) -> None:
    """Runs first, with a cluster of its own (one real node per machine): a probe pod gives the
    node a sandbox, a veth, mounts and cgroups; after stop() the host is as before."""
    folder = tmp_path / "cluster"
    before = hoststate.snapshot(folder / "node", CGROUP_NAME)
    cluster = LocalCluster(
        ClusterConfig(
            work_dir=folder, real_node=True, kube_scheduler=False, prometheus=False, fake_dcgm=False
        )
    )
    try:
        cluster.start()
        assert cluster.real_node is not None
        apply(cluster, probe_pod("probe", "default", cluster.real_node.name), tmp_path)
        assert finished_pod(cluster, "probe", "default")["status"]["phase"] == "Succeeded"
        during = hoststate.snapshot(folder / "node", CGROUP_NAME)
    finally:
        cluster.stop()
    after = hoststate.snapshot(folder / "node", CGROUP_NAME)

    # The snapshot sees what a running node adds, so an empty difference below means something.
    assert BRIDGE in during.links
    assert during.mounts and during.cgroups and during.processes
    assert any("KUBE-SERVICES" in rule for rule in during.iptables)
    assert hoststate.differences(before, after) == []


CHILD = """
import json, sys, time
from pathlib import Path
from hack.localcluster import ClusterConfig, LocalCluster
from hack.localcluster.containerd import PAUSE_IMAGE
folder = Path(sys.argv[1])
cluster = LocalCluster(ClusterConfig(work_dir=folder / "cluster", real_node=True,
                                     kube_scheduler=False, prometheus=False, fake_dcgm=False))
cluster.start()
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": "default"},
       "spec": {"nodeName": cluster.real_node.name, "containers": [
           {"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}]}}
(folder / "pod.json").write_text(json.dumps(pod))
for _ in range(120):
    if cluster.kubectl("apply", "-f", str(folder / "pod.json"), check=False).returncode == 0:
        break
    time.sleep(0.5)
for _ in range(240):
    phase = cluster.kubectl("get", "pod", "sleeper", "-o", "jsonpath={.status.phase}").stdout
    if phase == "Running":
        break
    time.sleep(0.5)
print(phase, flush=True)
time.sleep(600)
"""


def test_a_killed_launcher_is_cleaned_up_by_the_next_start(tmp_path: Path) -> None:
    """A launcher killed with SIGKILL takes its components with it (PR_SET_PDEATHSIG), but not
    the pod's shim, mounts, bridge, rules, cgroups or sysctls: the next real node's start cleans
    those up from the record in the lock file."""
    node_folder = tmp_path / "cluster" / "node"
    before = hoststate.snapshot(node_folder, CGROUP_NAME)
    launcher = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert launcher.stdout is not None
        assert launcher.stdout.readline().strip() == "Running"
    finally:
        launcher.kill()
        launcher.wait(timeout=60)
    time.sleep(2)  # its children get SIGKILL from the kernel as it dies
    left = hoststate.snapshot(node_folder, CGROUP_NAME)
    assert BRIDGE in left.links and left.cgroups, hoststate.differences(before, left)

    cluster = LocalCluster(
        ClusterConfig(
            work_dir=tmp_path / "next",
            real_node=True,
            kube_scheduler=False,
            prometheus=False,
            fake_dcgm=False,
        )
    )
    try:
        cluster.start()
        assert cluster.real_node is not None and cluster.real_node.recovered is not None
        assert cluster.real_node.recovered.folder == node_folder
    finally:
        cluster.stop()
    assert hoststate.differences(before, hoststate.snapshot(node_folder, CGROUP_NAME)) == []


def test_node_is_ready_with_its_pod_cidr(real_node_cluster: LocalCluster) -> None:
    real_node = real_node_cluster.real_node
    assert real_node is not None and real_node.ready()
    node = real_node.node()
    assert node is not None
    assert node["spec"]["podCIDR"] == real_node.config.pod_cidr  # type: ignore[index]
    info = node["status"]["nodeInfo"]  # type: ignore[index]
    versions = pinned_versions()
    assert info["kubeletVersion"] == versions["KUBERNETES_VERSION"]
    # containerd 2 built by hack/build-binaries.sh --node, not Debian's 1.6 (which has no CDI).
    containerd = versions["CONTAINERD_VERSION"].removeprefix("v")
    assert info["containerRuntimeVersion"] == f"containerd://{containerd}"
    addresses = node["status"]["addresses"]  # type: ignore[index]
    assert {"type": "InternalIP", "address": real_node.host_ip} in addresses


def test_pod_reaches_the_api_server_through_the_kubernetes_service(
    real_node_cluster: LocalCluster, probe_namespace: str, tmp_path: Path
) -> None:
    cluster = real_node_cluster
    assert cluster.real_node is not None
    apply(cluster, probe_pod("probe", probe_namespace, cluster.real_node.name), tmp_path)
    pod = finished_pod(cluster, "probe", probe_namespace)

    cluster_ip = cluster.kubectl(
        "get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}"
    ).stdout
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert pod["status"]["phase"] == "Succeeded", terminated
    assert terminated["message"] == f"GET https://{cluster_ip}:443/livez: 200 ok"
    assert ip_address(pod["status"]["podIP"]) in ip_network(cluster.real_node.config.pod_cidr)
    # The API server reaches the kubelet too (logs, and later exec and port-forward).
    logs = cluster.kubectl("logs", "probe", "-n", probe_namespace)
    assert logs.stdout.strip() == terminated["message"]


def test_a_second_real_node_on_the_machine_is_refused(
    real_node_cluster: LocalCluster, tmp_path: Path
) -> None:
    other = LocalCluster(ClusterConfig(work_dir=tmp_path / "other"))
    with pytest.raises(RealNodeError, match="another real node runs on this machine"):
        RealNode(other).start()
    assert real_node_cluster.real_node is not None and real_node_cluster.real_node.ready()
