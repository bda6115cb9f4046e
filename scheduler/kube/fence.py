"""The write fence: no write leaves this process unless it holds the leader Lease, with margin.

A replica that was paused (SIGSTOP, a long GC, a frozen VM) or cut off can wake up after another
replica took the Lease over, with writes it decided on before the pause still on their way. Checking
leadership once before a call is not enough: the pause can fall between the check and the moment
the bytes leave. The fence is consulted at that last moment instead (see `scheduler.kube.client`,
which consults it for every write the API client sends), and it is judged on this process's
monotonic clock, which keeps running while the process is stopped.

Timeline of one term, on this process's monotonic clock (client-go's leader election):

    s: the last successful acquire or renew request was started (its PUT was sent after s)
    s + renewDeadline: the elector stops leading unless it renewed meanwhile
    s + leaseDuration: the earliest moment any other replica can take the Lease over

    held_until = s + leaseDuration - margin, with margin = leaseDuration - renewDeadline

A write may go out only before `held_until`, and its client timeout is cut to end by then, so
each write starts and (as far as this client knows) ends inside the term, and `margin` seconds
remain before anyone else can lead, for the API server to finish a write already received and
for the two replicas' clocks to run at slightly different rates. A renewal that fails leaves
`held_until` where it was; the end of a term (the Lease seen taken, the renew deadline passed,
a release) closes the fence at once.

What the fence cannot do alone: a process frozen in the few microseconds between the last check
and the socket write sends that one request on waking. The margin covers the API server receiving
a write admitted just before `held_until`, not a pause of unbounded length at that exact
instruction. For the writes that allocate or take away GPUs (Bindings and Evictions), the API server
closes that gap: the fence also carries the term it was opened for (`term`: the Lease's namespace,
name, holder and transition count), the adapters write it on those requests as the annotation
`LEASE_TERM_ANNOTATION`, and the ValidatingAdmissionPolicy in manifests/fencing-policy.yaml refuses
a request whose term is not the Lease's current one. A write that leaves after another replica took
the Lease over is then refused by the server, however long the pause was.

The access reviews of the metrics server (TokenReview, SubjectAccessReview) are POSTs that store
nothing; they are not fenced, so a follower answers its own scrapes.

Unarmed (leader election disabled, or no elector at all, e.g. a test's client) the fence lets
every write through with its own timeout.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable

import structlog

from scheduler.kube.apierrors import APINotSentError

log = structlog.get_logger("gpu-scheduler.kube.fence")

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing: never fenced (lists and watches are GETs)."""

_LEASES = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/[^/]+/leases(/[^/]+)?/?$")
"""Lease objects and their collection: the elector's own writes, which acquire the fence."""

_REVIEWS = re.compile(
    r"^/apis/(authentication\.k8s\.io/v1/tokenreviews|"
    r"authorization\.k8s\.io/v1/subjectaccessreviews)/?$"
)
"""TokenReviews and SubjectAccessReviews (the metrics server's access checks): POSTs that store
nothing, so followers send them too."""

LEASE_TERM_ANNOTATION = "gpu-scheduler.io/lease-term"
"""Annotation on Bindings and Evictions: the term they were sent in, `namespace/name/holder/n`."""

MAX_PATH_CHARS = 200
"""Paths are echoed in logs and errors up to this length."""


def is_fenced(method: str, path: str) -> bool:
    """Whether a request of `method` to `path` (no host, no query) is a write the fence guards:
    every method but GET/HEAD/OPTIONS, except to coordination.k8s.io Leases and the reviews
    (TokenReview, SubjectAccessReview), which write nothing."""
    if method.upper() in READ_METHODS:
        return False
    return not _LEASES.match(path) and not _REVIEWS.match(path)


def lease_term(namespace: str, name: str, holder: str, transitions: int) -> str:
    """The term of Lease `namespace/name` held by `holder` after `transitions` changes of
    holder, as the fencing policy compares it: `namespace/name/holder/transitions`."""
    return f"{namespace}/{name}/{holder}/{transitions}"


def short(path: str) -> str:
    """`path` cut to `MAX_PATH_CHARS` for logs and messages."""
    return path if len(path) <= MAX_PATH_CHARS else path[: MAX_PATH_CHARS - 3] + "..."


class NotLeader(APINotSentError):
    """A write was refused by the fence and NOT sent (status 0: no answer, nothing written)."""

    def __init__(self, verb: str, path: str, why: str) -> None:
        super().__init__(f"not sent: {verb} {short(path)}: {why}", reason="NotLeader")
        self.verb = verb
        self.path = path
        self.why = why


class WriteFence:
    """When writes may go out, fed by the leader elector; see the module docstring.

    Contract for the elector: `arm()` once before competing (the fence is then closed),
    `renewed(started)` after every successful acquire or renew with the clock reading taken
    before that attempt's first request, `revoke(reason)` when a term ends. Contract for the
    client: `admit()` immediately before the bytes of a write go out; it raises `NotLeader`, or
    returns the timeout the write may use. `clock` is the monotonic clock (seconds) the elector
    uses too.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._armed = False
        self._lease_duration = 0.0
        self._margin = 0.0
        self._held_until = -math.inf
        self._why_closed = "no Lease acquired yet"
        self._term: str | None = None
        self.refused = 0
        """Writes refused so far."""

    @property
    def armed(self) -> bool:
        return self._armed

    @property
    def term(self) -> str | None:
        """The Lease term writes go out in, `namespace/name/holder/transitions` as
        `lease_term()` spells it; None when unarmed or closed."""
        return self._term if self._armed and self._held_until != -math.inf else None

    @property
    def held_until(self) -> float:
        """Clock reading after which no write may start (-inf: closed; inf: unarmed)."""
        return self._held_until if self._armed else math.inf

    def arm(self, lease_duration: float, margin: float) -> None:
        """Guard writes from now on with a Lease of `lease_duration` seconds; closed until the
        first `renewed()`. Raises ValueError unless 0 <= margin < lease_duration."""
        if not 0.0 <= margin < lease_duration:
            raise ValueError(
                f"fence margin must be in [0, lease duration {lease_duration:g}), got {margin:g}"
            )
        self._armed = True
        self._lease_duration = lease_duration
        self._margin = margin
        self._held_until = -math.inf
        self._why_closed = "no Lease acquired yet"
        self._term = None

    def renewed(self, started: float, term: str | None = None) -> None:
        """An acquire or renew that started at clock reading `started` succeeded, in `term`
        (see `lease_term`; None keeps the term already known)."""
        self._held_until = max(self._held_until, started + self._lease_duration - self._margin)
        if term is not None:
            self._term = term

    def revoke(self, reason: str) -> None:
        """The term ended (`reason` is said in every refusal until the next `renewed()`)."""
        self._held_until = -math.inf
        self._why_closed = f"leadership ended: {reason}"
        self._term = None

    def remaining(self) -> float:
        """Seconds a write admitted now may take (inf when unarmed; <= 0 when closed)."""
        if not self._armed:
            return math.inf
        return self._held_until - self._clock()

    def admit(self, verb: str, path: str, timeout: float | None) -> float | None:
        """Let one write go now: the timeout it may use, min(`timeout`, time left in the term)
        (`timeout` unchanged when unarmed; None means no timeout of its own). Raises `NotLeader`,
        logging `write_fenced`, when the term is over or was never held."""
        left = self.remaining()
        if left == math.inf:
            return timeout
        if left <= 0:
            if self._held_until == -math.inf:
                why = self._why_closed
            else:
                why = f"Lease held with margin only until {-left:.3f}s ago, not renewed since"
            self.refused += 1
            log.warning("write_fenced", verb=verb, path=short(path), why=why)
            raise NotLeader(verb, path, why)
        return left if timeout is None else min(timeout, left)
