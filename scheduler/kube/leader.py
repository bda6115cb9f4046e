"""Leader election on a coordination.k8s.io/v1 Lease: only the leader schedules.

Replicas compete for one Lease (`leaderElection.leaseNamespace/leaseName`); the holder schedules,
the others keep warm caches. The protocol is client-go's (`tools/leaderelection`), judged on this
process's own monotonic clock so clock skew between machines does not matter:

- A candidate reads the Lease. Absent: it creates it, holding it. Held by someone else: it notes
  when it last saw the record change and may take over only once `leaseDurationSeconds` (the
  Lease's own value) have passed since then with no change, or at once if `holderIdentity` is
  empty (a released Lease). Writes are `replace` calls carrying the read `resourceVersion`, so
  of two candidates racing for the same expired Lease exactly one wins (the other gets 409).
- The leader renews (`renewTime`) every `retryPeriodSeconds`. It stops leading as soon as it sees
  another holder in the Lease, or when `renewDeadlineSeconds` have passed since the start of its
  last successful renewal. Since `renewDeadline < leaseDuration` and a follower starts counting
  only after it sees that renewal, the old leader stops before anyone else can start.
- `release()` hands the Lease over on a graceful stop: `holderIdentity` emptied and
  `leaseDurationSeconds` 1, so a follower takes over at its next attempt.
- Given a `WriteFence` (`scheduler.kube.fence`, the one of the API client the daemon writes
  through), the elector arms it with the margin `leaseDurationSeconds - renewDeadlineSeconds`,
  extends it after every successful acquire or renew from the moment that attempt started, and
  closes it at the end of every term, before any callback or hook runs. The fence, not
  `is_leader`, is what keeps a paused replica from writing after it wakes up.

Contract for the daemon (both `LeaderElector` and `AlwaysLeader`, the latter for
`leaderElection.enabled: false`):

- `run()` competes until `release()` or cancellation, leading any number of terms. It must be
  running for anything below to become true.
- `leading` is an `asyncio.Event` set exactly during a term. `is_leader` is stricter: it also
  turns False the moment the renew deadline passes, before the renew loop notices. Check it right
  before every bind; `await elector.leading.wait()` before a scheduling cycle.
- `async with elector.leadership() as lost:` waits for a term, then runs the block. If the term
  ends involuntarily, the block's task is cancelled at once and the `async with` raises
  `LeadershipLost`; if it ends through `release()`, the block is cancelled (unless it is the
  caller of `release()`) and the `async with` exits quietly. `lost` is the term's own Event, set
  when that term ends and never cleared, so work started in a term (binding tasks) can tell that
  its term is over even if a new one has begun.
- `on_started_leading` / `on_stopped_leading` (arguments of `run()`) are plain callables, called
  synchronously at each transition; they must not block. `on_stopped_leading` fires before any
  other candidate can have taken over (see above).

Why not `kubernetes_asyncio.leaderelection`: it has a Lease lock, but no way to stop or release,
no `is_leader`, requires retry periods of at least 1 s, writes local wall-clock times as if they
were UTC, keeps the leader running until a whole renew deadline after a rival has taken the Lease,
and tells the leader it lost only after its renew loop returns (no deadline on a hung request).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, cast

import aiohttp
import structlog
from kubernetes_asyncio import client

from scheduler.config import LeaderElectionConfig
from scheduler.kube.fence import WriteFence, lease_term

log = structlog.get_logger()

Callback = Callable[[], None]
_API_ERRORS = (client.ApiException, aiohttp.ClientError, OSError, TimeoutError)
RELEASED_LEASE_DURATION_SECONDS = 1
"""`leaseDurationSeconds` written on release, as client-go does."""


class LeadershipLost(Exception):
    """Raised by a `leadership()` block whose term ended other than through `release()`."""


class _Term:
    """One uninterrupted period of leadership."""

    def __init__(self) -> None:
        self.lost = asyncio.Event()
        self.hooks: set[Callable[[bool], None]] = set()
        """Called with `released` when the term ends, from whichever task ends it."""


class Elector(ABC):
    """Shared term bookkeeping and the `leadership()` block; see the module docstring."""

    def __init__(self, identity: str, lease: str) -> None:
        self.identity = identity
        self.leading = asyncio.Event()
        """Set exactly while this process leads."""
        self._lease = lease
        self._term: _Term | None = None
        self._on_started: Callback | None = None
        self._on_stopped: Callback | None = None
        self._log = log.bind(lease=lease, identity=identity)

    @property
    def is_leader(self) -> bool:
        """True while this process leads; safe to check before every write that needs it."""
        return self.leading.is_set()

    @abstractmethod
    async def run(
        self, on_started_leading: Callback | None = None, on_stopped_leading: Callback | None = None
    ) -> None:
        """Compete for leadership until `release()` or cancellation."""

    @abstractmethod
    async def release(self) -> None:
        """Stop leading and competing; idempotent. Returns once `run()` has returned."""

    def leadership(self) -> Leadership:
        """`async with elector.leadership() as lost:` runs the block during one term."""
        return Leadership(self)

    def _start_term(self) -> None:
        self._term = _Term()
        self.leading.set()
        self._log.info("leader_elected")
        self._call(self._on_started, "on_started_leading")

    def _end_term(self, reason: str, released: bool = False) -> None:
        """End the current term at once (no await): clear `leading`, then hooks and callback."""
        term = self._term
        if term is None or not self.leading.is_set():
            return
        self.leading.clear()
        term.lost.set()
        for hook in list(term.hooks):
            hook(released)
        if released:
            self._log.info("leader_released", reason=reason)
        else:
            self._log.warning("leader_lost", reason=reason)
        self._call(self._on_stopped, "on_stopped_leading")

    def _call(self, callback: Callback | None, name: str) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:
            self._log.exception("leader_callback_failed", callback=name)


class Leadership:
    """The `leadership()` block: waits for a term, cancels its body when the term ends.

    Cancellation works as `asyncio.timeout` does: the body's task is cancelled, and on exit the
    cancellation this block caused is absorbed (`Task.uncancel`) and turned into
    `LeadershipLost`, while a cancellation from outside still propagates.
    """

    def __init__(self, elector: Elector) -> None:
        self._elector = elector
        self._term: _Term | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False
        self._released = False

    async def __aenter__(self) -> asyncio.Event:
        term = await self._wait_for_term()
        self._term = term
        self._task = asyncio.current_task()
        term.hooks.add(self._on_term_end)
        return term.lost

    async def _wait_for_term(self) -> _Term:
        while True:
            await self._elector.leading.wait()
            term = self._elector._term
            if self._elector.leading.is_set() and term is not None and not term.lost.is_set():
                return term

    def _on_term_end(self, released: bool) -> None:
        self._released = released
        if self._task is not None and asyncio.current_task() is not self._task:
            self._cancelled = True
            self._task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        assert self._term is not None and self._task is not None
        self._term.hooks.discard(self._on_term_end)
        if not self._cancelled:
            return False
        if exc_type is None:
            # The body finished before our cancellation reached it: take delivery here, so it
            # does not surface at the caller's next await.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
        if self._task.uncancel() > 0:  # cancelled from outside as well: that one goes through
            if exc_type is asyncio.CancelledError:
                return False
            raise asyncio.CancelledError
        if exc_type is not None and exc_type is not asyncio.CancelledError:
            return False  # the body's own exception wins
        if self._released:
            return True
        raise LeadershipLost(f"lost leadership of Lease {self._elector._lease}") from exc


class AlwaysLeader(Elector):
    """Leader election disabled: leads from `run()` until `release()` or cancellation."""

    def __init__(self, identity: str, lease: str = "(election disabled)") -> None:
        super().__init__(identity, lease)
        self._stop = asyncio.Event()
        self._exited = asyncio.Event()
        self._exited.set()

    async def run(
        self, on_started_leading: Callback | None = None, on_stopped_leading: Callback | None = None
    ) -> None:
        self._on_started, self._on_stopped = on_started_leading, on_stopped_leading
        self._exited.clear()
        try:
            if not self._stop.is_set():
                self._start_term()
                await self._stop.wait()
        finally:
            self._end_term("stopped")
            self._exited.set()

    async def release(self) -> None:
        self._stop.set()
        self._end_term("released", released=True)
        await self._exited.wait()


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The election fields of a Lease's spec ("" / 0 / None where the Lease has none)."""

    holder: str = ""
    duration_seconds: int = 0
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: client.V1LeaseSpec | None) -> LeaseRecord:
        if spec is None:
            return cls()
        return cls(
            holder=spec.holder_identity or "",
            duration_seconds=spec.lease_duration_seconds or 0,
            acquire_time=spec.acquire_time,
            renew_time=spec.renew_time,
            transitions=spec.lease_transitions or 0,
        )

    def to_spec(self) -> dict[str, object]:
        """The spec fields as JSON; times as MicroTime (RFC 3339, microseconds, UTC)."""
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_seconds,
            "acquireTime": _micro_time(self.acquire_time),
            "renewTime": _micro_time(self.renew_time),
            "leaseTransitions": self.transitions,
        }


def _describe(error: BaseException) -> str:
    """A one-line description of a failed request (an ApiException's str is pages long)."""
    if isinstance(error, client.ApiException):
        return f"{error.status} {error.reason}"
    return str(error) or type(error).__name__


def _micro_time(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector(Elector):
    """Leader election on a Lease (protocol and contract in the module docstring).

    `identity` defaults to `config.identity`; two candidates must never share one. `clock` is
    the monotonic clock (seconds) that expiry and deadlines are judged on; `fence`, when given,
    is armed here and fed from then on (see the module docstring) and must use the same clock.
    Create it inside the event loop it will run on.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        config: LeaderElectionConfig,
        identity: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        fence: WriteFence | None = None,
    ) -> None:
        super().__init__(
            identity or config.identity, f"{config.lease_namespace}/{config.lease_name}"
        )
        self.config = config
        self._api_client = api_client
        self._api = client.CoordinationV1Api(api_client)
        self._clock = clock
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        """Clock reading at the start of the last successful acquire or renew."""
        self._stop = asyncio.Event()
        self._exited = asyncio.Event()
        self._exited.set()
        self._running = False
        self._fence = fence
        if fence is not None:
            fence.arm(
                config.lease_duration_seconds,
                config.lease_duration_seconds - config.renew_deadline_seconds,
            )

    @property
    def is_leader(self) -> bool:
        """True during a term and before the renew deadline of the last successful renewal."""
        return (
            self.leading.is_set()
            and self._renewed_at is not None
            and self._clock() < self._renewed_at + self.config.renew_deadline_seconds
        )

    @property
    def observed_holder(self) -> str:
        """`holderIdentity` as last read or written ("" if none or never read)."""
        return self._observed.holder if self._observed else ""

    async def run(
        self, on_started_leading: Callback | None = None, on_stopped_leading: Callback | None = None
    ) -> None:
        """Compete until `release()` or cancellation; raises `RuntimeError` if already running."""
        if self._running:
            raise RuntimeError("LeaderElector.run() is already running")
        self._running = True
        self._exited.clear()
        self._on_started, self._on_stopped = on_started_leading, on_stopped_leading
        try:
            while not self._stop.is_set():
                if not await self._acquire():
                    break
                self._start_term()
                reason = await self._renew()
                self._end_term(reason, released=self._stop.is_set())
        finally:
            self._end_term("elector stopped", released=self._stop.is_set())
            self._running = False
            self._exited.set()

    async def release(self) -> None:
        """Stop leading at once, stop competing, and hand the Lease over if this process holds it.

        Idempotent. Waits for `run()` to return (at most about one request's renew deadline), then
        empties `holderIdentity` and sets `leaseDurationSeconds` to 1, only if the Lease still
        names this identity. A failure to write is logged, not raised: the Lease then simply
        expires.
        """
        self._stop.set()
        self._end_term("released", released=True)
        await self._exited.wait()
        try:
            async with asyncio.timeout(self.config.renew_deadline_seconds):
                await self._give_back()
        except _API_ERRORS as error:
            self._log.warning("lease_release_failed", error=_describe(error))

    async def _acquire(self) -> bool:
        """Try every retry period until this process holds the Lease (True) or is stopped."""
        while not self._stop.is_set():
            started = self._clock()
            if await self._attempt(self.config.renew_deadline_seconds, leading=False):
                if self._stop.is_set():
                    return False
                self._held(started)
                return True
            await self._pause(self.config.retry_period_seconds)
        return False

    async def _renew(self) -> str:
        """Renew every retry period while leading; returns why the term ended."""
        while True:
            assert self._renewed_at is not None
            remaining = self._renewed_at + self.config.renew_deadline_seconds - self._clock()
            await self._pause(min(self.config.retry_period_seconds, max(remaining, 0.0)))
            if self._stop.is_set():
                return "released"
            started = self._clock()
            remaining = self._renewed_at + self.config.renew_deadline_seconds - started
            if remaining <= 0:
                return "renew deadline passed"
            if await self._attempt(remaining, leading=True):
                self._held(started)
            elif self.observed_holder != self.identity:
                return f"Lease taken by {self.observed_holder or 'nobody'}"

    def _held(self, started: float) -> None:
        """An acquire or renew that started at clock reading `started` succeeded."""
        self._renewed_at = started
        if self._fence is not None and not self._stop.is_set():  # release() closed it for good
            transitions = self._observed.transitions if self._observed else 0
            term = lease_term(
                self.config.lease_namespace, self.config.lease_name, self.identity, transitions
            )
            self._fence.renewed(started, term)

    def _end_term(self, reason: str, released: bool = False) -> None:
        if self._fence is not None:
            self._fence.revoke(reason)
        super()._end_term(reason, released)

    async def _pause(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self._stop.wait()
        except TimeoutError:
            pass

    async def _attempt(self, timeout: float, leading: bool) -> bool:
        """One acquire-or-renew within `timeout` seconds; False on any API failure."""
        try:
            async with asyncio.timeout(timeout):
                return await self._try_acquire_or_renew()
        except _API_ERRORS as error:
            event = "lease_renew_failed" if leading else "lease_acquire_failed"
            conflict = isinstance(error, client.ApiException) and error.status == 409
            level = self._log.debug if conflict and not leading else self._log.warning
            level(event, error=_describe(error))
            return False

    def _observe(self, record: LeaseRecord, at: float) -> None:
        if record != self._observed:
            previous = self._observed.holder if self._observed else None
            if record.holder not in (previous, self.identity):
                self._log.info("leader_observed", holder=record.holder)
            self._observed = record
            self._observed_at = at

    async def _try_acquire_or_renew(self) -> bool:
        """client-go's tryAcquireOrRenew: True when this process holds the Lease afterwards."""
        name, namespace = self.config.lease_name, self.config.lease_namespace
        wall = datetime.now(UTC)
        try:
            lease = await self._api.read_namespaced_lease(name, namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise
            record = LeaseRecord(self.identity, self.config.lease_duration_seconds, wall, wall, 0)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": record.to_spec(),
            }
            await self._api.create_namespaced_lease(namespace, cast(Any, body))  # JSON-shaped
            self._observe(record, self._clock())
            return True

        # As client-go: a change counts from when we received it, not from when we asked.
        seen_at = self._clock()
        seen = LeaseRecord.from_spec(lease.spec)
        self._observe(seen, seen_at)
        if (
            seen.holder
            and seen.holder != self.identity
            and seen_at < self._observed_at + seen.duration_seconds
        ):
            return False
        if seen.holder == self.identity:
            record = dataclasses.replace(
                seen, duration_seconds=self.config.lease_duration_seconds, renew_time=wall
            )
        else:
            record = LeaseRecord(
                self.identity, self.config.lease_duration_seconds, wall, wall, seen.transitions + 1
            )
        await self._replace(lease, record)
        self._observe(record, self._clock())
        return True

    async def _replace(self, lease: client.V1Lease, record: LeaseRecord) -> None:
        """PUT the Lease with `record`, keeping its other fields and its resourceVersion."""
        spec = dict(self._api_client.sanitize_for_serialization(lease.spec) or {})
        spec.update(record.to_spec())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": self._api_client.sanitize_for_serialization(lease.metadata),
            "spec": spec,
        }
        await self._api.replace_namespaced_lease(
            self.config.lease_name,
            self.config.lease_namespace,
            cast(Any, body),  # JSON-shaped
        )

    async def _give_back(self) -> None:
        try:
            lease = await self._api.read_namespaced_lease(
                self.config.lease_name, self.config.lease_namespace
            )
        except client.ApiException as error:
            if error.status == 404:
                return
            raise
        seen = LeaseRecord.from_spec(lease.spec)
        if seen.holder != self.identity:
            return
        wall = datetime.now(UTC)
        record = LeaseRecord("", RELEASED_LEASE_DURATION_SECONDS, wall, wall, seen.transitions)
        await self._replace(lease, record)
        self._observe(record, self._clock())
        self._log.info("lease_released")


def make_elector(
    api_client: client.ApiClient,
    config: LeaderElectionConfig,
    identity: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    fence: WriteFence | None = None,
) -> Elector:
    """A `LeaderElector`, or an `AlwaysLeader` when `config.enabled` is false (which leaves
    `fence` unarmed: every write goes out)."""
    if not config.enabled:
        return AlwaysLeader(identity or config.identity)
    return LeaderElector(api_client, config, identity, clock, fence)
