"""Shared set-up of the parser fuzz tests (tests/unit/test_fuzz_*.py).

Every fuzz test runs `FUZZ` examples: 200 by default, deterministic (the same examples on every
run, so CI is reproducible), or `GPU_SCHEDULER_FUZZ_EXAMPLES` random examples for a long run:

    GPU_SCHEDULER_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest tests/unit -k fuzz

The properties: a parser raises nothing but its documented error type, and every message it
gives (exception text, field error, event text) is at most `MAX_MESSAGE` characters, even for
inputs of 100 KB (`huge` builds those from small pieces).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ_ENV = "GPU_SCHEDULER_FUZZ_EXAMPLES"
DEFAULT_EXAMPLES = 200
MAX_MESSAGE = 1024
"""Longest error message a parser may produce (bytes of text), whatever the input size."""

_long_run = os.environ.get(FUZZ_ENV, "").strip()
FUZZ = settings(
    max_examples=int(_long_run) if _long_run else DEFAULT_EXAMPLES,
    derandomize=not _long_run,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


def huge(pieces: st.SearchStrategy[str], max_repeat: int = 5000) -> st.SearchStrategy[str]:
    """Strings up to ~100 KB: a generated piece repeated, then a generated tail."""
    return st.builds(
        lambda piece, times, tail: piece * times + tail,
        pieces,
        st.integers(min_value=1, max_value=max_repeat),
        pieces,
    )


def huge_integers() -> st.SearchStrategy[int]:
    """Integers of 4,000 to 6,000 digits (past Python's 4300-digit limit for int <-> str)."""
    return st.builds(lambda digits: 10**digits - 1, st.integers(min_value=4000, max_value=6000))


def json_values(
    leaf_text: st.SearchStrategy[str] | None = None, huge_ints: bool = True
) -> st.SearchStrategy[Any]:
    """Random JSON-like values: None, bools, ints (`huge_integers` too unless `huge_ints` is
    False), floats (inf, nan), strings, lists and string-keyed dicts, nested."""
    text = leaf_text if leaf_text is not None else st.text(max_size=30)
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(10**30), max_value=10**30),
        huge_integers() if huge_ints else st.nothing(),
        st.floats(),
        text,
        huge(st.text(min_size=1, max_size=5)),
    )
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(text, children, max_size=4),
        ),
        max_leaves=20,
    )


def bounded(message: object) -> bool:
    return len(str(message)) <= MAX_MESSAGE
