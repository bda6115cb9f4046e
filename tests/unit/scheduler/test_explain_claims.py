"""`gpu-scheduler explain` for a pod with ResourceClaims, offline: the dump's DeviceClasses,
ResourceSlices and ResourceClaims are read, each feasible node shows the devices its claims would
get (NVLink-aware: the tightest domain), and a node that cannot hold them says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hack.localcluster import D8
from hack.localcluster.dra import gpu_device_class, node_resource_slice
from hack.localcluster.nodes import node_manifest
from scheduler.cli import main
from tests.dra_objects import (
    DRIVER,
    allocated,
    claim_spec,
    exact,
    pod_with_claims,
    request,
    resource_claim,
    result,
)


def test_explain_shows_the_devices_each_node_would_allocate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = [gpu_device_class()]
    for node in ("d8-0", "d8-1"):
        items.append(node_manifest(D8, node))
        items.append(node_resource_slice(node, f"uid-{node}", D8.gpu_model(), 8))
    taken = [result("gpus", f"gpu-{g}", pool="d8-0") for g in (0, 1, 2)]
    items.append(resource_claim("held", "demo", status=allocated(*taken, node="d8-0")))
    taken = [result("gpus", f"gpu-{g}", pool="d8-1") for g in range(7)]
    items.append(resource_claim("held-1", "demo", status=allocated(*taken, node="d8-1")))
    spec = claim_spec(request("gpus", exact(DRIVER, count=2)))
    items.append(resource_claim("pair", "demo", spec=spec))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    pod = pod_with_claims("p", [{"name": "gpus", "resourceClaimName": "pair"}], namespace="demo")
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(pod))
    argv = ["explain", "--pod-file", str(pod_file), "--cluster", str(cluster), "-o", "json"]
    assert main(argv) == 0
    rows = {row["node"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["d8-0"]["feasible"] is True
    # gpu-0..2 taken: domain 0 keeps one GPU, domain 1 four; first fit would take gpu-3, gpu-4.
    assert rows["d8-0"]["devices"] == {"pair": [f"{DRIVER}/d8-0/gpu-4", f"{DRIVER}/d8-0/gpu-5"]}
    assert rows["d8-1"]["feasible"] is False
    assert rows["d8-1"]["devices"] == {}
    assert rows["d8-1"]["reasons"] == ["cannot allocate all claims"]


def test_explain_shows_the_devices_of_an_extended_resource_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pod asking for nvidia.com/gpu on a DRA node: the claim gpu-scheduler would make."""
    items = [gpu_device_class(), node_manifest(D8, "d8-0")]
    items.append(node_resource_slice("d8-0", "uid-d8-0", D8.gpu_model(), 8))
    taken = [result("gpus", "gpu-0", pool="d8-0")]
    items.append(resource_claim("held", "demo", status=allocated(*taken, node="d8-0")))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "demo", "uid": "uid-p"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 2}}}]},
    }
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(pod))
    argv = ["explain", "--pod-file", str(pod_file), "--cluster", str(cluster), "-o", "json"]
    assert main(argv) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["feasible"] is True
    assert row["devices"] == {
        "p-extended-resources-": [f"{DRIVER}/d8-0/gpu-1", f"{DRIVER}/d8-0/gpu-2"]
    }
