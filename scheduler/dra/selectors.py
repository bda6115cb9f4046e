"""The contract between the allocator and CEL: whether a device satisfies one selector.

The allocator asks `SelectorMatcher.matches` for each (expression, device) it considers, class
selectors first, then the request's. An expression that does not compile, does not return a
bool, or fails while evaluating raises `SelectorError`: kube-scheduler treats that as an error of
the scheduling attempt (the pod backs off), never as "the device does not match".
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from scheduler.model.devices import Device


class SelectorError(Exception):
    """A selector could not be compiled or evaluated. The message names the expression (cut
    to a bounded length) and what went wrong, as upstream words it where it can."""


class SelectorMatcher(Protocol):
    def matches(self, expression: str, driver: str, device: Device, memo_key: Hashable) -> bool:
        """Whether `device` of `driver` satisfies the CEL `expression`. `memo_key` identifies
        the device and the content it was read from (pool, generation, slice, device name):
        two calls with equal keys and expressions may return the memoized answer. Raises
        `SelectorError`."""
        ...
