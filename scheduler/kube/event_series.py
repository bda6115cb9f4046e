"""Repeats of one event counted into one Event's `series`, as client-go's events.k8s.io/v1
broadcaster does for kube-scheduler (k8s.io/client-go@v0.37.2 tools/events/event_broadcaster.go:
`recordToSink`, `finishSeries`, `refreshExistingEventSeries`, `getKey`).

Pure bookkeeping, no API calls: `SeriesBook` says which Events must be written and when; the
recorder (`scheduler.kube.events`) writes them.

client-go's rules, and where this book follows or departs from them:

- **Same event.** client-go treats two events as the same ("isomorphic") when their type,
  action, reason, reporting controller and instance, `regarding` and `related` references are
  equal. The note is not in its key: a repeat with another note is counted in the series of the
  first event, whose note stays. Here the note is in the key (`SeriesKey`), so an Event's note
  is always what was observed: when a pod's reason changes it gets a new Event and the old
  series ends. The reporting controller and instance are the recorder's own, the same for every
  event it writes, and no event here has a `related` object.
- **When it is written.** The first occurrence is created. The first repeat makes it a series,
  `{count: 2, lastObservedTime}`, written at once as a PATCH of `series` alone; later repeats are
  only counted in memory. Every `refresh` seconds (client-go: 30 minutes) every series is
  written again, which also keeps the Event from expiring (kube-apiserver's `--event-ttl`, 1 h by
  default).
- **When it ends.** A series ends `window` seconds (client-go: 6 minutes) after its last
  observation: its final count is written, unless already written, and it is forgotten; an event
  seen once is forgotten `window` seconds after it was. client-go looks for ended series every
  6 minutes, so its series end 6 to 12 minutes after the last repeat; here every `due()` call
  looks (the recorder calls it every few seconds). A repeat after the end starts a new Event.
- **Gone on the server.** A PATCH answered 404 (the Event expired or was deleted) creates the
  Event again, under the same name, with its series (the recorder does this).
- **Bounded.** client-go keeps every key until its series ends; here at most `capacity` are
  kept. Beyond it the least recently observed is forgotten; if its count was not written yet,
  it is handed back for one last write, as an ended series is.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

FINISH_SECONDS = 6 * 60.0
"""client-go's `finishTime`: a series ends this long after its last observation."""
REFRESH_SECONDS = 30 * 60.0
"""client-go's `refreshTime`: every series is written again this often."""
MAX_SERIES = 10_000
"""Keys a book keeps by default."""

MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"
"""metav1.MicroTime as the API server spells it (UTC)."""


@dataclass(frozen=True)
class SeriesKey:
    """What makes two events the same: the object they are about (any hashable reference),
    type, reason, action and note."""

    regarding: object
    type_: str
    reason: str
    action: str
    note: str


@dataclass(eq=False)
class Series:
    """One Event and the occurrences counted into it.

    `body` is the Event as first created; every write reuses its name. Clock readings
    (`last_seen`, `attempted_at`) are monotonic seconds; `last_observed` is the wall-clock time
    of the last occurrence (UTC), written as `series.lastObservedTime`."""

    key: SeriesKey
    body: dict[str, Any]
    last_seen: float
    last_observed: datetime
    count: int = 1
    written: int = 0
    """The count the API server last accepted (0: nothing accepted yet)."""
    created: bool = False
    """The Event exists on the API server (as far as this process knows)."""
    attempted_at: float = -math.inf
    """Clock reading of the last write attempt."""
    writing: bool = field(default=False, repr=False)
    """A write task owns this series (the recorder's flag: one writer per series)."""
    again: bool = field(default=False, repr=False)
    """Another write was asked for while one was running."""

    def series_field(self) -> dict[str, Any]:
        """The Event's `series` as now known: `{count, lastObservedTime}`."""
        return {"count": self.count, "lastObservedTime": self.last_observed.strftime(MICRO_TIME)}

    @property
    def unwritten(self) -> bool:
        """Occurrences were counted that the API server does not show yet."""
        return self.count != self.written


class SeriesBook:
    """The series of recent events, keyed by `SeriesKey`; see the module docstring.

    `window` and `refresh` are seconds on the caller's monotonic clock; `capacity` bounds the
    keys kept (at least 1)."""

    def __init__(
        self,
        window: float = FINISH_SECONDS,
        refresh: float = REFRESH_SECONDS,
        capacity: int = MAX_SERIES,
    ) -> None:
        if window <= 0 or refresh <= 0 or capacity < 1:
            raise ValueError("window and refresh must be positive, capacity at least 1")
        self.window = window
        self.refresh = refresh
        self.capacity = capacity
        self._series: OrderedDict[SeriesKey, Series] = OrderedDict()
        """Least recently observed first."""

    def __len__(self) -> int:
        return len(self._series)

    def get(self, key: SeriesKey) -> Series | None:
        """The live series of `key`, if any."""
        return self._series.get(key)

    def observe(
        self,
        key: SeriesKey,
        now: float,
        wall: datetime,
        make_body: Callable[[], dict[str, Any]],
    ) -> list[Series]:
        """Count one occurrence of `key` at clock reading `now` (wall-clock `wall`) and return
        the series to write now, in order: the occurrence's own series when it is new (created
        from `make_body()`) or just became one (count 2), after any series this call ended
        (`key`'s own, past its window) or pushed out over `capacity` with counts not written."""
        series = self._series.get(key)
        ended: list[Series] = []
        if series is not None and now - series.last_seen <= self.window:
            series.count += 1
            series.last_seen = now
            series.last_observed = wall
            self._series.move_to_end(key)
            return [series] if series.count == 2 else []
        if series is not None:
            del self._series[key]
            ended += self._final(series)
        series = Series(key, make_body(), last_seen=now, last_observed=wall)
        self._series[key] = series
        while len(self._series) > self.capacity:
            _, oldest = self._series.popitem(last=False)
            ended += self._final(oldest)
        return [*ended, series]

    def forget(self, series: Series) -> None:
        """Drop `series` if it is still its key's live one (e.g. its first write was dropped, so
        the next occurrence starts afresh)."""
        if self._series.get(series.key) is series:
            del self._series[series.key]

    def due(self, now: float) -> list[Series]:
        """Series to write at clock reading `now`: those that ended (last observation more than
        `window` ago) with counts not written, now forgotten; and live series (count >= 2)
        not tried for `refresh` seconds. Ended single events are forgotten unwritten."""
        writes: list[Series] = []
        for key, series in list(self._series.items()):
            if now - series.last_seen > self.window:
                del self._series[key]
                writes += self._final(series)
            elif series.count >= 2 and now - series.attempted_at >= self.refresh:
                writes.append(series)
        return writes

    @staticmethod
    def _final(series: Series) -> list[Series]:
        """The last write an ending series needs: its count, if it is a series not yet shown."""
        return [series] if series.count >= 2 and series.unwritten else []
