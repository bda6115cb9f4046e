"""`gpu-scheduler explain` for a gang: the plan of the whole PodGroup, per member, or why it does
not fit; offline from a dump and on plain data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.localcluster import D8
from hack.localcluster.dra import gpu_device_class, node_resource_slice
from hack.localcluster.nodes import node_manifest
from scheduler.cli import main
from scheduler.config import SchedulerConfig
from scheduler.core.profile import default_framework
from scheduler.tools.explain_gang import (
    BOUND,
    NOT_TRIED,
    PLACED,
    TOO_FEW,
    UNPLACED,
    explain_gang,
    render_gang,
)
from tests.dra_objects import DRIVER, allocated, claim_spec, exact, request, resource_claim, result
from tests.unit.scheduler.builders import make_node, make_pod
from tests.unit.scheduler.test_gangs import member, pod_group

Json = dict[str, Any]


def _explain(
    group: Json | None, *objects: Json, key: str = "default/pg"
) -> tuple[bool, str, dict[str, Any]]:
    framework = default_framework(SchedulerConfig())
    result = explain_gang(key, group, objects, framework, "gpu-scheduler")
    rows = {m.pod: m for m in result.members}
    return result.fits, result.message, rows


def test_four_two_gpu_members_planned_on_one_eight_gpu_node() -> None:
    nodes = [make_node(f"small-{i}", gpus=2) for i in range(4)] + [make_node("big", gpus=8)]
    members = [member(f"w{i}", gpus=2) for i in range(4)]
    fits, message, rows = _explain(pod_group(min_count=4), *nodes, *members)
    assert fits, message
    assert message.startswith("gang pg fits: 4 member(s) placed, 0 bound before, minCount 4")
    assert {r.node for r in rows.values()} == {"big"}
    assert {r.state for r in rows.values()} == {PLACED}
    assert sorted(g for r in rows.values() for g in r.gpus) == list(range(8))
    for row in rows.values():  # each member's 2 GPUs inside one NVLink domain
        assert len(row.domains) == 1, row


def test_gang_that_does_not_fit_names_how_many_fit_and_why() -> None:
    blocker = make_pod("blocker", gpus=2, node="n0", phase="Running")
    blocker["spec"]["schedulerName"] = "someone-else"
    nodes = [make_node("n0", gpus=4, domains="0-1,2-3")]
    members = [member(f"w{i}", gpus=1) for i in range(3)]
    fits, message, rows = _explain(pod_group(min_count=3), *nodes, blocker, *members)
    assert not fits
    assert message.startswith("gang pg: only 2 of minCount 3 members fit: "), message
    assert "Insufficient nvidia.com/gpu" in message
    states = sorted(r.state for r in rows.values())
    assert states == [UNPLACED, UNPLACED, UNPLACED]
    assert sorted(r.reason == TOO_FEW for r in rows.values()) == [False, True, True]
    assert all(not r.node for r in rows.values())  # nothing is bound, nothing shown as placed


def test_bound_members_count_towards_min_count_and_pin_the_topology_value() -> None:
    nodes = [
        make_node("a0", gpus=4, labels={"rack": "a"}),
        make_node("b0", gpus=8, labels={"rack": "b"}),
    ]
    bound = member("w0", gpus=2, node="a0", phase="Running", gpu_indices="0,1")
    pending = member("w1", gpus=2)
    group = pod_group(min_count=2, topology="rack")
    fits, message, rows = _explain(group, *nodes, bound, pending)
    assert fits, message
    assert "(rack=a)" in message and "1 member(s) placed, 1 bound before" in message
    assert (rows["w0"].state, rows["w0"].node, rows["w0"].gpus) == (BOUND, "a0", (0, 1))
    assert (rows["w1"].state, rows["w1"].node) == (PLACED, "a0")  # not the roomier rack b


def test_a_missing_pod_group_or_too_few_members_is_the_daemon_s_waiting_message() -> None:
    nodes = [make_node("n0", gpus=8)]
    fits, message, rows = _explain(None, *nodes, member("w0"))
    assert (fits, message) == (False, "waiting for PodGroup pg: it does not exist")
    assert rows["w0"].state == NOT_TRIED
    fits, message, _ = _explain(pod_group(min_count=3), *nodes, member("w0"), member("w1"))
    assert (fits, message) == (False, "waiting for PodGroup pg: 2 of minCount 3 pods exist")


def test_members_of_another_scheduler_or_gated_are_not_tried() -> None:
    nodes = [make_node("n0", gpus=8)]
    other = member("other", gpus=1)
    other["spec"]["schedulerName"] = "default-scheduler"
    gated = member("gated", gpus=1)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    fits, message, rows = _explain(
        pod_group(min_count=2), *nodes, member("w0"), member("w1"), other, gated
    )
    assert fits, message
    assert rows["other"].state == NOT_TRIED and "another scheduler" in rows["other"].reason
    assert rows["gated"].state == NOT_TRIED and "example.com/wait" in rows["gated"].reason


def test_coscheduling_group_is_read_with_its_own_parser() -> None:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "mnist", "namespace": "default"},
        "spec": {"minMember": 2},
    }
    pods = [make_pod(f"w{i}") for i in range(2)]
    for pod in pods:
        pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "mnist"}
    key = "default/scheduling.x-k8s.io/mnist"
    fits, message, rows = _explain(group, make_node("n0", gpus=8), *pods, key=key)
    assert fits, message
    assert set(rows) == {"w0", "w1"}


def test_render_names_the_group_and_one_row_per_member() -> None:
    framework = default_framework(SchedulerConfig())
    objects = [make_node("n0", gpus=8), member("w0", gpus=4), member("w1", gpus=4)]
    result = explain_gang("default/pg", pod_group(min_count=2), objects, framework, "gpu-scheduler")
    lines = render_gang(result).splitlines()
    assert lines[0] == "PodGroup default/pg (scheduling.k8s.io/v1beta1): minCount 2"
    assert lines[3].split() == ["MEMBER", "STATE", "NODE", "GPUS", "NVLINK_DOMAINS", "REASON"]
    rows = sorted(line.split()[:5] for line in lines[4:])
    assert rows == [["w0", "placed", "n0", "0,1,2,3", "0"], ["w1", "placed", "n0", "4,5,6,7", "1"]]


# -- the command, offline -----------------------------------------------------------------------


def _dump(tmp_path: Path, items: list[Json]) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def test_offline_member_prints_the_gang_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = [make_node("n0", gpus=8), pod_group(min_count=3)] + [
        member(f"w{i}", gpus=4) for i in range(3)
    ]
    cluster = _dump(tmp_path, items)
    pod = tmp_path / "w0.yaml"
    pod.write_text(yaml.safe_dump(member("w0", gpus=4)))
    argv = ["explain", "--pod-file", str(pod), "--cluster", str(cluster), "-o", "json"]
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["podGroup"], plan["fits"], plan["minCount"]) == ("default/pg", False, 3)
    assert plan["message"].startswith("gang pg: only 2 of minCount 3 members fit: ")
    assert [m["pod"] for m in plan["members"]] == ["w0", "w1", "w2"]


def test_offline_member_without_its_pod_group_in_the_dump(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _dump(tmp_path, [make_node("n0", gpus=8), member("w0")])
    pod = tmp_path / "w0.yaml"
    pod.write_text(yaml.safe_dump(member("w0")))
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(cluster)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "PodGroup default/pg (scheduling.k8s.io/v1beta1): not found"
    assert out[1] == "waiting for PodGroup pg: it does not exist"


def test_malformed_objects_in_the_dump_are_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": ["pg"]}
    odd_pod = {"kind": "Pod", "metadata": "w0"}
    cluster = _dump(tmp_path, [make_node("n0", gpus=8), broken, odd_pod, member("w0")])
    pod = tmp_path / "w0.yaml"
    pod.write_text(yaml.safe_dump(member("w0")))
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(cluster)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "waiting for PodGroup pg: it does not exist"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--pod-group", "no-slash"], "--pod-group must be NAMESPACE/NAME, got 'no-slash'"),
        (["--pod", "a/b", "--pod-group", "a/c"], "give one of --pod, --pod-file, --pod-group"),
    ],
)
def test_bad_pod_group_flags_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert main(["explain", *argv]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("gpu-scheduler explain: ") and expected in line, line


def test_members_with_claims_show_the_devices_the_plan_gives_them() -> None:
    """The dump's DRA objects are read: on an 8-GPU DRA node with gpu-0 held, two 2-GPU
    members get distinct pairs, each inside one NVLink domain (never gpu-0)."""

    objects: list[Json] = [gpu_device_class(), node_manifest(D8, "d8-0")]
    objects.append(node_resource_slice("d8-0", "uid-d8-0", D8.gpu_model(), 8))
    held = allocated(result("gpus", "gpu-0", pool="d8-0"), node="d8-0")
    objects.append(resource_claim("held", status=held))
    spec = claim_spec(request("gpus", exact(DRIVER, count=2)))
    for i in range(2):
        objects.append(resource_claim(f"pair-{i}", spec=spec))
        pod = member(f"w{i}", gpus=0)
        pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"pair-{i}"}]
        objects.append(pod)
    fits, message, rows = _explain(pod_group(min_count=2), *objects)
    assert fits, message
    devices = {}
    for row in rows.values():
        [claim] = row.claims
        name, _, picked = claim.partition(": ")
        devices[name] = picked.split(",")
    assert sorted(devices) == ["pair-0", "pair-1"]
    taken = [d.rpartition("/")[2] for pair in devices.values() for d in pair]
    assert len(set(taken)) == 4 and "gpu-0" not in taken
    for pair in devices.values():  # domains 0-3 and 4-7: a pair never straddles them
        indices = [int(d.rpartition("-")[2]) for d in pair]
        assert len({i // 4 for i in indices}) == 1, devices
    assert "pair-0: " in render_gang(
        explain_gang(
            "default/pg",
            pod_group(min_count=2),
            objects,
            default_framework(SchedulerConfig()),
            "gpu-scheduler",
        )
    )
