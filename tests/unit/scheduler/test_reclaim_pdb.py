"""PdbStore: which PodDisruptionBudgets guard a pod, and how many disruptions each allows."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.victims.pdb import PdbStore, parse_budget


def budget(
    name: str = "pdb",
    namespace: str = "team",
    selector: Any = None,
    allowed: Any = 0,
    disrupted: Any = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"disruptionsAllowed": allowed}
    if disrupted is not None:
        status["disruptedPods"] = disrupted
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector if selector is not None else {"matchLabels": {"app": "db"}}},
        "status": status,
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize(
    ("selector", "labels", "guarded"),
    [
        ({"matchLabels": {"app": "db"}}, {"app": "db"}, True),
        ({"matchLabels": {"app": "db"}}, {"app": "db", "x": "y"}, True),
        ({"matchLabels": {"app": "db"}}, {"app": "web"}, False),
        ({"matchLabels": {"app": "db"}}, {}, False),
        ({"matchLabels": {"app": "db", "tier": "1"}}, {"app": "db"}, False),
        ({"matchExpressions": [expr("app", "In", "db", "cache")]}, {"app": "cache"}, True),
        ({"matchExpressions": [expr("app", "NotIn", "db")]}, {"app": "web"}, True),
        ({"matchExpressions": [expr("app", "NotIn", "db")]}, {}, True),
        ({"matchExpressions": [expr("app", "NotIn", "db")]}, {"app": "db"}, False),
        ({"matchExpressions": [expr("app", "Exists")]}, {"app": ""}, True),
        ({"matchExpressions": [expr("app", "DoesNotExist")]}, {"app": "x"}, False),
        (
            {"matchLabels": {"app": "db"}, "matchExpressions": [expr("tier", "In", "1")]},
            {"app": "db", "tier": "2"},
            False,
        ),
        # An empty selector guards nothing (kube-scheduler's preemption skips it), nor does a
        # selector it cannot read.
        ({}, {"app": "db"}, False),
        ({"matchExpressions": [expr("app", "Gt", "1")]}, {"app": "2"}, False),
        ({"matchLabels": ["app"]}, {"app": "db"}, False),
        ("app=db", {"app": "db"}, False),
    ],
)
def test_selector_table(selector: Any, labels: dict[str, str], guarded: bool) -> None:
    store = PdbStore()
    store.on_add(budget(selector=selector))
    assert store.budgets_of("team", "pod", labels) == (("team/pdb",) if guarded else ())


def test_other_namespace_is_not_guarded() -> None:
    store = PdbStore()
    store.on_add(budget())
    assert store.budgets_of("other", "pod", {"app": "db"}) == ()


def test_pod_already_disrupted_does_not_count_again() -> None:
    store = PdbStore()
    store.on_add(budget(disrupted={"gone": "2024-05-01T10:00:00Z"}))
    assert store.budgets_of("team", "gone", {"app": "db"}) == ()
    assert store.budgets_of("team", "still", {"app": "db"}) == ("team/pdb",)


@pytest.mark.parametrize(("raw", "allowed"), [(2, 2), (0, 0), (-1, 0), ("3", 0), (None, 0)])
def test_disruptions_allowed(raw: Any, allowed: int) -> None:
    store = PdbStore()
    store.on_add(budget(allowed=raw))
    assert store.allowed() == {"team/pdb": allowed}


def test_update_and_delete() -> None:
    store = PdbStore()
    store.on_add(budget(allowed=0))
    store.on_add(budget(name="two", allowed=1))
    store.on_update(budget(allowed=0), budget(allowed=5))
    assert store.allowed() == {"team/pdb": 5, "team/two": 1}
    store.on_update(budget(), budget(selector={}))  # now guards nothing: dropped
    assert store.allowed() == {"team/two": 1}
    store.on_delete(budget(name="two"))
    assert len(store) == 0 and store.allowed() == {}
    store.on_delete(budget(name="unknown"))


def test_several_budgets_sorted() -> None:
    store = PdbStore()
    store.on_add(budget(name="b"))
    store.on_add(budget(name="a", selector={"matchExpressions": [expr("app", "Exists")]}))
    assert store.budgets_of("team", "p", {"app": "db"}) == ("team/a", "team/b")


def test_parse_budget_without_name_or_selector() -> None:
    assert parse_budget({"metadata": {"namespace": "x"}, "spec": {}}) is None
    assert parse_budget({}) is None
