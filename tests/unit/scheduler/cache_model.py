"""Random operation sequences on a ClusterCache and a from-scratch recount to compare with."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from scheduler.framework.snapshot import Snapshot
from scheduler.model.resources import GPU
from scheduler.state.cache import ClusterCache
from tests.unit.scheduler.builders import node_info, pod_info
from topology.occupancy import choose_gpus

NODE_GPUS = {"n0": 8, "n1": 4, "n2": 2, "n3": 0}
NODE_DOMAINS = {"n0": "0-3,4-7", "n1": "0-1,2-3", "n2": None, "n3": None}
POD_NAMES = [f"p{i}" for i in range(4)]


@dataclass(frozen=True)
class Op:
    kind: str
    pod: str = ""
    node: str = ""
    gpus: int = 0
    indices: tuple[int, ...] | None = None


def ops(min_size: int = 3, max_size: int = 50) -> st.SearchStrategy[list[Op]]:
    nodes = st.sampled_from(sorted(NODE_GPUS))
    pods = st.sampled_from(POD_NAMES)
    indices = st.none() | st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True).map(
        lambda xs: tuple(sorted(xs))
    )
    one = st.one_of(
        st.builds(Op, st.just("add_node"), node=nodes),
        st.builds(Op, st.just("remove_node"), node=nodes),
        st.builds(
            Op, st.just("add_pod"), pod=pods, node=nodes, gpus=st.integers(0, 4), indices=indices
        ),
        st.builds(Op, st.just("finish_pod"), pod=pods),
        st.builds(Op, st.just("remove_pod"), pod=pods),
        st.builds(Op, st.just("assume"), pod=pods, node=nodes, gpus=st.integers(0, 4)),
        st.builds(Op, st.just("forget"), pod=pods),
        st.builds(Op, st.just("confirm"), pod=pods),
    )
    return st.lists(one, min_size=min_size, max_size=max_size)


def gpus_claimed(cache: ClusterCache, node: str, skip: str = "") -> int:
    """GPUs requested by the pods counted on `node` (known or not), except `skip`."""
    return sum(
        state.info.gpus for key, state in cache.pods.items() if state.node == node and key != skip
    )


def apply(cache: ClusterCache, op: Op, overcommit: bool) -> None:
    """Apply `op`. With `overcommit` False, pods that would not fit their node's GPUs are
    skipped and an update of a counted pod keeps its GPU count (GPU requests are immutable);
    with True, both happen as generated."""
    key = f"default/{op.pod}"
    known = cache.pods.get(key)
    if not overcommit and known is not None and op.kind == "add_pod":
        op = dataclasses.replace(op, gpus=known.info.gpus)

    def fits() -> bool:
        return overcommit or gpus_claimed(cache, op.node, skip=key) + op.gpus <= NODE_GPUS[op.node]

    if op.kind == "add_node":
        gpus = NODE_GPUS[op.node]
        cache.add_or_update_node(node_info(op.node, gpus=gpus, domains=NODE_DOMAINS[op.node]))
    elif op.kind == "remove_node":
        cache.remove_node(op.node)
    elif op.kind == "add_pod":
        existing = cache.pods.get(key)
        if existing is not None and existing.assumed:
            return
        if not fits():
            return
        annotation = None if op.indices is None else ",".join(map(str, op.indices))
        cache.add_pod(pod_info(op.pod, gpus=op.gpus, node=op.node, gpu_indices=annotation))
    elif op.kind == "finish_pod":
        state = cache.pods.get(key)
        if state is not None:
            info = dataclasses.replace(state.info, phase="Succeeded", node_name=state.node)
            cache.add_pod(info)
    elif op.kind == "remove_pod":
        cache.remove_pod(key)
    elif op.kind == "assume":
        if key in cache.pods or not fits():
            return
        gpus: tuple[int, ...] = ()
        if op.gpus and op.node in cache.row_of:
            choice = choose_gpus(
                cache.nodes[op.node].topology, cache.node_gpus_used(op.node), op.gpus
            )
            gpus = choice.gpus if choice is not None else ()
        cache.assume(pod_info(op.pod, gpus=op.gpus), op.node, gpus)
    elif op.kind == "forget":
        cache.forget(key)
    elif op.kind == "confirm":
        state = cache.pods.get(key)
        if state is not None and state.assumed:
            cache.add_pod(dataclasses.replace(state.info, node_name=state.node))
    else:  # pragma: no cover
        raise AssertionError(op.kind)


def rebuilt(cache: ClusterCache) -> ClusterCache:
    """A fresh cache with the same nodes and every pod of `cache` added as bound."""
    fresh = ClusterCache()
    for name in sorted(cache.row_of):
        fresh.add_or_update_node(cache.nodes[name])
    for state in cache.pods.values():
        fresh.add_pod(dataclasses.replace(state.info, node_name=state.node, phase="Running"))
    return fresh


def check_consistent(cache: ClusterCache) -> None:
    """Per-node usage equals a recount from scratch; domain arrays agree with the GPU mask."""
    fresh = rebuilt(cache)
    snap = Snapshot(cache)
    for name, row in cache.row_of.items():
        frow = fresh.row_of[name]
        topology = cache.nodes[name].topology
        width = topology.domain_count
        assert cache.valid[row]
        assert list(cache.requested[row]) == list(fresh.requested[frow]), name
        used = int(cache.gpu_used[row].sum())
        assert used == int(fresh.gpu_used[frow].sum()), name
        assert list(cache.domain_size[row, :width]) == list(topology.domain_sizes), name
        assert not cache.domain_size[row, width:].any()
        assert int(cache.free_per_domain[row].sum()) == int(fresh.free_per_domain[frow].sum())
        ids = np.asarray(topology.gpu_domain_ids(), dtype=np.int64)
        free_mask = ~cache.gpu_used[row, : topology.gpu_count]
        expected = np.bincount(ids[free_mask], minlength=width)
        assert list(cache.free_per_domain[row, :width]) == list(expected), name
        assert int(snap.free_per_domain[row].sum()) == int(snap.gpu_total[row] - snap.gpu_used[row])
        # A node without GPU allocatable counts no GPU of its pods: DRA claims hold them.
        claimed = gpus_claimed(cache, name) if cache.allocatable[row, GPU] else 0
        assert int(cache.requested[row, GPU]) == claimed
        states = snap.gpu_state_arrays()
        state = int(snap.gpu_state[row])
        assert list(states.free[state, :width]) == list(cache.free_per_domain[row, :width])
        assert list(states.size[state, :width]) == list(cache.domain_size[row, :width])
        assert not states.size[state, width:].any()
        assert int(states.total[state]) == int(snap.gpu_total[row])
        assert int(states.used[state]) == int(snap.gpu_used[row])
    assert int(snap.valid.sum()) == len(cache.row_of)
