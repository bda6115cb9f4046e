"""NVLink-domain annotation: parsing, validation, defaults, fallback and formatting."""

from __future__ import annotations

import contextlib
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology.domains import (
    NVLINK_DOMAINS_ANNOTATION,
    DomainSource,
    NodeTopology,
    TopologyError,
    default_domains,
    domains_for_node,
    format_domains,
    parse_domains,
)


def runs(*bounds: tuple[int, int]) -> tuple[tuple[int, ...], ...]:
    """Domains from inclusive (first, last) pairs."""
    return tuple(tuple(range(first, last + 1)) for first, last in bounds)


@pytest.mark.parametrize(
    ("annotation", "gpu_count", "expected"),
    [
        ("0", 1, runs((0, 0))),
        ("0-1", 2, runs((0, 1))),
        ("0-1,2-3", 4, runs((0, 1), (2, 3))),
        ("0-3,4-7", 8, runs((0, 3), (4, 7))),
        ("0-7", 8, runs((0, 7))),
        (" 0 - 3 ,\t4-7 ", 8, runs((0, 3), (4, 7))),
        ("4-7,0-3", 8, runs((0, 3), (4, 7))),
        ("5,0-4,6-7", 8, runs((0, 4), (5, 5), (6, 7))),
        ("0,1,2,3", 4, runs((0, 0), (1, 1), (2, 2), (3, 3))),
        ("", 0, ()),
    ],
)
def test_parse_valid(
    annotation: str, gpu_count: int, expected: tuple[tuple[int, ...], ...]
) -> None:
    assert parse_domains(annotation, gpu_count) == NodeTopology(gpu_count, expected)


@pytest.mark.parametrize(
    ("annotation", "gpu_count", "problem"),
    [
        ("0-3,3-7", 8, "GPU 3 is in two domains"),
        ("0-3,2", 4, "GPU 2 is in two domains"),
        ("0-3", 8, "GPUs 4-7 are in no domain (node has 8 GPUs)"),
        ("0,2", 3, "GPU 1 is in no domain (node has 3 GPUs)"),
        ("0-8", 8, "GPU 8 is out of range (node has 8 GPUs, 0..7)"),
        ("0-1,2-3", 2, "GPU 2 is out of range (node has 2 GPUs, 0..1)"),
        ("3-1", 4, "range 3-1 is descending"),
        ("a", 2, 'group "a" is not an index or a range like 0-3'),
        ("0,,1", 2, "empty group is not an index or a range like 0-3"),
        ("0-1,", 2, "empty group is not an index or a range like 0-3"),
        ("-1", 2, 'group "-1" is not an index or a range like 0-3'),
        ("0-1-2", 4, 'group "0-1-2" is not an index or a range like 0-3'),
        ("0 1", 2, 'group "0 1" is not an index or a range like 0-3'),
        ("  ", 2, "no domains listed for a node with 2 GPUs"),
        ("0", 0, "GPU 0 is out of range (node has 0 GPUs)"),
        ("9999999", 8, 'group "9999999" is not an index or a range like 0-3'),
    ],
)
def test_parse_invalid_names_key_value_and_problem(
    annotation: str, gpu_count: int, problem: str
) -> None:
    with pytest.raises(TopologyError) as caught:
        parse_domains(annotation, gpu_count)
    assert str(caught.value) == f'{NVLINK_DOMAINS_ANNOTATION} "{annotation}": {problem}'


def test_error_message_reads_key_value_problem() -> None:
    with pytest.raises(
        TopologyError, match=r"^gpu-scheduler\.io/nvlink-domains \"0-3,3-7\": GPU 3"
    ):
        parse_domains("0-3,3-7", 8)


def test_topology_error_is_a_value_error() -> None:
    assert issubclass(TopologyError, ValueError)


@pytest.mark.parametrize(
    ("gpu_count", "expected"),
    [
        (0, ""),
        (1, "0"),
        (2, "0-1"),
        (3, "0-2"),
        (4, "0-1,2-3"),
        (5, "0-4"),
        (6, "0-5"),
        (7, "0-6"),
        (8, "0-3,4-7"),
        (9, "0-8"),
        (10, "0-4,5-9"),
        (16, "0-7,8-15"),
    ],
)
def test_default_domains(gpu_count: int, expected: str) -> None:
    assert format_domains(default_domains(gpu_count).domains) == expected
    assert default_domains(gpu_count).gpu_count == gpu_count


def test_domains_for_node_absent_uses_default_without_error() -> None:
    for annotation in (None, "", "  "):
        result = domains_for_node(annotation, 8)
        assert result.topology == default_domains(8)
        assert result.source is DomainSource.DEFAULT
        assert result.error is None


def test_domains_for_node_valid_annotation() -> None:
    result = domains_for_node("0-7", 8)
    assert result.topology == NodeTopology(8, runs((0, 7)))
    assert result.source is DomainSource.ANNOTATION
    assert result.error is None


def test_domains_for_node_malformed_falls_back_and_reports() -> None:
    result = domains_for_node("0-3,3-7", 8)
    assert result.topology == default_domains(8)
    assert result.source is DomainSource.DEFAULT
    assert result.error == f'{NVLINK_DOMAINS_ANNOTATION} "0-3,3-7": GPU 3 is in two domains'


def test_node_topology_helpers() -> None:
    topology = NodeTopology(8, runs((0, 3), (4, 7)))
    assert [topology.domain_of(gpu) for gpu in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topology.gpu_domain_ids() == (0, 0, 0, 0, 1, 1, 1, 1)
    assert topology.domain_sizes == (4, 4)
    assert topology.domain_count == 2
    with pytest.raises(TopologyError):
        topology.domain_of(8)


@pytest.mark.parametrize(
    ("gpu_count", "domains"),
    [
        (-1, ()),
        (2, ((0,),)),
        (2, ((0, 1), (1,))),
        (2, ((1,), (0,))),
        (2, ((),)),
        (2, ((1, 0),)),
        (2, ((0, 2),)),
    ],
)
def test_node_topology_rejects_invalid(
    gpu_count: int, domains: tuple[tuple[int, ...], ...]
) -> None:
    with pytest.raises(TopologyError):
        NodeTopology(gpu_count, domains)


def test_format_rejects_non_contiguous_domain() -> None:
    with pytest.raises(TopologyError, match="not a run of consecutive GPU indices"):
        format_domains(((0, 2), (1, 3)))


@st.composite
def contiguous_topologies(draw: st.DrawFn) -> NodeTopology:
    """Any valid annotation-expressible topology: GPU count 0..16 cut into consecutive runs."""
    gpu_count = draw(st.integers(0, 16))
    cuts = draw(st.sets(st.integers(1, max(gpu_count - 1, 1)), max_size=gpu_count))
    bounds = [0, *sorted(c for c in cuts if c < gpu_count), gpu_count]
    domains = tuple(tuple(range(start, stop)) for start, stop in itertools.pairwise(bounds))
    return NodeTopology(gpu_count, tuple(d for d in domains if d))


@given(contiguous_topologies())
def test_format_then_parse_round_trips(topology: NodeTopology) -> None:
    text = format_domains(topology.domains)
    assert parse_domains(text, topology.gpu_count) == topology
    assert format_domains(parse_domains(text, topology.gpu_count).domains) == text


ANNOTATION_ALPHABET = st.sampled_from([*"0123456789-, \t", "10", "a", "\n", "٣"])


@given(st.lists(ANNOTATION_ALPHABET, max_size=20).map("".join), st.integers(0, 12))
def test_fuzz_annotation_parses_or_raises_topology_error(annotation: str, gpu_count: int) -> None:
    try:
        topology = parse_domains(annotation, gpu_count)
    except TopologyError as error:
        assert NVLINK_DOMAINS_ANNOTATION in str(error)
    else:
        assert topology.gpu_count == gpu_count
        assert sorted(gpu for domain in topology.domains for gpu in domain) == list(
            range(gpu_count)
        )
    result = domains_for_node(annotation, gpu_count)
    assert result.topology.gpu_count == gpu_count


@given(st.text(max_size=40), st.integers(0, 12))
def test_fuzz_arbitrary_text_never_escapes(annotation: str, gpu_count: int) -> None:
    with contextlib.suppress(TopologyError):
        parse_domains(annotation, gpu_count)
    assert domains_for_node(annotation, gpu_count).topology.gpu_count == gpu_count
