"""Client-side pacing of Binding calls: a token bucket, and the pauses the API server asks for.

    acquire(): [paused? wait until the pause ends] -> [a token? take it : wait for one] -> go

The bucket is client-go's (what bounds kube-scheduler's calls): `qps` tokens a second, at most
`burst` saved up, so after a quiet spell `burst` calls go at once and then `qps` a second.

A pause comes from the API server: a 429 answer (API Priority and Fairness turned the request
away, or the max-in-flight limit did) carries Retry-After, the seconds to wait before trying
again. client-go honours it for the one request it retries; here the Binding is not retried
(its pod backs off and is scheduled again), and instead no Binding goes out until the pause has
passed: the server said it is overloaded for this client, so every bind waits, not only the
refused one. The bucket restarts empty after a pause, so the binds that waited do not go out as
one burst into a server that just refused one; they go at `qps` a second. APF's Retry-After
starts at 1 s and doubles while its rejections go on (up to 32 s; k8s.io/apiserver v0.37.2
pkg/util/flowcontrol/dropped_requests_tracker.go), so honouring it is also the adaptive
back-off: the longer the overload, the longer the pauses.

Waiting binds take tokens in the order they asked (one waits on the clock, the others on a
FIFO lock); cancelling a waiting bind gives nothing back and takes nothing.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

DEFAULT_PAUSE_S = 1.0
"""A 429 that names no Retry-After pauses this long (client-go's default wait, and APF's first
Retry-After)."""
MAX_PAUSE_S = 60.0
"""No single pause is longer than this, whatever a Retry-After says (APF's own maximum is
32 s)."""


TOKEN_TOLERANCE = 1e-9
"""A token short of whole by less than this counts as whole: a sleep of `(1 - tokens) / qps`
refills `qps * slept` tokens, which floating point may leave a hair below 1 (0.01 s at 100 a
second gives 0.9999999999999), and a clock cannot advance by the hair's sleep."""


class BindRateLimiter:
    """`qps` Binding calls a second on average, `burst` at once after a quiet spell (`qps` 0:
    no bucket, only pauses), and no call while paused (`pause`). `clock` and `sleep` are
    injectable for tests (defaults: `time.monotonic`, `asyncio.sleep`)."""

    def __init__(
        self,
        qps: float,
        burst: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """`burst` 0 means twice `qps`, at least 1."""
        self.qps = max(qps, 0.0)
        self.burst = burst if burst > 0 else max(1, math.ceil(2 * self.qps))
        self.clock = clock
        self.sleep = sleep
        self.tokens = float(self.burst)
        self.refilled_at = clock()
        self.resume_at = -math.inf
        """No call starts before this time (`clock`); -inf: never paused."""
        self.pauses = 0
        """Pauses asked for so far (each 429 that reached `pause`)."""
        self._turn = asyncio.Lock()

    @property
    def limited(self) -> bool:
        """Whether the bucket applies (`qps` > 0)."""
        return self.qps > 0

    async def acquire(self) -> None:
        """Wait until a call may go out: no pause in force, and (with a bucket) a token, which
        is taken."""
        async with self._turn:
            while True:
                now = self.clock()
                if now < self.resume_at:
                    await self.sleep(self.resume_at - now)
                    continue
                if not self.limited:
                    return
                self._refill(now)
                if self.tokens >= 1 - TOKEN_TOLERANCE:
                    self.tokens = max(0.0, self.tokens - 1)
                    return
                await self.sleep((1 - self.tokens) / self.qps)

    def _refill(self, now: float) -> None:
        since = max(self.refilled_at, self.resume_at)
        if now > since:
            self.tokens = min(float(self.burst), self.tokens + (now - since) * self.qps)
        self.refilled_at = now

    def pause(self, seconds: float | None) -> float:
        """The API server asked to wait `seconds` (None: it named none, `DEFAULT_PAUSE_S`;
        capped at `MAX_PAUSE_S`): no call starts until then, and the bucket restarts empty
        when the pause ends. A pause in force is only ever lengthened. Returns the pause's
        length from now."""
        wait = DEFAULT_PAUSE_S if seconds is None else min(max(seconds, 0.0), MAX_PAUSE_S)
        now = self.clock()
        self.resume_at = max(self.resume_at, now + wait)
        self.tokens = 0.0
        self.refilled_at = now
        self.pauses += 1
        return self.resume_at - now


def bind_rate_limiter(qps: float, burst: int = 0) -> BindRateLimiter:
    """The limiter of Binding calls for `binding.qps` / `binding.burst`: a bucket of `qps` a
    second holding `burst` (0: twice `qps`, at least 1), none when `qps` is 0; pauses for
    Retry-After either way."""
    return BindRateLimiter(qps, burst)
