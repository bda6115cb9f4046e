"""The by-ID NVLink-domain annotation: identifiers in canonical form, parsing, bounded errors,
formatting and the round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology.domain_ids import (
    MAX_IDENTIFIERS,
    MAX_TEXT_LENGTH,
    NVLINK_DOMAIN_IDS_ANNOTATION,
    DomainIds,
    canonical_id,
    canonical_pci_bus_id,
    canonical_uuid,
    format_domain_ids,
    is_uuid,
    parse_domain_ids,
)
from topology.domains import NVLINK_DOMAINS_ANNOTATION, TopologyError
from topology.text import MAX_ECHO

H200_UUID = "GPU-45548304-7cf6-2002-ad86-7a8d1badd8cb"
"""The UUID of the recorded H200 (tests/data/h200/nvidia-smi-q.xml)."""


def uuid(n: int) -> str:
    """A distinct canonical UUID per `n`, with letters so that case matters."""
    return f"GPU-{n:08x}-abcd-1111-2222-{n:012x}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (H200_UUID, H200_UUID),
        (H200_UUID.upper(), H200_UUID),
        ("gpu-45548304-7CF6-2002-ad86-7a8d1badd8cb", H200_UUID),
        (f"  {H200_UUID}\t", H200_UUID),
        ("00000000:19:00.0", "0000:19:00.0"),  # nvidia-smi
        ("0000:19:00.0", "0000:19:00.0"),  # resource.kubernetes.io/pciBusID
        ("0:19:00.0", "0000:19:00.0"),
        ("00000000:AB:1F.7", "0000:ab:1f.7"),
        ("00010000:01:00.0", "10000:01:00.0"),  # a domain above ffff keeps its digits
        ("0000:00:06.0", "0000:00:06.0"),
    ],
)
def test_canonical_identifiers(text: str, expected: str) -> None:
    assert canonical_id(text) == expected
    assert canonical_id(expected) == expected
    assert is_uuid(expected) == expected.startswith("GPU-")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "gpu-0",  # a DRA device name, not an identifier
        "MIG-45548304-7cf6-2002-ad86-7a8d1badd8cb",
        "GPU-45548304-7cf6-2002-ad86-7a8d1badd8c",  # one digit short
        "GPU-45548304-7cf6-2002-ad86-7a8d1badd8cbb",
        "GPU-4554830g-7cf6-2002-ad86-7a8d1badd8cb",
        "45548304-7cf6-2002-ad86-7a8d1badd8cb",
        "19:00.0",  # lspci's short form: the domain is required
        "0000:19:00",
        "0000:19:20.0",  # device above 1f
        "0000:19:00.8",  # function above 7
        "000000000:19:00.0",  # nine domain digits
        "0000:1:00.0",
        "0000:19:00.0.0",
    ],
)
def test_not_identifiers(text: str) -> None:
    assert canonical_id(text) is None
    assert canonical_uuid(text) is None or canonical_pci_bus_id(text) is None


def test_parse_domains_mixed_kinds_with_whitespace_in_annotation_order() -> None:
    text = f" {uuid(4)} , {uuid(5)} ;\t00000000:19:00.0,{uuid(1).upper()}\n"
    result = parse_domain_ids(text)
    assert result.error is None
    assert result.ids == DomainIds(((uuid(4), uuid(5)), ("0000:19:00.0", uuid(1))))
    assert result.ids.domain_sizes == (2, 2)
    assert result.ids.domain_by_id() == {
        uuid(4): 0,
        uuid(5): 0,
        "0000:19:00.0": 1,
        uuid(1): 1,
    }


def test_one_gpu_of_the_recorded_h200() -> None:
    result = parse_domain_ids(H200_UUID)
    assert result.ids == DomainIds(((H200_UUID,),))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no domains listed"),
        ("  \t", "no domains listed"),
        (f"{uuid(1)};", "domain 2 is empty"),
        (f";{uuid(1)}", "domain 1 is empty"),
        (f"{uuid(1)},,{uuid(2)}", "empty identifier in domain 1"),
        (f"{uuid(1)},", "empty identifier in domain 1"),
        ("gpu-0,gpu-1", "'gpu-0' is neither a GPU UUID"),
        (f"{uuid(1)},{uuid(1).upper()}", f"{uuid(1)} is listed twice in domain 1"),
        (f"{uuid(1)};{uuid(2)};{uuid(1)}", f"{uuid(1)} is listed in domains 1 and 3"),
        ("0000:19:00.0;00000000:19:00.0", "0000:19:00.0 is listed in domains 1 and 2"),
    ],
)
def test_bad_text_is_an_error_beside_no_result(text: str, problem: str) -> None:
    result = parse_domain_ids(text)
    assert result.ids is None and result.error is not None
    assert result.error.startswith(f'{NVLINK_DOMAIN_IDS_ANNOTATION} "')
    assert problem in result.error, result.error


def test_errors_are_bounded_whatever_the_input() -> None:
    huge_token = "x" * 10_000
    too_long = ",".join([uuid(1)] * (MAX_TEXT_LENGTH // 40 + 1))
    too_many = ",".join(uuid(n) for n in range(MAX_IDENTIFIERS + 1))
    assert len(too_many) <= MAX_TEXT_LENGTH
    for text, problem in (
        (huge_token, "is neither"),
        (too_long, f"longer than {MAX_TEXT_LENGTH}"),
        (too_many, f"more than {MAX_IDENTIFIERS} identifiers"),
    ):
        result = parse_domain_ids(text)
        assert result.error is not None and problem in result.error
        assert len(result.error) < 4 * MAX_ECHO + 150


def test_a_non_string_is_an_error_not_an_exception() -> None:
    result = parse_domain_ids(7)  # type: ignore[arg-type]
    assert result.ids is None and result.error == f"{NVLINK_DOMAIN_IDS_ANNOTATION}: not a string"


def test_the_index_annotation_is_not_mistaken_for_ids() -> None:
    assert NVLINK_DOMAINS_ANNOTATION != NVLINK_DOMAIN_IDS_ANNOTATION
    result = parse_domain_ids("0-3,4-7")
    assert result.ids is None and "'0-3' is neither" in (result.error or "")


def test_format_writes_the_canonical_text() -> None:
    text = format_domain_ids([[uuid(1).upper(), "00000000:19:00.0"], [uuid(2)]])
    assert text == f"{uuid(1)},0000:19:00.0;{uuid(2)}"


@pytest.mark.parametrize(
    "domains",
    [[], [[]], [["gpu-0"]], [[uuid(1)], [uuid(1).upper()]]],
)
def test_format_refuses_what_the_grammar_cannot_hold(domains: list[list[str]]) -> None:
    with pytest.raises(TopologyError):
        format_domain_ids(domains)


def test_domain_ids_hold_their_invariants() -> None:
    with pytest.raises(TopologyError, match="not a canonical"):
        DomainIds(((H200_UUID.upper(),),))
    with pytest.raises(TopologyError, match="two NVLink domains"):
        DomainIds(((uuid(1),), (uuid(1),)))


IDENTIFIERS = st.builds(uuid, st.integers(0, 2**32 - 1)) | st.builds(
    lambda d, b, dev, f: f"{d:04x}:{b:02x}:{dev:02x}.{f}",
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFF),
    st.integers(0, 0x1F),
    st.integers(0, 7),
)


@given(
    st.lists(st.lists(IDENTIFIERS, min_size=1, max_size=5), min_size=1, max_size=5).filter(
        lambda domains: len({i for d in domains for i in d}) == sum(len(d) for d in domains)
    )
)
def test_round_trip(domains: list[list[str]]) -> None:
    text = format_domain_ids(domains)
    result = parse_domain_ids(text)
    assert result.ids is not None
    assert result.ids.domains == tuple(tuple(d) for d in domains)
    assert format_domain_ids(result.ids.domains) == text


@given(st.text(max_size=200) | st.from_regex(r"[0-9a-fA-FGPU:.,; -]{0,120}", fullmatch=True))
def test_fuzz_parse_never_raises(text: str) -> None:
    result = parse_domain_ids(text)
    assert (result.ids is None) != (result.error is None)
    if result.ids is not None:
        assert parse_domain_ids(format_domain_ids(result.ids.domains)).ids == result.ids
