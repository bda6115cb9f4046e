"""Fuzz the annotation parsers: NVLink domains (node), GPU indices (pod), reclaim policy
(PriorityClass). They raise only `TopologyError` (or return errors), with bounded messages."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reclaim.policy import POLICY_ANNOTATIONS, PolicyStatus, parse_policy
from tests.fuzzing import FUZZ, MAX_MESSAGE, bounded, huge
from topology.domains import TopologyError, domains_for_node, parse_domains
from topology.occupancy import parse_gpus_annotation

# Text that looks like the grammar often enough to reach the deeper checks.
grammar_pieces = st.text(alphabet="0123456789-, \t", min_size=1, max_size=12)
annotation_text = st.one_of(
    st.text(max_size=200),
    grammar_pieces,
    huge(grammar_pieces),
    huge(st.text(min_size=1, max_size=8)),
    st.lists(st.integers(0, 10**7), max_size=50).map(lambda xs: ",".join(map(str, xs))),
)
gpu_counts = st.integers(min_value=0, max_value=1 << 16)


@FUZZ
@given(annotation_text, gpu_counts)
def test_fuzz_nvlink_domains(value: str, gpu_count: int) -> None:
    try:
        topology = parse_domains(value, gpu_count)
    except TopologyError as error:
        assert bounded(error), len(str(error))
    else:
        assert topology.gpu_count == gpu_count
    result = domains_for_node(value, gpu_count)  # never raises for text
    assert result.topology.gpu_count == gpu_count
    assert result.error is None or len(result.error) <= MAX_MESSAGE


@FUZZ
@given(annotation_text, gpu_counts)
def test_fuzz_gpus_annotation(value: str, gpu_count: int) -> None:
    try:
        gpus = parse_gpus_annotation(value, gpu_count)
    except TopologyError as error:
        assert bounded(error), len(str(error))
    else:
        assert list(gpus) == sorted(set(gpus))
        assert all(0 <= gpu < gpu_count for gpu in gpus)


INT_MAX_STR_DIGITS = 4300
"""Python's limit for int(str); longer digit strings are test_reclaim_policy_huge_integer's."""
policy_values = st.one_of(
    st.text(max_size=40),
    st.from_regex(r"[+-]?[0-9]{1,30}(\.[0-9]{0,5})?([eE][+-]?[0-9]{1,4})?", fullmatch=True),
    huge(st.text(alphabet="0123456789", min_size=1, max_size=10), max_repeat=400),
    huge(st.text(alphabet="0123456789 x", min_size=2, max_size=10)).filter(
        lambda v: not v.strip("+-").isdigit() or len(v) <= INT_MAX_STR_DIGITS
    ),
    huge(st.text(min_size=1, max_size=5)),
)


@FUZZ
@given(
    huge(st.text(min_size=1, max_size=10), max_repeat=50),
    st.dictionaries(
        st.one_of(st.sampled_from(POLICY_ANNOTATIONS), st.text(max_size=20)),
        policy_values,
        max_size=6,
    ),
)
def test_fuzz_reclaim_policy(name: str, annotations: dict[str, str]) -> None:
    result = parse_policy(name, annotations)
    assert result.status in set(PolicyStatus)
    assert (result.status is PolicyStatus.VALID) == (result.policy is not None)
    assert (result.status is PolicyStatus.INVALID) == bool(result.errors)
    for error in result.errors:
        assert len(error) <= MAX_MESSAGE + len(name), len(error)


def test_reclaim_policy_huge_integer() -> None:
    annotations = dict.fromkeys(POLICY_ANNOTATIONS, "1")
    annotations[POLICY_ANNOTATIONS[0]] = "9" * 5000
    result = parse_policy("batch", annotations)
    assert result.status is PolicyStatus.INVALID
    assert all(len(error) <= MAX_MESSAGE for error in result.errors)
