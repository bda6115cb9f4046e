"""The scheduling queue: pending pods waiting for a scheduling cycle, in three pools.

The model is kube-scheduler's PriorityQueue. Every pod the queue knows is in exactly one place:

```
  from              to                    when
  (new)             activeQ               add, or update of an unknown pod
  activeQ           in flight             pop: attempts += 1, a new scheduling cycle
  in flight         (forgotten)           done: the pod is bound
  in flight         unschedulable pool    requeue_unschedulable: no node fits
  in flight         backoffQ              requeue_backoff (an error); requeue_unschedulable after
                                          a move request or an update of the pod during the cycle
  backoffQ          activeQ               its backoff expired (flush_backoff, pop)
  backoffQ          in flight             pop with activeQ empty (pop_from_backoff), unless the
                                          pod backs off after an error
  unschedulable     backoffQ or activeQ   a cluster event (move_all_to_active_or_backoff), an
                                          update, or flush_unschedulable; backoffQ while the
                                          pod's backoff has not expired yet
  anywhere          (forgotten)           delete
```

activeQ
    Pods ready to be tried, in a heap: higher priority first, then the pod that was queued first
    (`initial_queued_at`, kept across attempts), then the key, so the order is deterministic.
    kube-scheduler's default sort uses the time of the latest requeue instead; keeping the first
    time means a pod that waited longest goes first among equals, and a pod that keeps failing
    cannot block the head of the queue because a failure sends it to another pool.

backoffQ
    Pods that failed and wait out an exponential backoff of `backoff_initial * 2^(attempts - 1)`
    seconds, capped at `backoff_max`, counted from the time they were requeued. `flush_backoff`
    moves the expired ones to activeQ; `pop` calls it too, and a waiting `pop` wakes up when the
    earliest backoff expires, so a pod never waits for a periodic flush to be retried.
    With `pop_from_backoff` (kube-scheduler's SchedulerPopFromBackoffQ, on by default since
    1.33), a pop that finds activeQ empty takes the backoffQ pod whose backoff ends first (then
    higher priority, then key) instead of idling: backoff exists to keep failing pods from
    crowding out others, and with activeQ empty there are none to crowd out. Pods that back off
    after an error (`requeue_backoff`) are not taken early, as kube-scheduler keeps them in its
    separate error backoff queue.

unschedulable pool
    Pods whose filters found no node. Retrying them is pointless until the cluster changes, so
    they wait for a cluster event that can free room (`move_all_to_active_or_backoff`: a pod
    deleted or finished, a node added or changed), for an update of the pod itself (`update`), or
    for `unschedulable_flush` seconds to pass (`flush_unschedulable`, a safety net for events the
    scheduler does not watch). Leaving, a pod goes to backoffQ if its backoff has not expired
    yet, else to activeQ.

in flight
    Popped pods whose scheduling (and binding) cycle is running. The cycle ends the flight with
    exactly one of `done` (bound), `requeue_unschedulable` or `requeue_backoff`. A pod deleted in
    flight is forgotten at once, and the later requeue of it is a no-op. Adds and updates of an
    in-flight pod are kept and used when it is requeued.

Move requests during a cycle: a cluster event that arrives while a pod is in flight may free the
room that pod's filters did not find, but the filters ran on the older snapshot. Like
kube-scheduler, the queue numbers scheduling cycles (one per pop) and remembers the cycle of the
latest move request; a pod that comes back unschedulable from a cycle that started no later than
that move request goes to backoffQ instead of the unschedulable pool, so it is tried again rather
than stranded until the next event. An update of the pod during its own cycle does the same.

The queue is plain asyncio with no Kubernetes client: items are generic (`T` is whatever the
daemon stores, e.g. a parsed pod) and time comes from an injectable monotonic `clock`. It is not
thread-safe; every method is called from the event loop.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Generic, Literal, TypeVar

T = TypeVar("T")

Pool = Literal["active", "backoff", "unschedulable", "in_flight"]
ACTIVE: Pool = "active"
BACKOFF: Pool = "backoff"
UNSCHEDULABLE: Pool = "unschedulable"
IN_FLIGHT: Pool = "in_flight"
POOLS: tuple[Pool, ...] = (ACTIVE, BACKOFF, UNSCHEDULABLE, IN_FLIGHT)

_MAX_BACKOFF_EXPONENT = 62  # 2**62 seconds is far beyond any cap; avoids float overflow.
_HEAP_SLACK = 64  # stale heap entries tolerated before a heap is rebuilt


class QueueClosed(Exception):
    """Raised by `pop` once the queue is closed; the scheduling loop ends on it."""


@dataclass(frozen=True, slots=True)
class QueuedPod(Generic[T]):
    """One pending pod as the queue holds it. Immutable: the queue replaces it on every change.

    `attempts` counts pops (the first scheduling attempt has attempts == 1); `cycle` is the
    scheduling cycle of the latest pop (0 before the first). Times come from the queue's clock.
    """

    key: str
    """"namespace/name"."""
    priority: int
    obj: T
    attempts: int = 0
    initial_queued_at: float = 0.0
    """When the pod first entered the queue; orders pods of equal priority."""
    queued_at: float = 0.0
    """When the pod last entered a pool; backoff and the unschedulable flush count from here."""
    cycle: int = 0
    unschedulable_reasons: tuple[str, ...] = ()
    """Why the latest attempt found no node (e.g. "3 Insufficient nvidia.com/gpu")."""
    unschedulable_plugins: frozenset[str] = frozenset()
    """The plugins that rejected the pod in the latest attempt."""
    error_backoff: bool = False
    """The latest attempt ended in an error (`requeue_backoff`): its backoff is always waited
    out, never cut short by `pop_from_backoff`."""


@dataclass(slots=True)
class _Flight(Generic[T]):
    """A popped pod plus what happened to it while its cycle ran."""

    pod: QueuedPod[T]
    priority: int
    obj: T
    updated: bool = False


class SchedulingQueue(Generic[T]):
    """Pending pods in activeQ, backoffQ and the unschedulable pool, plus the in-flight set.

    `len(queue)` counts the pods waiting in the three pools (not those in flight); `key in queue`
    is true for a pod in any pool or in flight; `pools()` gives the size of each.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff_initial: float = 1.0,
        backoff_max: float = 10.0,
        unschedulable_flush: float = 60.0,
        pop_from_backoff: bool = False,
    ) -> None:
        if backoff_initial <= 0 or backoff_max < backoff_initial:
            raise ValueError("need 0 < backoff_initial <= backoff_max")
        if unschedulable_flush <= 0:
            raise ValueError("unschedulable_flush must be positive")
        self._clock = clock
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._unschedulable_flush = unschedulable_flush
        self._pop_from_backoff = pop_from_backoff
        # activeQ: key -> (seq, pod); heap of (-priority, initial_queued_at, key, seq).
        self._active: dict[str, tuple[int, QueuedPod[T]]] = {}
        self._active_heap: list[tuple[int, float, str, int]] = []
        # backoffQ: key -> (seq, pod); heap of (backoff expiry, key, seq).
        self._backoff: dict[str, tuple[int, QueuedPod[T]]] = {}
        self._backoff_heap: list[tuple[float, str, int]] = []
        self._unschedulable: dict[str, QueuedPod[T]] = {}
        self._in_flight: dict[str, _Flight[T]] = {}
        self._seq = itertools.count()
        self._scheduling_cycle = 0
        self._move_request_cycle = -1
        self._wakeup = asyncio.Event()
        self._closed = False
        self.popped_from_backoff = 0
        """Pods taken from backoffQ before their backoff ended (`pop_from_backoff`)."""
        self.moves: Counter[str] = Counter()
        """Pods moved out of the unschedulable pool, by cluster event (for metrics)."""
        self.heap_rebuilds: Counter[Pool] = Counter()
        """Heap rebuilds by pool ("active", "backoff"): each time the stale entries left by
        deletes and re-sorts passed 2 x live entries + 64, the heap was rebuilt from the pool."""

    # ----------------------------------------------------------------------------------------
    # Informer side: pods appear, change and go.

    def add(self, key: str, priority: int, obj: T) -> None:
        """A pending pod appeared: it enters activeQ.

        If the key is already queued anywhere or in flight, only its object and priority are
        replaced (the pod stays where it is), so a relist that re-announces pods is harmless.
        """
        if self._replace(key, priority, obj):
            return
        now = self._clock()
        self._push_active(QueuedPod(key, priority, obj, initial_queued_at=now, queued_at=now))

    def update(self, key: str, priority: int, obj: T) -> None:
        """A pending pod changed in a way that may change where it fits: replace it.

        A pod in the unschedulable pool moves to backoffQ or activeQ (its new spec may fit); a pod
        in flight that comes back unschedulable goes to backoffQ rather than the unschedulable
        pool. An unknown key is added. Callers should not call this for changes that cannot affect
        scheduling, such as the scheduler's own status writes, or every write retries the pod.
        """
        flight = self._in_flight.get(key)
        if flight is not None:
            flight.priority, flight.obj, flight.updated = priority, obj, True
            return
        pod = self._unschedulable.pop(key, None)
        if pod is not None:
            self._to_active_or_backoff(replace(pod, priority=priority, obj=obj))
            return
        self.add(key, priority, obj)

    def delete(self, key: str) -> None:
        """The pod is gone, or no longer pending (bound elsewhere): forget it everywhere.

        A later requeue or `done` from a cycle that was running for it is a no-op.
        """
        self._remove_queued(key)
        self._in_flight.pop(key, None)

    # ----------------------------------------------------------------------------------------
    # Scheduling-loop side.

    async def pop(self) -> QueuedPod[T]:
        """The next pod to schedule, waiting until activeQ has one; it is then in flight.

        Raises QueueClosed once `close` has been called, also in callers already waiting.
        """
        while True:
            pod = self.pop_nowait()
            if pod is not None:
                return pod
            self._wakeup.clear()
            try:
                async with asyncio.timeout(self._next_backoff_expiry_in()):
                    await self._wakeup.wait()
            except TimeoutError:
                pass  # a backoff expired: the next pop_nowait flushes it

    def pop_nowait(self) -> QueuedPod[T] | None:
        """Like `pop`, without waiting: None if activeQ is empty after flushing backoffQ (and,
        with `pop_from_backoff`, no pod in backoffQ may be taken early)."""
        if self._closed:
            raise QueueClosed
        self.flush_backoff()
        heap = self._active_heap
        while heap:
            _, _, key, seq = heapq.heappop(heap)
            entry = self._active.get(key)
            if entry is None or entry[0] != seq:
                continue  # stale: the pod left activeQ or was re-sorted
            del self._active[key]
            return self._fly(entry[1])
        if self._pop_from_backoff:
            early = self._first_in_backoff()
            if early is not None:
                del self._backoff[early.key]
                self.popped_from_backoff += 1
                return self._fly(early)
        return None

    def _fly(self, pod: QueuedPod[T]) -> QueuedPod[T]:
        """Start a scheduling cycle for `pod`, taken out of its pool: it is now in flight."""
        self._scheduling_cycle += 1
        flying = replace(pod, attempts=pod.attempts + 1, cycle=self._scheduling_cycle)
        self._in_flight[pod.key] = _Flight(flying, flying.priority, flying.obj)
        return flying

    def _first_in_backoff(self) -> QueuedPod[T] | None:
        """The backoffQ pod (not backing off after an error) whose backoff ends first, then of
        higher priority, then by key; None if there is none. A scan of backoffQ, done only when
        activeQ is empty."""
        best: tuple[float, int, str] | None = None
        found: QueuedPod[T] | None = None
        for key, (_, pod) in self._backoff.items():
            if pod.error_backoff:
                continue
            rank = (self.backoff_expiry(pod), -pod.priority, key)
            if best is None or rank < best:
                best, found = rank, pod
        return found

    def done(self, pod: QueuedPod[T] | str) -> None:
        """The pod's cycle ended without a requeue (it is bound): stop tracking it.

        Pass the popped QueuedPod to make a stale call (from a cycle of an earlier pop of the same
        key) a no-op; a bare key ends whatever flight that key has.
        """
        key = pod if isinstance(pod, str) else pod.key
        flight = self._in_flight.get(key)
        if flight is not None and (isinstance(pod, str) or pod.cycle == flight.pod.cycle):
            del self._in_flight[key]

    def flying(self, pod: QueuedPod[T]) -> bool:
        """Whether the flight `pod` (as popped) started is still running: not yet ended by
        `done` or a requeue, the pod not deleted, and no later pop of the same key."""
        flight = self._in_flight.get(pod.key)
        return flight is not None and flight.pod.cycle == pod.cycle

    def requeue_unschedulable(
        self, pod: QueuedPod[T], reasons: Iterable[str] = (), plugins: Iterable[str] = ()
    ) -> None:
        """The filters found no node for `pod` (as popped): park it until something changes.

        It goes to the unschedulable pool, or to backoffQ if a move request or an update of the
        pod happened during its cycle. A no-op if the pod was deleted while in flight.
        """
        flight = self._land(pod)
        if flight is None:
            return
        requeued = replace(
            self._requeued(flight),
            unschedulable_reasons=tuple(reasons),
            unschedulable_plugins=frozenset(plugins),
            error_backoff=False,
        )
        if flight.updated or self._move_request_cycle >= flight.pod.cycle:
            self._to_active_or_backoff(requeued)
        else:
            self._unschedulable[requeued.key] = requeued

    def requeue_backoff(self, pod: QueuedPod[T]) -> None:
        """The cycle for `pod` failed with an error (e.g. the bind call failed): retry after its
        backoff. A no-op if the pod was deleted while in flight."""
        flight = self._land(pod)
        if flight is not None:
            self._push_backoff(replace(self._requeued(flight), error_backoff=True))

    # ----------------------------------------------------------------------------------------
    # Moves.

    def move_all_to_active_or_backoff(self, event: str) -> int:
        """A cluster event that can free room (`event` names it, e.g. "PodDeleted", "NodeAdd")
        happened: every unschedulable pod moves to backoffQ or activeQ, and pods in flight now
        count as having seen a move request. Returns how many pods moved."""
        self._move_request_cycle = self._scheduling_cycle
        moved = list(self._unschedulable.values())
        self._unschedulable.clear()
        for pod in moved:
            self._to_active_or_backoff(pod)
        if moved:
            self.moves[event] += len(moved)
        return len(moved)

    def move_matching(self, event: str, wanted: Callable[[QueuedPod[T]], bool]) -> int:
        """As `move_all_to_active_or_backoff`, but only the unschedulable pods for which `wanted`
        holds move (kube-scheduler's queueing hints: an event moves the pods it may help). Pods
        in flight still count as having seen a move request. Returns how many pods moved."""
        self._move_request_cycle = self._scheduling_cycle
        moved = [pod for pod in self._unschedulable.values() if wanted(pod)]
        for pod in moved:
            del self._unschedulable[pod.key]
            self._to_active_or_backoff(pod)
        if moved:
            self.moves[event] += len(moved)
        return len(moved)

    def flush_backoff(self) -> int:
        """Move pods whose backoff has expired to activeQ; returns how many moved."""
        now = self._clock()
        heap = self._backoff_heap
        moved = 0
        while heap and heap[0][0] <= now:
            _, key, seq = heapq.heappop(heap)
            entry = self._backoff.get(key)
            if entry is None or entry[0] != seq:
                continue
            del self._backoff[key]
            self._push_active(entry[1])
            moved += 1
        return moved

    def flush_unschedulable(self) -> int:
        """Move pods that sat in the unschedulable pool longer than `unschedulable_flush` seconds
        to backoffQ or activeQ; returns how many moved."""
        now = self._clock()
        stale = [
            pod
            for pod in self._unschedulable.values()
            if now - pod.queued_at > self._unschedulable_flush
        ]
        for pod in stale:
            del self._unschedulable[pod.key]
            self._to_active_or_backoff(pod)
        return len(stale)

    async def run(
        self,
        interval: float = 1.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """Flush both pools every `interval` seconds until the queue is closed (a daemon task)."""
        while not self._closed:
            await sleep(interval)
            self.flush_backoff()
            self.flush_unschedulable()

    def close(self) -> None:
        """Stop: every waiting and later `pop` raises QueueClosed."""
        self._closed = True
        self._wakeup.set()

    # ----------------------------------------------------------------------------------------
    # Introspection.

    def backoff_duration(self, attempts: int) -> float:
        """The backoff after `attempts` attempts: initial * 2^(attempts - 1), capped."""
        if attempts <= 0:
            return 0.0
        exponent = min(attempts - 1, _MAX_BACKOFF_EXPONENT)
        return min(self._backoff_initial * 2.0**exponent, self._backoff_max)

    def backoff_expiry(self, pod: QueuedPod[T]) -> float:
        """The clock time at which `pod`'s backoff ends."""
        return pod.queued_at + self.backoff_duration(pod.attempts)

    def where(self, key: str) -> Pool | None:
        """The pool `key` is in ("active", "backoff", "unschedulable", "in_flight") or None."""
        if key in self._active:
            return ACTIVE
        if key in self._backoff:
            return BACKOFF
        if key in self._unschedulable:
            return UNSCHEDULABLE
        if key in self._in_flight:
            return IN_FLIGHT
        return None

    def pools(self) -> dict[str, int]:
        """Pod count per pool, in flight included."""
        return {
            ACTIVE: len(self._active),
            BACKOFF: len(self._backoff),
            UNSCHEDULABLE: len(self._unschedulable),
            IN_FLIGHT: len(self._in_flight),
        }

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.where(key) is not None

    # ----------------------------------------------------------------------------------------
    # Internals.

    def _replace(self, key: str, priority: int, obj: T) -> bool:
        """Replace object and priority wherever `key` is, in place; False if it is nowhere."""
        flight = self._in_flight.get(key)
        if flight is not None:
            flight.priority, flight.obj = priority, obj
            return True
        active = self._active.get(key)
        if active is not None:
            pod = replace(active[1], priority=priority, obj=obj)
            if priority != active[1].priority:
                self._push_active(pod)  # re-sort; the old heap entry goes stale
            else:
                self._active[key] = (active[0], pod)
            return True
        backoff = self._backoff.get(key)
        if backoff is not None:
            self._backoff[key] = (backoff[0], replace(backoff[1], priority=priority, obj=obj))
            return True
        parked = self._unschedulable.get(key)
        if parked is not None:
            self._unschedulable[key] = replace(parked, priority=priority, obj=obj)
            return True
        return False

    def _remove_queued(self, key: str) -> QueuedPod[T] | None:
        active = self._active.pop(key, None)
        if active is not None:
            return active[1]
        backoff = self._backoff.pop(key, None)
        if backoff is not None:
            return backoff[1]
        return self._unschedulable.pop(key, None)

    def _land(self, pod: QueuedPod[T]) -> _Flight[T] | None:
        """End the flight `pod` came from; None if it was deleted or is from a stale cycle."""
        flight = self._in_flight.get(pod.key)
        if flight is None or flight.pod.cycle != pod.cycle:
            return None
        del self._in_flight[pod.key]
        return flight

    def _requeued(self, flight: _Flight[T]) -> QueuedPod[T]:
        return replace(
            flight.pod, priority=flight.priority, obj=flight.obj, queued_at=self._clock()
        )

    def _to_active_or_backoff(self, pod: QueuedPod[T]) -> None:
        if self.backoff_expiry(pod) > self._clock():
            self._push_backoff(pod)
        else:
            self._push_active(pod)

    def _push_active(self, pod: QueuedPod[T]) -> None:
        seq = next(self._seq)
        self._active[pod.key] = (seq, pod)
        heapq.heappush(self._active_heap, (-pod.priority, pod.initial_queued_at, pod.key, seq))
        if len(self._active_heap) > 2 * len(self._active) + _HEAP_SLACK:
            self._active_heap = [
                (-p.priority, p.initial_queued_at, k, s) for k, (s, p) in self._active.items()
            ]
            heapq.heapify(self._active_heap)
            self.heap_rebuilds[ACTIVE] += 1
        self._wakeup.set()

    def _push_backoff(self, pod: QueuedPod[T]) -> None:
        seq = next(self._seq)
        self._backoff[pod.key] = (seq, pod)
        heapq.heappush(self._backoff_heap, (self.backoff_expiry(pod), pod.key, seq))
        if len(self._backoff_heap) > 2 * len(self._backoff) + _HEAP_SLACK:
            self._backoff_heap = [
                (self.backoff_expiry(p), k, s) for k, (s, p) in self._backoff.items()
            ]
            heapq.heapify(self._backoff_heap)
            self.heap_rebuilds[BACKOFF] += 1
        # A waiting pop may now have an earlier backoff expiry to wake up for.
        self._wakeup.set()

    def _next_backoff_expiry_in(self) -> float | None:
        """Seconds until the earliest live backoff expires (None if backoffQ is empty)."""
        heap = self._backoff_heap
        while heap:
            _, key, seq = heap[0]
            entry = self._backoff.get(key)
            if entry is not None and entry[0] == seq:
                return max(heap[0][0] - self._clock(), 0.0)
            heapq.heappop(heap)
        return None

    def take(self, keys: Iterable[str]) -> list[QueuedPod[T]]:
        """Pop these pods, wherever they wait (activeQ, backoffQ, the unschedulable pool), as
        `pop` would: each is then in flight with its own cycle. Keys not waiting (unknown, or
        in flight already) are skipped. For a gang's members, scheduled in one cycle."""
        taken: list[QueuedPod[T]] = []
        for key in keys:
            if key in self._in_flight:
                continue
            pod = self._remove_queued(key)
            if pod is None:
                continue
            taken.append(self._fly(pod))
        return taken

    def oldest_queued_at(self) -> float | None:
        """The earliest `initial_queued_at` of the pods waiting in a pool or in flight, on the
        queue's clock (None when there are none); for the age of the oldest pending pod."""
        times = itertools.chain(
            (p.initial_queued_at for _, p in self._active.values()),
            (p.initial_queued_at for _, p in self._backoff.values()),
            (p.initial_queued_at for p in self._unschedulable.values()),
            (f.pod.initial_queued_at for f in self._in_flight.values()),
        )
        return min(times, default=None)
