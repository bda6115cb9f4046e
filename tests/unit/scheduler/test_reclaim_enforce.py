"""Reclaimer: plans re-validated before each node, the nominated node tried first, budgets,
isolation of bad PriorityClasses and failed queries, bounded cooldown memory."""

from __future__ import annotations

import pytest

from reclaim.policy import MINIMUM_PREEMPTABLE_PRIORITY
from scheduler.framework.snapshot import Snapshot
from scheduler.kube.eviction import EvictionResult
from scheduler.model.objects import parse_pod
from scheduler.postfilter.pod_watch import PodWatch
from scheduler.postfilter.preemptors import MAX_TRACKED_PODS
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.reclaim_doubles import (
    IDLE_CLASS,
    Rig,
    make_rig,
    pdb,
    pending_pod,
    policy,
    priority_class,
    victim_pod,
)


def two_full_nodes() -> list[dict[str, object]]:
    """Nodes a and b, one GPU each, each held by an idle victim (va, vb)."""
    return [make_node("a", gpus=1, domains="0"), make_node("b", gpus=1, domains="0")]


def rig_two_nodes(monkeypatch: pytest.MonkeyPatch, **kwargs: object) -> Rig:
    cache = cluster(*two_full_nodes(), pods=[victim_pod("va", "a"), victim_pod("vb", "b")])
    return make_rig(monkeypatch, cache, **kwargs)  # type: ignore[arg-type]


PREEMPTOR = parse_pod(pending_pod())


# -- the happy path, as a baseline for the stale cases ------------------------------------------


async def test_fresh_plan_evicts_on_the_best_node_and_nominates_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = rig_two_nodes(monkeypatch)
    assert await rig.attempt(PREEMPTOR) == "a"
    assert rig.api.evicted == ["va"]
    assert rig.api.nominated == [("preemptor", "a")]
    assert rig.reclaimer.nominated_node(PREEMPTOR) == "a"
    assert rig.cache.reservation(PREEMPTOR.key) is not None


# -- defect: stale plans ------------------------------------------------------------------------


async def test_preemptor_deleted_while_measuring_evicts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = rig_two_nodes(monkeypatch)
    watch = PodWatch(_NoopHandler(), rig.reclaimer)
    rig.usage.during = lambda: watch.on_delete(pending_pod())
    assert await rig.attempt(PREEMPTOR) is None
    assert rig.api.evicted == [] and rig.api.nominated == []
    assert rig.reclaimer.stats.skips["stale_plan"] == 1
    assert rig.cache.reservation(PREEMPTOR.key) is None


async def test_preemptor_recreated_while_measuring_evicts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = rig_two_nodes(monkeypatch)
    watch = PodWatch(_NoopHandler(), rig.reclaimer)
    rig.usage.during = lambda: watch.on_add(pending_pod(uid="another-uid"))
    assert await rig.attempt(PREEMPTOR) is None
    assert rig.api.evicted == []
    assert rig.reclaimer.stats.skips["stale_plan"] == 1


async def test_preemptor_bound_elsewhere_while_measuring_evicts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(
        *two_full_nodes(),
        make_node("c", gpus=1, domains="0"),
        pods=[victim_pod("va", "a"), victim_pod("vb", "b"), victim_pod("vc", "c")],
    )
    rig = make_rig(monkeypatch, cache)

    def bound_by_someone() -> None:
        cache.remove_pod("default/vc")
        cache.add_pod(parse_pod(make_pod("preemptor", gpus=1, node="c", priority=1000)))

    rig.usage.during = bound_by_someone
    assert await rig.attempt(PREEMPTOR) is None
    assert rig.api.evicted == []


async def test_victim_replaced_while_measuring_evicts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(make_node("a", gpus=1, domains="0"), pods=[victim_pod("va", "a")])
    rig = make_rig(monkeypatch, cache)

    def replaced() -> None:  # same name, another pod (a new UID)
        cache.remove_pod("default/va")
        cache.add_pod(parse_pod(victim_pod("va", "a", uid="uid-va-2")))

    rig.usage.during = replaced
    assert await rig.attempt(PREEMPTOR) is None
    assert rig.api.evicted == []
    assert rig.reclaimer.stats.skips["stale_plan"] == 1


async def test_room_on_the_next_node_taken_meanwhile_evicts_nothing_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two 2-GPU nodes, an idle victim on GPU 0 of each; the preemptor needs both GPUs.
    cache = cluster(
        make_node("a", gpus=2, domains="0-1"),
        make_node("b", gpus=2, domains="0-1"),
        pods=[victim_pod("va", "a", gpu_indices="0"), victim_pod("vb", "b", gpu_indices="0")],
    )
    rig = make_rig(monkeypatch, cache)
    rig.api.results["va"] = EvictionResult.BLOCKED
    # While node a's eviction is refused, another pod takes GPU 1 of node b.
    rig.api.on_evict = lambda name: cache.add_pod(
        parse_pod(make_pod("busy", gpus=1, node="b", gpu_indices="1", priority=5000))
    )
    assert await rig.attempt(parse_pod(pending_pod(gpus=2))) is None
    assert rig.api.evicted == ["va"], "vb's eviction would not make room any more"
    assert rig.reclaimer.stats.skips["stale_plan"] == 1


async def test_plan_is_revalidated_before_the_next_node(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = rig_two_nodes(monkeypatch)
    watch = PodWatch(_NoopHandler(), rig.reclaimer)
    rig.api.results["va"] = EvictionResult.BLOCKED
    rig.api.on_evict = lambda name: watch.on_delete(pending_pod())  # gone during node a
    assert await rig.attempt(PREEMPTOR) is None
    assert rig.api.evicted == ["va"], "node b must not be touched for a deleted preemptor"
    assert rig.cache.reservation(PREEMPTOR.key) is None
    assert rig.reclaimer.nominated_node(PREEMPTOR) is None


async def test_blocked_node_moves_on_to_the_next_when_still_valid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = rig_two_nodes(monkeypatch)
    rig.api.results["va"] = EvictionResult.BLOCKED
    assert await rig.attempt(PREEMPTOR) == "b"
    assert rig.api.evicted == ["va", "vb"]
    assert rig.reclaimer.nominated_node(PREEMPTOR) == "b"


# -- the nominated node first -------------------------------------------------------------------


async def test_next_cycle_chooses_the_nominated_node(monkeypatch: pytest.MonkeyPatch) -> None:
    # a: an idle victim on GPU 0; b: a protected pod (no reclaim policy) on GPU 0.
    cache = cluster(
        make_node("a", gpus=2, domains="0-1"),
        make_node("b", gpus=2, domains="0-1"),
        pods=[
            victim_pod("va", "a", gpu_indices="0"),
            make_pod("filler", gpus=1, node="b", gpu_indices="0", priority=9000),
        ],
    )
    rig = make_rig(monkeypatch, cache)
    preemptor = parse_pod(pending_pod(gpus=2))
    assert await rig.attempt(preemptor) == "a"
    # The victim leaves, and so does the pod on b: both nodes fit, in the same state (a tie).
    cache.remove_pod("default/va")
    cache.remove_pod("default/filler")
    framework = rig.reclaimer.framework
    chosen = set()
    for _ in range(20):  # the framework breaks ties at random (seeded)
        with cache.released(preemptor.key):
            evaluation = framework.evaluate(preemptor, Snapshot(cache))
        chosen.add(cache.names[evaluation.chosen])
    assert chosen == {"a"}
    # A pod of the same name but another UID gets no preference.
    stranger = parse_pod(pending_pod(uid="stranger", gpus=2))
    assert rig.reclaimer.nominated_node(stranger) is None


async def test_nominated_node_that_no_longer_fits_is_not_forced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = rig_two_nodes(monkeypatch)
    assert await rig.attempt(PREEMPTOR) == "a"
    rig.cache.drop_reservation(PREEMPTOR.key)  # a stays full: va is still counted
    rig.cache.remove_pod("default/vb")
    evaluation = rig.reclaimer.framework.evaluate(PREEMPTOR, Snapshot(rig.cache))
    assert rig.cache.names[evaluation.chosen] == "b"


async def test_nomination_lapses_with_the_reservation_and_on_binding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = rig_two_nodes(monkeypatch)
    assert await rig.attempt(PREEMPTOR) == "a"
    rig.clock[0] += rig.reclaimer.settings.reservation_seconds + 1
    assert rig.reclaimer.nominated_node(PREEMPTOR) is None
    rig.clock[0] -= rig.reclaimer.settings.reservation_seconds + 1
    PodWatch(_NoopHandler(), rig.reclaimer).on_update(
        pending_pod(), make_pod("preemptor", gpus=1, node="a", priority=1000)
    )
    assert rig.reclaimer.nominated_node(PREEMPTOR) is None


# -- PodDisruptionBudgets ---------------------------------------------------------------------


async def test_budget_guarded_node_is_tried_last(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = cluster(
        *two_full_nodes(),
        pods=[victim_pod("va", "a", labels={"app": "db"}), victim_pod("vb", "b")],
    )
    rig = make_rig(monkeypatch, cache)
    rig.pdbs.on_add(pdb("db", {"app": "db"}, allowed=0))
    assert await rig.attempt(PREEMPTOR) == "b"
    assert rig.api.evicted == ["vb"]
    (note,) = rig.recorder.notes("ReclaimIdleGPUs")
    assert "node b" in note and "PodDisruptionBudget" not in note


async def test_only_guarded_victims_are_tried_and_the_event_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(
        make_node("a", gpus=1, domains="0"), pods=[victim_pod("va", "a", labels={"app": "db"})]
    )
    rig = make_rig(monkeypatch, cache, mode="dry-run")
    rig.pdbs.on_add(pdb("db", {"app": "db"}, allowed=0))
    assert await rig.attempt(PREEMPTOR) == "a"
    (note,) = rig.recorder.notes("ReclaimIdleGPUs")
    assert "1 of them guarded by a PodDisruptionBudget" in note and "may be refused" in note


async def test_budget_with_room_does_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = cluster(
        *two_full_nodes(),
        pods=[victim_pod("va", "a", labels={"app": "db"}), victim_pod("vb", "b")],
    )
    rig = make_rig(monkeypatch, cache)
    rig.pdbs.on_add(pdb("db", {"app": "db"}, allowed=1))
    assert await rig.attempt(PREEMPTOR) == "a"


async def test_guarded_victims_are_evicted_first_on_their_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(
        make_node("a", gpus=2, domains="0-1"),
        pods=[
            victim_pod("free", "a", gpu_indices="0"),
            victim_pod("guarded", "a", gpu_indices="1", labels={"app": "db"}),
        ],
    )
    rig = make_rig(monkeypatch, cache)
    rig.pdbs.on_add(pdb("db", {"app": "db"}, allowed=0))
    rig.api.results["guarded"] = EvictionResult.BLOCKED
    assert await rig.attempt(parse_pod(pending_pod(gpus=2))) is None
    assert rig.api.evicted == ["guarded"], "the free victim is spared when the budget refuses"


# -- bad PriorityClasses and failed queries never block the others ------------------------------


async def test_bad_classes_are_reported_and_valid_victims_still_reclaimed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(
        make_node("a", gpus=3, domains="0-2"),
        pods=[
            victim_pod("huge", "a", klass="huge", gpu_indices="0"),
            victim_pod("forever", "a", klass="forever", gpu_indices="1"),
            victim_pod("ok", "a", gpu_indices="2"),
        ],
    )
    classes = {
        IDLE_CLASS: policy(),
        "huge": {**policy(), MINIMUM_PREEMPTABLE_PRIORITY: "9" * 5000},
        "forever": policy(window_s=10**30),
    }
    rig = make_rig(monkeypatch, cache, classes=classes)
    assert await rig.attempt(PREEMPTOR) == "a"
    assert rig.api.evicted == ["ok"]
    assert [w for w, _ in rig.usage.asked] == [60.0]
    invalid = rig.recorder.notes("InvalidReclaimPolicy")
    assert len(invalid) == 2
    assert any("PriorityClass huge" in n and "9" * 64 + "..." in n for n in invalid)
    assert any("PriorityClass forever" in n and "resource-idle-seconds" in n for n in invalid)
    assert all(len(n) < 400 for n in invalid)


async def test_one_failed_window_leaves_the_other_windows_usable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(
        make_node("a", gpus=1, domains="0"),
        make_node("b", gpus=1, domains="0"),
        pods=[victim_pod("va", "a", klass="long"), victim_pod("vb", "b")],
    )
    rig = make_rig(monkeypatch, cache, classes={IDLE_CLASS: policy(), "long": policy(7200)})
    rig.usage.fail[7200.0] = RuntimeError("bad_data: " + "x" * 5000)
    assert await rig.attempt(PREEMPTOR) == "b"
    assert rig.api.evicted == ["vb"]
    assert sorted(w for w, _ in rig.usage.asked) == [60.0, 7200.0]


async def test_every_window_failed_skips_with_a_short_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = rig_two_nodes(monkeypatch)
    rig.usage.fail[60.0] = RuntimeError("x" * 5000)
    assert await rig.attempt(PREEMPTOR) is None
    assert rig.api.evicted == []
    (note,) = rig.recorder.notes("ReclaimSkipped")
    assert note.startswith("reclaim skipped: Prometheus query failed") and len(note) < 300


def test_policy_store_never_raises_in_the_informer_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = rig_two_nodes(monkeypatch)
    bad = {"reclaim-idle-resource.scheduling.x-k8s.io/toleration-seconds": "1" * 5000}
    rig.policies.on_add(priority_class("bad", bad))
    rig.policies.on_update(
        priority_class("bad", bad), priority_class("bad", {"x": "y"}, version="2")
    )
    assert rig.policies.policy("bad").status.value == "none"
    missing_one = {k: v for k, v in policy().items() if not k.endswith("toleration-seconds")}
    rig.policies.on_add(priority_class("partial", missing_one))
    assert rig.policies.policy("partial").status.value == "invalid"


# -- cooldown memory ------------------------------------------------------------------------------


async def test_cooldowns_are_pruned_when_expired_deleted_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(make_node("a", gpus=0))
    rig = make_rig(monkeypatch, cache)
    reclaimer = rig.reclaimer
    for i in range(50):
        await rig.attempt(parse_pod(pending_pod(f"p{i}")))
    assert len(reclaimer._last_attempt) == 50
    PodWatch(_NoopHandler(), reclaimer).on_delete(pending_pod("p0"))
    assert "default/p0" not in reclaimer._last_attempt
    assert reclaimer.cooling_down("default/p1")
    rig.clock[0] += reclaimer.settings.cooldown_seconds
    await rig.attempt(parse_pod(pending_pod("late")))
    assert list(reclaimer._last_attempt) == ["default/late"]
    for i in range(MAX_TRACKED_PODS + 5):
        reclaimer._last_attempt[f"ns/x{i}"] = rig.clock[0]
    await rig.attempt(parse_pod(pending_pod("last")))
    assert len(reclaimer._last_attempt) <= MAX_TRACKED_PODS
    assert "default/last" in reclaimer._last_attempt


class _NoopHandler:
    def on_add(self, obj: object) -> None:
        pass

    def on_update(self, old: object, new: object) -> None:
        pass

    def on_delete(self, obj: object) -> None:
        pass


# -- what the PostFilter tells the usage source -------------------------------------------------


async def test_queries_carry_start_uid_and_scrape_interval_of_each_victim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without start and UID, a re-created victim would be judged on its predecessor's samples;
    without the scrape interval the sub-windows would assume the default."""
    cache = cluster(
        *two_full_nodes(),
        pods=[victim_pod("va", "a", uid="uid-a"), victim_pod("vb", "b", uid="uid-b")],
    )
    rig = make_rig(monkeypatch, cache)
    await rig.attempt(PREEMPTOR)
    assert rig.usage.options, "no usage query was made"
    options = rig.usage.options[0]
    assert options["uids"] == {("default", "va"): "uid-a", ("default", "vb"): "uid-b"}
    started = options["started_at"]
    assert set(started) == {("default", "va"), ("default", "vb")}
    assert all(isinstance(moment, float) and moment > 0 for moment in started.values())
    interval = rig.reclaimer.settings.scrape_interval_seconds
    assert options["scrape_interval_s"] == interval


async def test_room_taken_while_the_nomination_is_in_flight_evicts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plan held when it was checked; during the nomination another scheduler's pod took
    the free GPUs it counted on. Evicting the idle pod now would free room for nobody."""
    node = make_node("a", gpus=4, domains="0-1,2-3")
    cache = cluster(node, pods=[victim_pod("va", "a", gpus=2, gpu_indices="0,1")])
    rig = make_rig(monkeypatch, cache)
    rig.usage.gpus["va"] = 2
    intruder = parse_pod(make_pod("intruder", gpus=2, node="a", gpu_indices="2,3"))
    rig.api.on_nominate = lambda _node: rig.cache.add_pod(intruder)
    assert await rig.attempt(parse_pod(pending_pod(gpus=4))) is None
    assert rig.api.nominated == [("preemptor", "a")]
    assert rig.api.evicted == []
    assert rig.reclaimer.stats.skips["stale_plan"] == 1
