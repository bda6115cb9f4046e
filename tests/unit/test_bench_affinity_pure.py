"""The affinity benchmark, small: both sides agree on every pod of the feature mix, the pods are
placed, and the documented command is one it accepts (no timing is asserted)."""

from __future__ import annotations

import json
import shlex

import pytest

from hack.bench import affinity
from hack.bench.feature_workload import GANG, PLAIN, PREFERRED, REQUIRED, SPREAD
from tests.datasets import REPO_ROOT
from tests.docs import section_blocks

SECTION = "Pod affinity and topology spread: count tables against the walk"


def test_tables_and_walk_agree_on_every_pod_of_a_small_feature_mix() -> None:
    result = affinity.measure(nodes=30, pods=80, seed=3)
    assert result.disagreements == 0
    assert 0 < result.placed <= 80
    assert set(result.by_kind_us) == {PLAIN, PREFERRED, REQUIRED, SPREAD, GANG}
    assert all(result.walked_us[stage] > 0 for stage in ("plugins", "evaluate", "event"))


def test_the_walked_side_keeps_no_tables() -> None:
    walked = affinity.build_cache(6, counted=False)
    counted = affinity.build_cache(6, counted=True)
    for _, pod in affinity.feature_pods(12, 0):
        node = walked.names[0]
        for cache in (walked, counted):
            cache.add_pod(affinity.bound_copy(pod, node))
    assert walked.pod_counts.held_terms("preferredAffinity") == []
    assert counted.pod_counts.held_terms("preferredAffinity") != []


def test_json_output_carries_the_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    assert affinity.main(["--nodes", "12", "--pods", "20", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["ratio"]) == {"plugins", "evaluate", "event"}
    assert report["disagreements"] == 0


def test_the_documented_command_is_accepted() -> None:
    text = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    commands = [
        shlex.split(line)
        for block in section_blocks(text, SECTION, "")
        for line in block.splitlines()
        if line.startswith("python -m hack.bench.affinity")
    ]
    assert commands
    for words in commands:
        affinity.build_parser().parse_args(words[3:])
