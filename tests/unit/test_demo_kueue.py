"""`make demo --kueue`'s pure parts: which steps run (Kueue only with --kueue), and the objects
built from docs/kueue.md's recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from hack.demo import (
    BORROWER,
    BORROWING_GPUS,
    BORROWING_PODS,
    KUEUE_DOC,
    KUEUE_NODE,
    KUEUE_STEP,
    STEPS,
    borrowing_job,
    chosen_steps,
    kueue_objects,
    kueue_recipe,
    main,
)
from hack.localcluster.kueue import QUEUE_LABEL
from hack.localcluster.kwok_stages import RUN_ANNOTATION, UNTIL_DELETED
from scheduler.tools.errors import CommandError


def test_the_default_demo_has_no_kueue_step() -> None:
    assert chosen_steps(False, None) == list(STEPS)
    assert KUEUE_STEP not in chosen_steps(False, None)
    assert chosen_steps(True, None) == [*STEPS, KUEUE_STEP]
    assert chosen_steps(True, "kueue") == [KUEUE_STEP]
    assert chosen_steps(True, "gang, placement") == [STEPS[0], STEPS[3]]


def test_kueue_is_not_a_step_without_the_flag() -> None:
    with pytest.raises(CommandError, match="--steps: no step kueue; the steps are placement"):
        chosen_steps(False, "kueue")


def test_an_unknown_step_stops_the_demo_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--steps", "nope" * 30, "--work-dir", str(tmp_path / "w")]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("make demo: --steps: no step nope") and len(line) < 300
    assert "starting the local control plane" not in captured.out


def test_the_recipe_objects_point_the_flavor_at_the_demo_node() -> None:
    objects, job = kueue_objects(kueue_recipe(KUEUE_DOC.read_text()))
    by_kind = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {("ClusterQueue", "team-a"), ("ClusterQueue", "team-b")} <= by_kind
    assert ("LocalQueue", "team-b") in by_kind and ("LocalQueue", "team-a") in by_kind
    (flavor,) = [o for o in objects if o["kind"] == "ResourceFlavor"]
    assert flavor["spec"]["nodeLabels"] == dict(KUEUE_NODE.labels)
    assert [dict(t) for t in KUEUE_NODE.taints] == flavor["spec"]["nodeTaints"]
    assert job["metadata"]["namespace"] == "team-a"
    assert job["spec"]["template"]["metadata"]["annotations"] == {RUN_ANNOTATION: UNTIL_DELETED}


def test_the_borrowing_job_asks_beyond_its_teams_quota() -> None:
    objects, job = kueue_objects(kueue_recipe(KUEUE_DOC.read_text()))
    borrowing = borrowing_job(job)
    assert borrowing["metadata"]["labels"] == {QUEUE_LABEL: BORROWER}
    assert borrowing["spec"]["parallelism"] == BORROWING_PODS
    (queue,) = [
        o for o in objects if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == BORROWER
    ]
    (gpu,) = [
        r
        for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        if r["name"] == "nvidia.com/gpu"
    ]
    assert (
        gpu["nominalQuota"]
        < BORROWING_PODS * BORROWING_GPUS
        <= gpu["nominalQuota"] + gpu["borrowingLimit"]
    )
    assert job["spec"]["parallelism"] != BORROWING_PODS  # the recipe's Job is left as it is
