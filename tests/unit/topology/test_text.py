"""Untrusted values echoed into messages stay short, whatever they contain."""

from __future__ import annotations

import pytest

from topology.text import MAX_ECHO, quote


@pytest.mark.parametrize(
    "value",
    ["\x00" * MAX_ECHO, "\U000e0001" * MAX_ECHO, "\x00" * (10 * MAX_ECHO), "x" * (10 * MAX_ECHO)],
    ids=["escaped", "wide-escapes", "long-escaped", "long-plain"],
)
def test_a_quoted_string_is_bounded_even_when_its_repr_is_longer(value: str) -> None:
    """A short string of characters repr() escapes (`\\x00`, `\\U000e0001`) once came out at
    up to ten times `MAX_ECHO`, and two of them overran a 1 KiB message bound."""
    assert len(quote(value)) <= MAX_ECHO + 40


def test_a_short_plain_string_is_its_repr() -> None:
    assert quote("abc") == "'abc'"
    assert quote("it's") == '"it\'s"'
