"""Bounded echoes of untrusted values in error messages.

Parsers quote the offending value in their errors, and those errors end up in logs and Events.
A value can be any size (an 80 KB annotation, a 100 KB resource key), so every echo goes through
`clip` or `quote`: at most `MAX_ECHO` characters of the value, and a note of how long it was.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable

MAX_ECHO = 80
"""Characters of an untrusted value kept in a message."""

_repr = reprlib.Repr()
_repr.maxstring = MAX_ECHO
_repr.maxother = MAX_ECHO
_repr.maxlong = MAX_ECHO
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 4
_repr.maxlevel = 2


def clip(text: object, limit: int = MAX_ECHO) -> str:
    """`text` (a string, or anything: `quote`d) itself if at most `limit` characters, else its
    start and its length, e.g. `0,1,2,3... (81234 characters)`; at most `limit` + 40."""
    if not isinstance(text, str):
        return quote(text, limit)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def quote(value: object, limit: int = MAX_ECHO) -> str:
    """`repr(value)` cut to about `limit` characters; never raises (a 5000-digit int included)."""
    if isinstance(value, str):
        shown = repr(value[:limit])  # escapes can make it up to ten times longer than the text
        if len(value) <= limit and len(shown) <= limit + 2:
            return shown
        return f"{shown[:limit]}... ({len(value)} characters)"
    if isinstance(value, int) and not isinstance(value, bool):
        bits = value.bit_length()
        if bits > 4 * limit:  # repr() of a huge int is slow, and refused past 4300 digits
            return f"<an integer of {bits} bits>"
    try:
        return clip(_repr.repr(value), limit)
    except Exception:  # a repr() that fails must not hide the error being reported
        return f"<a {type(value).__name__}>"


def index_list(indices: Iterable[int], limit: int = MAX_ECHO) -> str:
    """Sorted GPU indices as runs, bounded: `[1, 2, 3, 7]` -> `"1-3,7"`."""
    runs: list[str] = []
    ordered = sorted(indices)
    start = previous = None
    for index in [*ordered, None]:
        if index is not None and previous is not None and index == previous + 1:
            previous = index
            continue
        if start is not None and previous is not None:
            runs.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = index
    return clip(",".join(runs), limit)
