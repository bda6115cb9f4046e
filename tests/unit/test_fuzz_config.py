"""Fuzz the configuration loader with random nested documents: `ConfigError` or a config."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.config import ConfigError, SchedulerConfig, config_from_data, setting_keys
from tests.fuzzing import FUZZ, bounded, huge, json_values

KEYS = list(setting_keys())


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """`{"a.b": 1}` -> `{"a": {"b": 1}}`; a scalar already at a section's place wins."""
    document: dict[str, Any] = {}
    for key, value in flat.items():
        *sections, leaf = key.split(".")
        node = document
        for section in sections:
            child = node.setdefault(section, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node[leaf] = value
    return document


real_keys = st.sampled_from(KEYS)
any_keys = st.one_of(
    real_keys,
    st.text(max_size=20),
    # up to ~120 characters: 100 KB keys are test_unknown_long_key_is_echoed_whole's (a defect)
    huge(st.text(min_size=1, max_size=6), max_repeat=20),
    st.builds(lambda k, t: f"{k}.{t}", real_keys, st.text(max_size=10)),
)
# Integers past 4300 digits are test_huge_integer_value's (a known defect).
values = json_values(huge_ints=False)
documents = st.one_of(
    st.dictionaries(any_keys, values, max_size=8).map(nest),
    st.dictionaries(real_keys, values, max_size=8).map(nest),
    values,
)


@FUZZ
@given(documents)
def test_fuzz_config_from_data(document: Any) -> None:
    try:
        config = config_from_data(document, source="fuzz.yaml", env={})
    except ConfigError as error:
        assert bounded(error), len(str(error))
    else:
        assert isinstance(config, SchedulerConfig)


def test_unknown_long_key_is_echoed_whole() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_data({"k" * 100_000: 1}, source="fuzz.yaml", env={})
    assert bounded(caught.value), len(str(caught.value))


def test_huge_integer_value() -> None:
    with pytest.raises(ConfigError):
        config_from_data({"logLevel": 10**5000}, source="fuzz.yaml", env={})
