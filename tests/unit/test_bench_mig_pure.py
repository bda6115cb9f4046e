"""hack.bench.mig on small streams: every policy sees the same asks, placements never exceed them,
on one GPU the aware order places at least as many 3g/4g as first fit, on one node the node
choices change nothing, and the loss order ranks placements as computed by hand."""

from __future__ import annotations

import pytest

from hack.bench.mig import (
    FIRST_FIT,
    FRAGMENTATION_LOSS,
    FRAGMENTATION_NODES,
    GPU_SCHEDULER,
    POLICIES,
    RANDOM_NODE,
    MigNode,
    claim_for,
    figures,
    loss_candidates,
    main,
    node_pools,
    simulate,
)
from hack.fake_dcgm.identity import gpu_uuid
from hack.localcluster.dra_mig import MIG_CLASS, mig_device_class
from scheduler.dra.allocator import Allocator
from scheduler.dra.cel import CelSelectors
from scheduler.dra.domains import device_domains
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
    assert simulate(3, 2, 80, 0.3, FRAGMENTATION_NODES) == simulate(3, 2, 80, 0.3, GPU_SCHEDULER)
    # on one GPU the loss order is the allocator's own order
    assert simulate(3, 1, 80, 0.3, FRAGMENTATION_LOSS) == simulate(3, 1, 80, 0.3, GPU_SCHEDULER)


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
    nodes = []
    for name in ("a", "b"):
        pools = node_pools(1, name)
        nodes.append(MigNode(name, pools, device_domains({}, pools)))
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


def test_main_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "1", "--requests", "20"]) == 0
    out = capsys.readouterr().out
    assert "big placed" in out and "gpu-scheduler / first-fit" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["--seeds", "1", "--requests", "5", "--policies", "best"])
    assert exit_info.value.code == 2
    assert "unknown policy best" in capsys.readouterr().err
