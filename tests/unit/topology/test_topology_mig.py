"""MIG profile names and free MIG instances per node."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.datasets import H200_DIR
from topology.domains import TopologyError
from topology.mig import (
    MIG_RESOURCE_PREFIX,
    VALID_COMPUTE_SLICES,
    MigProfile,
    is_mig_resource,
    mig_arrays,
    parse_mig_profile,
)

DATA_DIR = H200_DIR


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("nvidia.com/mig-1g.18gb", MigProfile(1, 18)),
        ("nvidia.com/mig-1g.18gb+me", MigProfile(1, 18, "+me")),
        ("nvidia.com/mig-2g.35gb", MigProfile(2, 35)),
        ("nvidia.com/mig-3g.71gb", MigProfile(3, 71)),
        ("nvidia.com/mig-4g.71gb", MigProfile(4, 71)),
        ("nvidia.com/mig-7g.141gb", MigProfile(7, 141)),
        ("nvidia.com/mig-1g.5gb", MigProfile(1, 5)),
        ("nvidia.com/mig-1g.24gb+me.all", MigProfile(1, 24, "+me.all")),
        ("nvidia.com/mig-1g.24gb+gfx", MigProfile(1, 24, "+gfx")),
        ("nvidia.com/mig-1g.23gb-me", MigProfile(1, 23, "-me")),
    ],
)
def test_parse_profile(key: str, expected: MigProfile) -> None:
    profile = parse_mig_profile(key)
    assert profile == expected
    assert profile.resource_key == key


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("nvidia.com/gpu", "is not a MIG resource"),
        ("nvidia.com/mig-", "is not <g>g.<mem>gb"),
        ("nvidia.com/mig-1g", "is not <g>g.<mem>gb"),
        ("nvidia.com/mig-1g.18", "is not <g>g.<mem>gb"),
        ("nvidia.com/mig-1g.18gb+", "is not <g>g.<mem>gb"),
        ("nvidia.com/mig-1g.18GB", "is not <g>g.<mem>gb"),
        ("nvidia.com/mig-g.18gb", "is not <g>g.<mem>gb"),
        ("nvidia.com/mig-1c.3g.18gb", "is not <g>g.<mem>gb"),
        ("nvidia.com/mig-5g.40gb", "5 compute slices is not one of 1, 2, 3, 4, 7"),
        ("nvidia.com/mig-0g.10gb", "0 compute slices"),
        ("nvidia.com/mig-1g.0gb", "has no memory"),
    ],
)
def test_malformed_profile_names_the_key(key: str, problem: str) -> None:
    with pytest.raises(TopologyError) as caught:
        parse_mig_profile(key)
    assert repr(key) in str(caught.value)
    assert problem in str(caught.value)


def test_real_h200_profiles_parse() -> None:
    path = DATA_DIR / "nvidia-smi-mig-lgip.txt"
    names = re.findall(r"MIG (\S+)", path.read_text())
    profiles = [parse_mig_profile(MIG_RESOURCE_PREFIX + name) for name in names]
    assert [p.name for p in profiles] == names
    assert {p.compute_slices for p in profiles} == {1, 2, 3, 4, 7}
    assert MigProfile(1, 18, "+me") in profiles


def test_mig_arrays_free_instances() -> None:
    capacities: list[dict[str, int | str]] = [
        {"nvidia.com/mig-1g.18gb": "7", "cpu": "64", "nvidia.com/gpu": "0"},
        {"nvidia.com/mig-3g.71gb": 2, "nvidia.com/mig-1g.18gb": 1},
        {"cpu": "8"},
    ]
    requested = [
        {"nvidia.com/mig-1g.18gb": 3},
        {"nvidia.com/mig-3g.71gb": 5, "nvidia.com/mig-1g.18gb": 1},
        {},
    ]
    arrays = mig_arrays(capacities, requested)
    assert arrays.profiles == (MigProfile(1, 18), MigProfile(3, 71))
    np.testing.assert_array_equal(arrays.capacity, [[7, 0], [1, 2], [0, 0]])
    np.testing.assert_array_equal(arrays.free, [[4, 0], [0, 0], [0, 0]])
    assert arrays.free.dtype == np.int64


def test_mig_arrays_fixed_columns() -> None:
    columns = [MigProfile(7, 141), MigProfile(1, 18, "+me")]
    arrays = mig_arrays(
        [{"nvidia.com/mig-1g.18gb+me": "1", "nvidia.com/mig-1g.18gb": "6"}],
        [{"nvidia.com/mig-1g.18gb": 1}],
        profiles=columns,
    )
    assert arrays.profiles == (MigProfile(1, 18, "+me"), MigProfile(7, 141))
    np.testing.assert_array_equal(arrays.free, [[1, 0]])


def test_mig_arrays_empty() -> None:
    arrays = mig_arrays([], [])
    assert arrays.free.shape == (0, 0)


@pytest.mark.parametrize(
    ("capacities", "requested", "error"),
    [
        ([{"nvidia.com/mig-9g.1gb": "1"}], [{}], TopologyError),
        ([{"nvidia.com/mig-1g.18gb": "1.5"}], [{}], TopologyError),
        ([{"nvidia.com/mig-1g.18gb": "-1"}], [{}], TopologyError),
        ([{"nvidia.com/mig-1g.18gb": -1}], [{}], TopologyError),
        ([{"nvidia.com/mig-1g.18gb": True}], [{}], TopologyError),
        ([{"nvidia.com/mig-1g.18gb": "1"}], [{"nvidia.com/mig-x": 1}], TopologyError),
        ([{}], [], ValueError),
    ],
)
def test_mig_arrays_rejects_bad_input(
    capacities: list[dict[str, int | str]], requested: list[dict[str, int]], error: type[Exception]
) -> None:
    with pytest.raises(error):
        mig_arrays(capacities, requested)


PROFILE_ALPHABET = st.sampled_from([*"0123456789g.bme+-al", "gb", "1g", "+me", "\n", "Ω"])


@given(st.lists(PROFILE_ALPHABET, max_size=16).map("".join))
def test_fuzz_profile_names(suffix: str) -> None:
    key = MIG_RESOURCE_PREFIX + suffix
    try:
        profile = parse_mig_profile(key)
    except TopologyError as error:
        assert repr(key) in str(error)
    else:
        assert profile.compute_slices in VALID_COMPUTE_SLICES
        assert profile.resource_key == key


@given(st.text(max_size=30))
def test_fuzz_arbitrary_keys(key: str) -> None:
    try:
        parse_mig_profile(key)
    except TopologyError:
        assert True
    else:
        assert is_mig_resource(key)


@given(
    st.sampled_from(sorted(VALID_COMPUTE_SLICES)),
    st.integers(1, 9999),
    st.sampled_from(["", "+me", "+me.all", "+gfx", "-me"]),
)
def test_profile_round_trip(slices: int, memory: int, extension: str) -> None:
    profile = MigProfile(slices, memory, extension)
    assert parse_mig_profile(profile.resource_key) == profile
