"""VolumeBinding on plain data: the PreFilter messages, the vectorized filter, the plan for the
chosen node, and the cycle's PreBind writes (their failure forgets and requeues the pod)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import parse_pod
from scheduler.model.volumes import ClaimHandler, ClassHandler, Volume, VolumeHandler, match_claims
from scheduler.plugins.volume_binding import (
    BIND_CONFLICT,
    NAME,
    NODE_CONFLICT,
    PV_NOT_EXIST,
    READ_WRITE_ONCE_POD_CONFLICT,
    UNBOUND_IMMEDIATE,
    VolumeBinding,
    plan_volumes,
    pre_filter,
)
from scheduler.state.cache import ClusterCache
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.core_api_double import FakeCoreV1, FakeResponse, Outcome, answer, harness
from tests.volume_objects import make_claim, make_class, make_volume, with_claims


def with_objects(cache: ClusterCache, *objects: dict[str, Any]) -> ClusterCache:
    handlers = {
        "PersistentVolumeClaim": ClaimHandler(cache.volumes),
        "PersistentVolume": VolumeHandler(cache.volumes),
        "StorageClass": ClassHandler(cache.volumes),
    }
    for obj in objects:
        handlers[obj["kind"]].on_add(obj)
    return cache


def nodes(*names: str) -> ClusterCache:
    return cluster(*(make_node(n) for n in names))


def pod(*claims: str, name: str = "p") -> Any:
    return parse_pod(with_claims(make_pod(name), *claims))


def rejected(cache: ClusterCache, *claims: str) -> dict[str, list[str]]:
    """Reason -> names of the nodes it rejects."""
    snapshot = Snapshot(cache)
    found = VolumeBinding().filter(pod(*claims), snapshot, CycleState())
    return {r.reason: [snapshot.names[i] for i in np.flatnonzero(r.failed)] for r in found}


# -- PreFilter ----------------------------------------------------------------------------------


def test_pre_filter_messages() -> None:
    cache = with_objects(
        nodes("n1"),
        make_class("wait"),
        make_class("now", wait_for_first_consumer=False),
        make_claim("immediate", "now"),
        make_claim("no-class", None),
        make_claim("missing-class", "gone"),
        make_claim("prebound", "wait", volume_name="pv"),
        make_claim("waiting", "wait"),
    )
    store = cache
    assert pre_filter(pod("absent"), store) == 'persistentvolumeclaim "absent" not found'
    for name in ("immediate", "no-class", "missing-class", "prebound"):
        assert pre_filter(pod("waiting", name), store) == UNBOUND_IMMEDIATE, name
    assert pre_filter(pod("waiting"), store) == ""
    assert pre_filter(parse_pod(make_pod("plain")), store) == ""
    long_name = "x" * 5000
    assert len(pre_filter(pod(long_name), store)) < 200


def test_a_read_write_once_pod_claim_in_use_by_another_pod() -> None:
    cache = with_objects(
        nodes("n1"),
        make_class("local"),
        make_volume("pv", "local", node="n1", phase="Bound"),
        make_volume("shared", "local", node="n1", phase="Bound"),
        make_claim("solo", "local", volume_name="pv", bind_completed=True,
                   access_modes=["ReadWriteOncePod"]),
        make_claim("rwo", "local", volume_name="shared", bind_completed=True),
    )  # fmt: skip
    assert pre_filter(pod("solo"), cache) == ""
    cache.add_pod(parse_pod(with_claims(make_pod("holder", node="n1"), "solo", "rwo")))
    assert pre_filter(pod("solo"), cache) == READ_WRITE_ONCE_POD_CONFLICT
    assert pre_filter(pod("rwo"), cache) == ""
    other_namespace = parse_pod(with_claims(make_pod("p", namespace="other"), "solo"))
    assert pre_filter(other_namespace, cache) == 'persistentvolumeclaim "solo" not found'


def test_a_pod_without_claims_is_skipped() -> None:
    assert VolumeBinding().filter(parse_pod(make_pod()), Snapshot(nodes("n1")), CycleState()) == []


# -- bound claims -------------------------------------------------------------------------------


def test_a_bound_claim_keeps_the_pod_on_its_volumes_node() -> None:
    cache = with_objects(
        nodes("n1", "n2", "n3"),
        make_volume("pv", "local", node="n2", phase="Bound", claim=("default", "data")),
        make_claim("data", "local", volume_name="pv", bind_completed=True),
    )
    assert rejected(cache, "data") == {NODE_CONFLICT: ["n1", "n3"]}


def test_a_claim_bound_to_a_missing_volume_rejects_every_node() -> None:
    cache = with_objects(
        nodes("n1", "n2"), make_claim("data", "local", volume_name="gone", bind_completed=True)
    )
    assert rejected(cache, "data") == {PV_NOT_EXIST: ["n1", "n2"]}


def test_a_volume_without_node_affinity_fits_every_node() -> None:
    cache = with_objects(
        nodes("n1", "n2"),
        make_volume("pv", "local", node=None, phase="Bound"),
        make_claim("data", "local", volume_name="pv", bind_completed=True),
    )
    assert rejected(cache, "data") == {}


# -- unbound WaitForFirstConsumer claims -----------------------------------------------------


def test_an_unbound_claim_fits_nodes_with_an_available_volume() -> None:
    cache = with_objects(
        nodes("n1", "n2", "n3"),
        make_class("local"),
        make_volume("pv-n2", "local", node="n2"),
        make_volume("pv-n3-small", "local", node="n3", capacity="1Mi"),
        make_claim("data", "local"),
    )
    assert rejected(cache, "data") == {BIND_CONFLICT: ["n1", "n3"]}


def test_two_claims_need_two_volumes_on_the_node() -> None:
    cache = with_objects(
        nodes("n1", "n2"),
        make_class("local"),
        make_volume("a1", "local", node="n1"),
        make_volume("a2", "local", node="n1"),
        make_volume("b1", "local", node="n2"),
        make_claim("x", "local"),
        make_claim("y", "local"),
    )
    assert rejected(cache, "x", "y") == {BIND_CONFLICT: ["n2"]}
    assert rejected(cache, "x") == {}


def test_dynamic_provisioning_follows_allowed_topologies() -> None:
    cache = with_objects(
        cluster(
            make_node("a", labels={"zone": "z1"}),
            make_node("b", labels={"zone": "z2"}),
            make_node("c"),
        ),
        make_class("csi", provisioner="csi.example.com", allowed_topologies=[("zone", ["z1"])]),
        make_class("any", provisioner="csi.example.com"),
        make_claim("zoned", "csi"),
        make_claim("anywhere", "any"),
    )
    assert rejected(cache, "zoned") == {BIND_CONFLICT: ["b", "c"]}
    assert rejected(cache, "anywhere") == {}


def test_the_plan_names_the_chosen_nodes_volume_and_the_claims_to_provision() -> None:
    cache = with_objects(
        nodes("n1", "n2"),
        make_class("local"),
        make_class("csi", provisioner="csi.example.com"),
        make_volume("big", "local", node="n2", capacity="10Gi"),
        make_volume("fit", "local", node="n2", capacity="2Gi"),
        make_volume("elsewhere", "local", node="n1"),
        make_claim("data", "local", request="2Gi"),
        make_claim("scratch", "csi"),
    )
    snapshot, state = Snapshot(cache), CycleState()
    the_pod = pod("data", "scratch")
    [rejection] = VolumeBinding().filter(the_pod, snapshot, state)
    assert rejection.failed.tolist() == [True, False]  # "elsewhere" (1Gi) is too small
    plan = plan_volumes(state, cache.row_of["n2"], "n2", the_pod)
    assert plan is not None
    assert [(c.name, v.name) for c, v in plan.bindings] == [("data", "fit")]
    assert [c.name for c in plan.provisions] == ["scratch"]
    assert NAME in state.data


# -- the cycle: assume, PreBind, Binding ------------------------------------------------------


@dataclass
class VolumeCore(FakeCoreV1):
    """FakeCoreV1 plus the PreBind patches."""

    volume_outcomes: list[Outcome] = field(default_factory=list)
    volume_gate: asyncio.Event | None = None
    volume_patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    claim_patches: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    async def patch_persistent_volume(
        self, name: str, body: dict[str, Any], **_: Any
    ) -> FakeResponse:
        self.volume_patches.append((name, body))
        return await answer(self.volume_outcomes, self.volume_gate, 200)

    async def patch_namespaced_persistent_volume_claim(
        self, name: str, namespace: str, body: dict[str, Any], **_: Any
    ) -> FakeResponse:
        self.claim_patches.append((namespace, name, body))
        return await answer([], None, 200)


def volume_harness(cache: ClusterCache) -> tuple[Any, VolumeCore]:
    h = harness(cache)
    core = VolumeCore()
    h.scheduler.core = core  # type: ignore[assignment]
    h.core = core
    return h, core


async def test_prebind_writes_the_claim_ref_before_the_binding() -> None:
    cache = with_objects(
        nodes("n1", "n2"),
        make_class("local"),
        make_volume("pv", "local", node="n2", version="7"),
        make_claim("data", "local", version="3"),
    )
    h, core = volume_harness(cache)
    h.add(pod("data"))
    await h.cycle()
    assert h.scheduler.bound == 1
    assert core.bindings[0]["target"]["name"] == "n2"
    [(name, body)] = core.volume_patches
    assert name == "pv"
    assert body["metadata"]["resourceVersion"] == "7"  # the precondition
    assert body["metadata"]["annotations"] == {"pv.kubernetes.io/bound-by-controller": "yes"}
    ref = body["spec"]["claimRef"]
    assert (ref["namespace"], ref["name"], ref["uid"]) == ("default", "data", "uid-data")
    # Until the informer shows the write, the store shows the PV taken by that claim.
    assumed = cache.volumes.volume("pv")
    assert assumed is not None and assumed.claim_ref is not None
    assert assumed.claim_ref.name == "data"


async def test_a_volume_taken_in_one_cycle_is_not_offered_in_the_next() -> None:
    cache = with_objects(
        nodes("n1"),
        make_class("local"),
        make_volume("only", "local", node="n1"),
        make_claim("a", "local"),
        make_claim("b", "local"),
    )
    h, core = volume_harness(cache)
    h.add(pod("a", name="first"))
    h.add(pod("b", name="second"))
    await h.cycle()
    await h.cycle()
    assert h.scheduler.bound == 1
    assert [name for name, _ in core.volume_patches] == ["only"]
    assert h.queue.pools()["unschedulable"] == 1
    assert h.core.condition_messages() == [f"0/1 nodes are available: 1 {BIND_CONFLICT}."]


async def test_dynamic_provisioning_marks_the_claim_with_the_node() -> None:
    cache = with_objects(
        nodes("n1"),
        make_class("csi", provisioner="csi.example.com"),
        make_claim("scratch", "csi", version="4"),
    )
    h, core = volume_harness(cache)
    h.add(pod("scratch"))
    await h.cycle()
    assert h.scheduler.bound == 1
    [(namespace, name, body)] = core.claim_patches
    assert (namespace, name) == ("default", "scratch")
    assert body["metadata"] == {
        "resourceVersion": "4",
        "annotations": {"volume.kubernetes.io/selected-node": "n1"},
    }


async def test_a_failed_prebind_forgets_the_pod_and_gives_the_volume_back() -> None:
    cache = with_objects(
        nodes("n1"), make_class("local"), make_volume("pv", "local", node="n1"),
        make_claim("data", "local"),
    )  # fmt: skip
    h, core = volume_harness(cache)
    core.volume_outcomes = [(409, "the object has been modified")]
    h.add(pod("data"))
    await h.cycle()
    assert h.scheduler.bound == 0
    assert core.bindings == []  # never bound with half-written volumes
    assert "default/p" not in cache.pods  # forgotten
    assert h.queue.pools()["backoff"] == 1
    assert cache.volumes.volume("pv") == cache.volumes.volumes["pv"]  # assumption reverted
    notes = [b["note"] for b in h.events.bodies if b["reason"] == "FailedScheduling"]
    assert len(notes) == 1 and "pre-binding persistentvolume pv" in notes[0]
    # The retry (after its backoff) succeeds.
    h.after_backoff(1)
    await h.cycle()
    assert h.scheduler.bound == 1


async def test_a_missing_claim_is_unschedulable_until_it_appears() -> None:
    cache = with_objects(nodes("n1"), make_class("local"), make_volume("pv", "local", node="n1"))
    h, _ = volume_harness(cache)
    handler = ClaimHandler(cache.volumes, h.queue)
    h.add(pod("data"))
    await h.cycle()
    message = '0/1 nodes are available: persistentvolumeclaim "data" not found.'
    assert h.core.condition_messages() == [message]
    assert [b["note"] for b in h.events.bodies] == [message]
    assert h.queue.pools()["unschedulable"] == 1
    handler.on_add(make_claim("data", "local"))
    assert h.queue.pools()["unschedulable"] == 0
    h.after_backoff(1)
    await h.cycle()
    assert h.scheduler.bound == 1


async def test_a_failed_prebind_retries_the_pods_its_volume_turned_away() -> None:
    cache = with_objects(
        nodes("n1"), make_class("local"), make_volume("only", "local", node="n1"),
        make_claim("a", "local"), make_claim("b", "local"),
    )  # fmt: skip
    h, core = volume_harness(cache)
    core.volume_gate = asyncio.Event()
    core.volume_outcomes = [(409, "the object has been modified")]
    h.add(pod("a", name="first"))
    h.add(pod("b", name="second"))
    for _ in range(2):  # both cycles run before the first pod's PreBind answers
        queued = h.queue.pop_nowait()
        assert queued is not None
        h.scheduler.schedule_one(queued)
    assert h.queue.pools()["unschedulable"] == 1  # "only" was assumed taken
    core.volume_gate.set()
    await h.settle()
    assert h.queue.pools()["unschedulable"] == 0
    assert h.queue.moves["VolumeBindingReverted"] == 1


# -- the grouped, sparse filter against a plain loop over nodes ------------------------------


def brute_force(cache: ClusterCache, claims: list[str]) -> list[bool]:
    """Per node, in Python: `match_claims` over every PV of the class, then provisioning."""
    store = cache.volumes
    found = [store.claim("default", name) for name in claims]
    wanted = [c for c in found if c is not None]
    result = []
    for name in cache.names:
        labels = cache.nodes[name].labels

        def fits(volume: Volume, labels: Mapping[str, str] = labels) -> bool:
            if volume.node_terms is None:
                return True
            return any(
                all(labels.get(r.key) in r.values for r in term.expressions)
                for term in volume.node_terms
            )

        _, left = match_claims(wanted, lambda c: store.volumes_of_class(c.class_name), fits)
        ok = True
        for claim in left:
            storage_class = store.classes.get(claim.class_name)
            ok &= storage_class is not None and storage_class.provisions
            if ok and storage_class is not None and storage_class.allowed_topologies:
                ok = any(
                    all(labels.get(r.key) in r.values for r in term.expressions)
                    for term in storage_class.allowed_topologies
                )
        result.append(ok)
    return result


def test_the_filter_agrees_with_a_loop_over_nodes() -> None:
    rng = random.Random(7)
    for trial in range(60):
        names = [f"n{i}" for i in range(rng.randint(1, 7))]
        node_list = [make_node(n, labels={"zone": rng.choice("ab")}) for n in names]
        objects: list[dict[str, Any]] = [
            make_class("local"),
            make_class("csi", provisioner="csi.example.com", allowed_topologies=[("zone", ["a"])]),
        ]
        claims = [f"c{i}" for i in range(rng.randint(1, 3))]
        for claim in claims:
            cls = "csi" if rng.random() < 0.2 else "local"
            objects.append(make_claim(claim, cls, request=f"{rng.randint(1, 3)}Gi"))
        for index in range(rng.randint(0, 8)):
            prebound = ("default", rng.choice(claims)) if rng.random() < 0.15 else None
            objects.append(
                make_volume(
                    f"pv{index}",
                    "local",
                    capacity=f"{rng.randint(1, 4)}Gi",
                    node=rng.choice([*names, None]),
                    phase=rng.choice(["Available", "Available", "Bound"]),
                    claim=prebound,
                )
            )
        cache = with_objects(cluster(*node_list), *objects)
        failed = np.zeros(cache.rows, dtype=bool)
        for rejection in VolumeBinding().filter(pod(*claims), Snapshot(cache), CycleState()):
            failed |= rejection.failed
        assert (~failed).tolist() == brute_force(cache, claims), f"trial {trial}"
