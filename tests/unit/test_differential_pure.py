"""The pure parts of hack.differential: generation, log parsing, verdicts, the cache build."""

from __future__ import annotations

from pathlib import Path

from hack.differential.compare import Outcome, render, summarize
from hack.differential.generate import FEATURES, generate
from hack.differential.ours import build_cache, framework, verdict
from hack.differential.reference import (
    BoundCounts,
    arguments,
    config,
    parse_bound,
    parse_scored,
)
from hack.differential.run import (
    check_counts,
    describe_change,
    fingerprint,
    terminating,
)

HEAD = "I1126 12:52:58.903 26724 schedule_one.go:830]"
SCORE = '"Calculated node\'s final score for pod"'
LOG = "\n".join(
    [
        f'{HEAD} "Plugin scored node for pod" pod="d-a/p" plugin="NodeAffinity" node="n-1" score=0',
        f'{HEAD} {SCORE} pod="d-a/p" node="n-1" score=12',
        f'{HEAD} {SCORE} pod="d-a/p" node="n-2" score=40',
        f'{HEAD} {SCORE} pod="d-b/q" node="n-2" score=7',
        f'{HEAD} "Successfully bound pod to node" pod="d-a/p" node="n-2" evaluatedNodes=30 '
        "feasibleNodes=2",
    ]
)


def test_log_parsing_reads_scored_nodes_and_bound_counts() -> None:
    assert parse_scored(LOG) == {"d-a/p": {"n-1", "n-2"}, "d-b/q": {"n-2"}}
    assert parse_bound(LOG) == {"d-a/p": BoundCounts(evaluated=30, feasible=2)}


def test_a_shortcut_cycle_or_a_miscount_is_an_error_not_a_one_node_verdict() -> None:
    # A batched cycle (OpportunisticBatching) binds with evaluatedNodes=1: the pod's one
    # bound node is not its feasible set.
    batched = Outcome("d-a/p", ("gpu",), frozenset({"n-2"}), frozenset({"n-1", "n-2"}))
    batched.node_count = 30
    miscounted = Outcome("d-a/q", ("gpu",), frozenset({"n-2"}), frozenset({"n-2"}))
    miscounted.node_count = 30
    full = Outcome("d-a/r", ("gpu",), frozenset({"n-1", "n-2"}), frozenset({"n-1", "n-2"}))
    full.node_count = 30
    check_counts(
        [batched, miscounted, full],
        {
            "d-a/p": BoundCounts(evaluated=1, feasible=1),
            "d-a/q": BoundCounts(evaluated=30, feasible=3),
            "d-a/r": BoundCounts(evaluated=30, feasible=2),
        },
    )
    assert "evaluated 1 of 30 nodes" in batched.error
    assert "logged 3 feasible nodes" in miscounted.error
    assert full.error == "" and full.verdict == "agree"


def test_reference_runs_a_full_search_for_every_pod() -> None:
    argv = arguments(Path("ks"), Path("c.yaml"), Path("kc"), 10259, Path("certs"))
    assert "--feature-gates=OpportunisticBatching=false" in argv
    assert "--vmodule=schedule_one=10" in argv


def test_reference_profile_scores_every_node_without_preemption_or_default_spreading() -> None:
    profile = config(Path("kubeconfig"))["profiles"][0]  # type: ignore[index]
    assert profile["percentageOfNodesToScore"] == 100
    assert profile["plugins"]["postFilter"]["disabled"] == [{"name": "DefaultPreemption"}]
    spread = profile["pluginConfig"][0]
    assert spread["args"] == {"defaultingType": "List", "defaultConstraints": []}


def test_generation_is_seeded_and_tags_features() -> None:
    one, again, other = generate(3, 40, 60), generate(3, 40, 60), generate(4, 40, 60)
    assert [c.manifest for c in one.candidates] == [c.manifest for c in again.candidates]
    assert [c.manifest for c in one.candidates] != [c.manifest for c in other.candidates]
    assert len(one.nodes) == 40 and len(one.candidates) == 60
    used = {f for c in generate(1, 100, 300).candidates for f in c.features}
    assert used == set(FEATURES)


def test_verdicts_agree_justified_and_disagree() -> None:
    nvlink = {"n-3": "NVLink: node(s) would split the GPUs across NVLink domains"}
    same = Outcome("a/p", ("resources",), frozenset({"n-1"}), frozenset({"n-1"}))
    split = Outcome(
        "a/q", ("gpu",), frozenset({"n-1", "n-3"}), frozenset({"n-1"}), first_failure=nvlink
    )
    taint = Outcome(
        "a/r",
        ("tolerations",),
        frozenset({"n-1", "n-3"}),
        frozenset({"n-1"}),
        first_failure={"n-3": "TaintToleration: node(s) had untolerated taint"},
    )
    extra = Outcome("a/s", ("gpu",), frozenset({"n-1"}), frozenset({"n-1", "n-3"}))
    failed = Outcome("a/t", ("gpu",), frozenset(), frozenset(), error="no outcome")
    assert [o.verdict for o in (same, split, taint, extra, failed)] == [
        "agree",
        "justified",
        "disagree",
        "disagree",
        "disagree",
    ]
    assert "only kube-scheduler accepts: n-3 (TaintToleration" in taint.describe()
    assert "only gpu-scheduler accepts: n-3" in extra.describe()
    rows = summarize([same, split, taint])
    assert rows[-1].feature == "all" and rows[-1].agree == 1 and rows[-1].justified == 1
    assert "66.7 %" in render(rows)


def test_ours_judges_generated_pods_against_the_generated_state() -> None:
    scenario = generate(2, 20, 30)
    for pod in scenario.existing:  # the API server would add the uid; bound pods need one
        pod["metadata"]["uid"] = pod["metadata"]["name"]
    cache = build_cache(scenario.nodes, scenario.existing, scenario.namespaces)
    profile = framework()
    verdicts = [verdict(c.manifest, cache, profile) for c in scenario.candidates]
    names = {n["metadata"]["name"] for n in scenario.nodes}
    for answer in verdicts:
        assert answer.feasible <= names
        assert answer.feasible.isdisjoint(answer.first_failure)
        assert answer.feasible | set(answer.first_failure) == names
    assert any(v.feasible for v in verdicts) and any(not v.feasible for v in verdicts)


def test_fingerprint_sees_what_filters_read_and_ignores_the_judged_pod() -> None:
    scenario = generate(2, 5, 3)
    pods = [
        {**p, "metadata": {**p["metadata"], "uid": p["metadata"]["name"]}}
        for p in scenario.existing
    ]
    base = fingerprint(scenario.nodes, pods, scenario.namespaces, skip="d-a/judged")
    judged = {
        "metadata": {"name": "judged", "namespace": "d-a"},
        "spec": {"nodeName": scenario.nodes[0]["metadata"]["name"]},
    }
    assert fingerprint(scenario.nodes, [*pods, judged], scenario.namespaces, "d-a/judged") == base
    heartbeat = [
        {**n, "status": {**n["status"], "conditions": [{"type": "Ready"}]}} for n in scenario.nodes
    ]
    assert fingerprint(heartbeat, pods, scenario.namespaces, "d-a/judged") == base
    other = {**judged, "metadata": {"name": "other", "namespace": "d-a"}}
    assert fingerprint(scenario.nodes, [*pods, other], scenario.namespaces, "d-a/judged") != base
    terminating = [
        {**pods[0], "metadata": {**pods[0]["metadata"], "deletionTimestamp": "now"}},
        *pods[1:],
    ]
    assert fingerprint(scenario.nodes, terminating, scenario.namespaces, "d-a/judged") != base


def test_a_changed_state_is_described_by_part_bounded_and_empty_when_equal() -> None:
    scenario = generate(2, 5, 3)
    pods = [
        {**p, "metadata": {**p["metadata"], "uid": p["metadata"]["name"]}}
        for p in scenario.existing
    ]
    base = fingerprint(scenario.nodes, pods, scenario.namespaces, skip="")
    assert describe_change(base, base) == ""
    others = [
        {
            "metadata": {"name": f"other-{i}", "namespace": "elsewhere", "uid": str(i)},
            "spec": {"nodeName": "n"},
            "status": {"phase": "Running"},
        }
        for i in range(5)
    ]
    changed = fingerprint(scenario.nodes, [*pods, *others], scenario.namespaces, skip="")
    described = describe_change(base, changed)
    assert described.startswith("bound pod new: ('elsewhere/other-0'")
    assert described.endswith("; and 2 more") and "gone" not in described
    assert describe_change(changed, base).startswith("bound pod gone: ")


def test_terminating_names_objects_being_deleted() -> None:
    objects = [
        {"metadata": {"name": "ns-a", "deletionTimestamp": "2026-12-07T00:00:00Z"}},
        {"metadata": {"name": "ns-b"}},
        {"metadata": {"name": "p", "namespace": "ns-a", "deletionTimestamp": "now"}},
    ]
    assert terminating(objects) == ["ns-a", "ns-a/p"]
