"""Used-GPU masks, per-domain arrays and GPU choice inside a node."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology.domains import NodeTopology, TopologyError, default_domains, parse_domains
from topology.occupancy import (
    GPUS_ANNOTATION,
    NO_DOMAIN,
    GpuChoice,
    build_domain_arrays,
    choose_gpus,
    parse_gpus_annotation,
    used_mask,
)


def node(annotation: str, gpu_count: int) -> NodeTopology:
    return parse_domains(annotation, gpu_count)


def mask_of(gpu_count: int, used: tuple[int, ...]) -> np.ndarray:
    mask = np.zeros(gpu_count, dtype=np.bool_)  # mask: (gpus,)
    mask[list(used)] = True
    return mask


@pytest.mark.parametrize(
    ("value", "gpu_count", "expected"),
    [("0,1", 8, (0, 1)), (" 3 , 1", 4, (1, 3)), ("7", 8, (7,))],
)
def test_parse_gpus_annotation(value: str, gpu_count: int, expected: tuple[int, ...]) -> None:
    assert parse_gpus_annotation(value, gpu_count) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0,8", "GPU 8 is out of range (node has 8 GPUs)"),
        ("1,1", "GPU 1 is listed twice"),
        ("0-3", "'0-3' is not a GPU index"),
        ("", "'' is not a GPU index"),
        ("a", "'a' is not a GPU index"),
    ],
)
def test_parse_gpus_annotation_errors(value: str, problem: str) -> None:
    with pytest.raises(TopologyError) as caught:
        parse_gpus_annotation(value, 8)
    assert str(caught.value) == f'{GPUS_ANNOTATION} "{value}": {problem}'


@given(st.text(max_size=20), st.integers(0, 8))
def test_fuzz_gpus_annotation(value: str, gpu_count: int) -> None:
    try:
        gpus = parse_gpus_annotation(value, gpu_count)
    except TopologyError:
        return
    assert all(0 <= gpu < gpu_count for gpu in gpus)
    assert len(set(gpus)) == len(gpus)


QUADS = node("0-3,4-7", 8)


@pytest.mark.parametrize(
    ("annotated", "unannotated", "expected_used"),
    [
        ((), 0, ()),
        ((0, 5), 0, (0, 5)),
        ((0, 0, 5), 0, (0, 5)),
        # Most-used domain first: domain 1 has 3 free (< 4), so it fills first.
        ((4,), 2, (4, 5, 6)),
        ((4,), 5, (0, 1, 4, 5, 6, 7)),
        # Tie on free count: lowest domain index first.
        ((), 3, (0, 1, 2)),
        ((1, 5), 1, (0, 1, 5)),
        # More claimed than free: everything is in use.
        ((0,), 20, tuple(range(8))),
    ],
)
def test_used_mask_fill_order(
    annotated: tuple[int, ...], unannotated: int, expected_used: tuple[int, ...]
) -> None:
    mask = used_mask(QUADS, annotated, unannotated)
    assert tuple(int(g) for g in np.flatnonzero(mask)) == expected_used


def test_used_mask_fill_prefers_partly_used_small_domain() -> None:
    topology = node("0-1,2-5", 6)
    mask = used_mask(topology, (2, 3), 2)
    assert tuple(int(g) for g in np.flatnonzero(mask)) == (2, 3, 4, 5)


def test_used_mask_rejects_bad_input() -> None:
    with pytest.raises(TopologyError):
        used_mask(QUADS, (8,), 0)
    with pytest.raises(ValueError):
        used_mask(QUADS, (), -1)


def test_build_domain_arrays_pads() -> None:
    topologies = [node("0", 1), node("0-1,2-3", 4), QUADS, NodeTopology(0, ())]
    masks = [
        mask_of(1, ()),
        mask_of(4, (0,)),
        mask_of(8, (0, 1, 4)),
        mask_of(0, ()),
    ]
    free, size, count = build_domain_arrays(topologies, masks)
    np.testing.assert_array_equal(free, [[1, 0], [1, 2], [2, 3], [0, 0]])
    np.testing.assert_array_equal(size, [[1, 0], [2, 2], [4, 4], [0, 0]])
    np.testing.assert_array_equal(count, [1, 2, 2, 0])
    assert free.dtype == size.dtype == count.dtype == np.int32


def test_build_domain_arrays_empty_and_mismatch() -> None:
    free, size, count = build_domain_arrays([], [])
    assert free.shape == size.shape == (0, 0)
    assert count.shape == (0,)
    with pytest.raises(ValueError):
        build_domain_arrays([QUADS], [mask_of(4, ())])
    with pytest.raises(ValueError):
        build_domain_arrays([QUADS], [])


@pytest.mark.parametrize(
    ("annotation", "gpu_count", "used", "count", "expected"),
    [
        # Best fit: the domain with fewest free GPUs that still fits.
        ("0-3,4-7", 8, (4, 5), 2, GpuChoice(1, (6, 7))),
        ("0-3,4-7", 8, (4, 5), 3, GpuChoice(0, (0, 1, 2))),
        # Tie on free count: lowest domain index.
        ("0-3,4-7", 8, (), 1, GpuChoice(0, (0,))),
        # Tie on free count: a partly used larger domain before an untouched one.
        ("0-1,2-5", 6, (2, 3), 2, GpuChoice(1, (4, 5))),
        # Lowest-numbered free GPUs inside the domain.
        ("0-3,4-7", 8, (0, 2), 2, GpuChoice(0, (1, 3))),
        # Spanning: most-free domains whole, then best fit for the remainder.
        ("0-3,4-7", 8, (), 8, GpuChoice(NO_DOMAIN, tuple(range(8)))),
        ("0-1,2-3,4-7", 8, (4, 5, 6), 5, GpuChoice(NO_DOMAIN, (0, 1, 2, 3, 7))),
        ("0-3,4-5,6-7", 8, (6,), 5, GpuChoice(NO_DOMAIN, (0, 1, 2, 3, 7))),
        ("0-3,4-7", 8, (0, 1, 4, 5), 3, GpuChoice(NO_DOMAIN, (2, 3, 6))),
        # Not enough free GPUs.
        ("0-3,4-7", 8, (0,), 8, None),
    ],
)
def test_choose_gpus(
    annotation: str,
    gpu_count: int,
    used: tuple[int, ...],
    count: int,
    expected: GpuChoice | None,
) -> None:
    assert choose_gpus(node(annotation, gpu_count), mask_of(gpu_count, used), count) == expected


def test_choose_gpus_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        choose_gpus(QUADS, mask_of(8, ()), 0)
    with pytest.raises(ValueError):
        choose_gpus(QUADS, mask_of(4, ()), 1)


@st.composite
def occupied_nodes(draw: st.DrawFn) -> tuple[NodeTopology, np.ndarray]:
    """A node with 1..8 GPUs, any partition into domains, and any GPUs in use."""
    gpu_count = draw(st.integers(1, 8))
    labels = draw(st.lists(st.integers(0, 7), min_size=gpu_count, max_size=gpu_count))
    groups: dict[int, list[int]] = {}
    for gpu, label in enumerate(labels):
        groups.setdefault(label, []).append(gpu)
    domains = tuple(sorted(tuple(members) for members in groups.values()))
    used = draw(st.lists(st.booleans(), min_size=gpu_count, max_size=gpu_count))
    return NodeTopology(gpu_count, domains), np.array(used, dtype=np.bool_)


@given(occupied_nodes(), st.integers(1, 8))
def test_choose_gpus_invariants(state: tuple[NodeTopology, np.ndarray], count: int) -> None:
    topology, mask = state
    choice = choose_gpus(topology, mask, count)
    free_gpus = set(int(g) for g in np.flatnonzero(~mask))
    free = [sum(1 for g in domain if g in free_gpus) for domain in topology.domains]
    if len(free_gpus) < count:
        assert choice is None
        return
    assert choice is not None
    assert len(choice.gpus) == count == len(set(choice.gpus))
    assert set(choice.gpus) <= free_gpus
    assert list(choice.gpus) == sorted(choice.gpus)
    spanned = {topology.domain_of(g) for g in choice.gpus}
    if max(free) >= count:
        assert spanned == {choice.domain}
        assert free[choice.domain] == min(f for f in free if f >= count)
    else:
        assert choice.domain == NO_DOMAIN
        fewest = next(
            m for m in range(1, len(free) + 1) if sum(sorted(free, reverse=True)[:m]) >= count
        )
        assert len(spanned) == fewest


@given(st.integers(0, 16), st.integers(0, 20))
def test_default_topology_masks_count(gpu_count: int, unannotated: int) -> None:
    mask = used_mask(default_domains(gpu_count), (), unannotated)
    assert int(mask.sum()) == min(gpu_count, unannotated)
