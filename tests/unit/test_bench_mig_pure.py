"""hack.bench.mig on small streams: every policy sees the same asks, placements never exceed them,
on one GPU the aware order places at least as many 3g/4g as first fit, on one node the node
choices change nothing and gpu-scheduler's order is the loss order, the earlier order is
applied as the daemon had it, and the loss order ranks placements as computed by hand."""

from __future__ import annotations

import pytest

from hack.bench.mig import (
    FIRST_FIT,
    FRAGMENTATION_LOSS,
    GPU_SCHEDULER,
    LARGEST_AFTER,
    POLICIES,
    RANDOM_NODE,
    claim_for,
    figures,
    largest_after_candidates,
    loss_candidates,
    main,
    mig_node,
    simulate,
)
from hack.fake_dcgm.identity import gpu_uuid
from hack.localcluster.dra_mig import MIG_CLASS, mig_device_class
from scheduler.dra.allocator import Allocator
from scheduler.dra.cel import CelSelectors
from scheduler.model.device_classes import parse_device_class


def test_small_stream() -> None:
    aware = simulate(0, 1, 60, 0.45, GPU_SCHEDULER)
    first = simulate(0, 1, 60, 0.45, FIRST_FIT)
    assert aware.steps == first.steps == 60
    for tally in (aware, first):
        assert 0 < tally.placed <= tally.asks
        assert tally.big_placed <= tally.big_asks <= tally.asks
        assert 0 <= figures(tally)["largest"] <= 8
    assert aware.big_placed >= first.big_placed


def test_on_one_node_the_node_choice_changes_nothing() -> None:
    assert simulate(3, 2, 80, 0.3, RANDOM_NODE) == simulate(3, 2, 80, 0.3, FIRST_FIT)
    # on one node the loss order over all GPUs is the allocator's own order
    assert simulate(3, 2, 80, 0.3, FRAGMENTATION_LOSS) == simulate(3, 2, 80, 0.3, GPU_SCHEDULER)
    # on one GPU every placement has the same "before": the earlier order chose alike
    assert simulate(3, 1, 80, 0.3, LARGEST_AFTER) == simulate(3, 1, 80, 0.3, GPU_SCHEDULER)


def test_every_policy_on_several_nodes() -> None:
    for policy in POLICIES:
        tally = simulate(1, 1, 40, 0.3, policy, nodes=3)
        assert tally.steps == 40 and 0 < tally.placed <= tally.asks, policy
        assert 0 <= figures(tally)["4g GPUs"] <= 3, policy


def test_loss_order_by_hand() -> None:
    """Node a holds a 1g at slice 0 of its GPU; node b is untouched. A 1g at a's slice 1 loses
    nothing (the 3g at slice 4 stays possible) and leaves the longest run (slices 2-7); any
    placement on b breaks a whole GPU (from 8 slices to 4)."""
    classes = {MIG_CLASS: parse_device_class(mig_device_class())}
    nodes = [mig_node(name, 1) for name in ("a", "b")]
    claim = claim_for("1g.18gb", 0, (gpu_uuid("a", 0), 0))
    outcome = Allocator(classes, frozenset(), CelSelectors()).allocate(
        "a", {}, nodes[0].pools, [claim], None
    )
    assert outcome.allocations is not None
    nodes[0].held[0] = outcome.allocations[0]
    ranked = [(node.name, gpu, start) for node, gpu, start in loss_candidates(nodes, "1g.18gb", 1)]
    assert ranked[:3] == [("a", 0, 1), ("a", 0, 2), ("a", 0, 3)]
    assert ranked[-1][0] == "b"
    assert ("a", 0, 0) not in ranked


def test_the_earlier_order_by_hand() -> None:
    """GPU 0 holds a 1g at slice 6 (a 4g still possible), GPU 1 a 1g at slice 0 (a 3g at 4
    still possible). The earlier order puts the next 1g where the most is left after it: GPU
    0 beside its 1g (the 4g stays); the loss order puts it on GPU 1 (nothing lost either, and
    GPU 1 is the more fragmented), keeping GPU 0's 4g for a 4g."""
    classes = {MIG_CLASS: parse_device_class(mig_device_class())}
    node = mig_node("a", 2)
    for index, where in enumerate(((0, 6), (1, 0))):
        claim = claim_for("1g.18gb", index, (gpu_uuid("a", where[0]), where[1]))
        outcome = Allocator(classes, node.taken(), CelSelectors()).allocate(
            "a", {}, node.pools, [claim], None
        )
        assert outcome.allocations is not None
        node.held[index] = outcome.allocations[0]
    assert largest_after_candidates(node, "1g.18gb", 2)[0] == (0, 5)
    _, gpu, start = loss_candidates([node], "1g.18gb", 2)[0]
    assert (gpu, start) == (1, 1)


def test_main_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "1", "--requests", "20"]) == 0
    out = capsys.readouterr().out
    assert "big placed" in out and "gpu-scheduler / first-fit" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["--seeds", "1", "--requests", "5", "--policies", "best"])
    assert exit_info.value.code == 2
    assert "unknown policy best" in capsys.readouterr().err
