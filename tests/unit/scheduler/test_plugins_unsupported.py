"""Fields kube-scheduler acts on and gpu-scheduler does not implement: each row of the table is
detected, and such a pod is reported unschedulable with the field named, never placed."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.model.objects import parse_pod
from scheduler.model.unsupported import UNSUPPORTED, unsupported_fields, unsupported_message
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.core_api_double import harness

TERM = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
EXAMPLES: dict[str, tuple[str, Any]] = {
    "spec.volumes[*].ephemeral": (
        "volumes",
        [
            {"name": "cfg", "configMap": {"name": "c"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        ],
    ),
    "spec.volumes[*].gcePersistentDisk": (
        "volumes",
        [{"name": "d", "gcePersistentDisk": {"pdName": "d"}}],
    ),
    "spec.volumes[*].awsElasticBlockStore": (
        "volumes",
        [{"name": "d", "awsElasticBlockStore": {"volumeID": "v"}}],
    ),
    "spec.volumes[*].rbd": ("volumes", [{"name": "d", "rbd": {"image": "i", "monitors": ["m"]}}]),
    "spec.volumes[*].iscsi": ("volumes", [{"name": "d", "iscsi": {"iqn": "q", "lun": 0}}]),
}


def using(path: str) -> dict[str, Any]:
    key, value = EXAMPLES[path]
    pod = make_pod("p", gpus=1)
    pod["spec"][key] = value
    return pod


def test_every_row_has_an_example() -> None:
    assert sorted(EXAMPLES) == sorted(row.path for row in UNSUPPORTED)


@pytest.mark.parametrize("path", [row.path for row in UNSUPPORTED])
def test_each_row_is_detected(path: str) -> None:
    assert parse_pod(using(path)).unsupported == (path,)


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"affinity": {"podAntiAffinity": {}}},
        {
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [TERM]}
            }
        },
        {"affinity": {"nodeAffinity": {}}},
        {"topologySpreadConstraints": []},
        {
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
            ]
        },
        {"volumes": [{"name": "e", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "s"}}]},
        {"volumes": "nonsense", "resourceClaims": None},
        {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]},
    ],
)
def test_unused_or_empty_fields_are_not_reported(spec: dict[str, Any]) -> None:
    pod = make_pod("p", gpus=1)
    pod["spec"].update(spec)
    assert unsupported_fields(pod) == ()


def test_message_names_every_field() -> None:
    paths = ("spec.volumes[*].ephemeral", "spec.volumes[*].rbd")
    assert unsupported_message(paths, 3) == (
        "0/3 nodes are available: gpu-scheduler does not support generic ephemeral volumes "
        "(spec.volumes[*].ephemeral); gpu-scheduler does not support RBD volumes "
        "(spec.volumes[*].rbd)."
    )


async def test_pod_using_an_unsupported_field_is_unschedulable_not_placed() -> None:
    h = harness(cluster(make_node("n")))
    h.add(parse_pod(using("spec.volumes[*].ephemeral")))
    await h.cycle()
    assert h.scheduler.bound == 0
    assert h.queue.pools()["unschedulable"] == 1
    message = (
        "0/1 nodes are available: gpu-scheduler does not support generic ephemeral volumes "
        "(spec.volumes[*].ephemeral)."
    )
    assert h.core.condition_messages() == [message]
    assert h.core.patches[0][2]["status"]["conditions"][0]["reason"] == "Unschedulable"
    assert [(b["reason"], b["note"]) for b in h.events.bodies] == [("FailedScheduling", message)]


def test_explain_reports_the_unsupported_field_on_every_node() -> None:
    from scheduler.config import SchedulerConfig
    from scheduler.core.profile import default_framework
    from scheduler.tools.explain import explain

    nodes = [make_node("a"), make_node("b")]
    rows = explain(using("spec.volumes[*].rbd"), nodes, default_framework(SchedulerConfig()))
    reason = "gpu-scheduler does not support RBD volumes"
    assert [(r["node"], r["feasible"], r["reasons"]) for r in rows] == [
        ("a", False, [f"{reason} (spec.volumes[*].rbd)"]),
        ("b", False, [f"{reason} (spec.volumes[*].rbd)"]),
    ]
