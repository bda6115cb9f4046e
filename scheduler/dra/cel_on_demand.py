"""The CEL evaluator, loaded when the first selector is evaluated.

`scheduler.dra.cel` runs on cel-expr-python (cel-cpp), which takes about 12 MiB of resident
memory once imported (`python -m hack.bench.memory imports`). Most clusters this scheduler serves
have no ResourceClaim with a CEL selector, and those that do need it only once the allocator
meets one, so the daemon's profile holds a `CelOnDemand` instead of a `CelSelectors`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from scheduler.model.devices import Device

if TYPE_CHECKING:
    from scheduler.dra.cel import CelSelectors


class CelOnDemand:
    """A `SelectorMatcher` that imports `scheduler.dra.cel` and builds its `CelSelectors` (with
    these cache sizes) on the first `matches` call, then answers as that one does."""

    def __init__(self, program_cache_size: int = 256, memo_size: int = 65536) -> None:
        self._sizes = (program_cache_size, memo_size)
        self._selectors: CelSelectors | None = None

    @property
    def loaded(self) -> bool:
        """Whether the evaluator has been imported and built."""
        return self._selectors is not None

    @property
    def selectors(self) -> CelSelectors:
        """The evaluator, imported and built on first use."""
        if self._selectors is None:
            from scheduler.dra.cel import CelSelectors

            self._selectors = CelSelectors(*self._sizes)
        return self._selectors

    def matches(self, expression: str, driver: str, device: Device, memo_key: Hashable) -> bool:
        return self.selectors.matches(expression, driver, device, memo_key)
