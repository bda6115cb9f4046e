"""Who may read `/metrics`: delegated authentication and authorization with short-lived caches,
the way kube-scheduler guards its secure port.

`MetricsAccess.check(path, authorization)` answers one request with a `Verdict`:

    path in ALWAYS_OPEN_PATHS         ALLOWED, nothing asked (probes; upstream's
                                      `--authorization-always-allow-paths` default)
    no `Bearer <token>` header        UNAUTHENTICATED (401)
    token not authenticated           UNAUTHENTICATED (401)   one TokenReview
    user in ALWAYS_ALLOWED_GROUPS     ALLOWED, no SubjectAccessReview (upstream's
                                      `AlwaysAllowGroups` default, system:masters)
    access review denies              FORBIDDEN (403)         one SubjectAccessReview,
    access review allows              ALLOWED (200)           verb `get` on the path
    a review fails (API error, time)  ERROR (500), logged; nothing cached; never raises

The upstream behaviour copied here is in k8s.io/apiserver@v0.37.2: pkg/server/options/
authorization.go (`NewDelegatingAuthorizationOptions`: allow and deny answers cached 10 s each,
always-allowed paths and groups), pkg/server/options/authentication.go (token answers cached 10 s),
pkg/authentication/authenticatorfactory/delegating.go (the same TTL for a token that passed and
one that did not, errors not cached), pkg/authentication/token/cache/cached_token_authenticator.go
(tokens are cache keys only as an HMAC under a random per-process key) and
plugin/pkg/authorizer/webhook/webhook.go (an LRU of 8192 answers). Upstream answers an error of
the authenticator with 401; this one answers 500 for both reviews, so a broken API connection is
not mistaken for a bad token.

The reviews themselves are an `AccessReviews` (the API server's TokenReview and
SubjectAccessReview in `scheduler.kube.access_reviews`; in-memory doubles in tests). Both caches
are `TtlCache`s: bounded (least recently used out first) and judged on an injectable clock.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import structlog

log = structlog.get_logger("gpu-scheduler.metrics.access")

ALWAYS_OPEN_PATHS = frozenset({"/healthz", "/readyz", "/livez"})
"""Answered without a token: kubelet's probes carry none."""
ALWAYS_ALLOWED_GROUPS = frozenset({"system:masters"})
"""Authenticated members are allowed without an access review (the API server's own authorizer
allows them everything anyway)."""
VERB = "get"
"""The verb of the non-resource access review: a scrape is a GET."""
MAX_CACHE_ENTRIES = 8192
"""Entries of each cache; upstream's authorizer keeps an LRU of this size."""
MAX_REASON_CHARS = 200
"""A review's reason is cut to this in logs and in a 403's body."""

K = TypeVar("K")
V = TypeVar("V")


class Verdict(enum.Enum):
    """The answer to one request; `status` is its HTTP status code."""

    ALLOWED = 200
    UNAUTHENTICATED = 401
    FORBIDDEN = 403
    ERROR = 500

    @property
    def status(self) -> int:
        return int(self.value)


@dataclass(frozen=True, slots=True)
class User:
    """An authenticated user as a TokenReview returns it; hashable, a cache key."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Sorted by key, as the access review needs them back."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A SubjectAccessReview's answer: allowed or not, and the authorizer's reason."""

    allowed: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Answer:
    """What `MetricsAccess.check` decided, with the user (when authenticated) and a reason."""

    verdict: Verdict
    user: User | None = None
    reason: str = ""


class AccessReviews(Protocol):
    """The API server's reviews. Both raise on failure (no answer, an error status)."""

    async def authenticate(self, token: str) -> User | None:
        """The user `token` belongs to; None when the API server does not authenticate it."""
        ...

    async def authorize(self, user: User, path: str, verb: str) -> Decision:
        """Whether `user` may `verb` the non-resource URL `path`."""
        ...


@dataclass(frozen=True, slots=True)
class CacheTtls:
    """Seconds each kind of answer is reused; 0: not cached."""

    authentication: float = 10.0
    """Of a TokenReview, authenticated or not."""
    allowed: float = 10.0
    """Of a SubjectAccessReview that allowed."""
    denied: float = 10.0
    """Of a SubjectAccessReview that denied."""


class TtlCache(Generic[K, V]):
    """At most `max_entries` values, each until its own expiry on `clock`; the least recently
    used entry goes first when full. Expired entries are dropped when met."""

    def __init__(self, max_entries: int, clock: Callable[[], float]) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.clock = clock
        self.entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        """key -> (expiry on `clock`, value), least recently used first."""

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: K) -> V | None:
        """The value of `key` if present and not expired, else None."""
        found = self.entries.get(key)
        if found is None:
            return None
        expires, value = found
        if self.clock() >= expires:
            del self.entries[key]
            return None
        self.entries.move_to_end(key)
        return value

    def put(self, key: K, value: V, ttl: float) -> None:
        """Keep `value` for `ttl` seconds (nothing kept when `ttl` <= 0)."""
        if ttl <= 0:
            return
        self.entries[key] = (self.clock() + ttl, value)
        self.entries.move_to_end(key)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Authenticated:
    """A cached TokenReview answer (`user` None: not authenticated)."""

    user: User | None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (scheme case-insensitive, as
    upstream's bearertoken authenticator reads it); None when absent, empty or another scheme."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


class MetricsAccess:
    """Decides requests to the metrics server; see the module docstring."""

    def __init__(
        self,
        reviews: AccessReviews,
        ttls: CacheTtls | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_CACHE_ENTRIES,
    ) -> None:
        self.reviews = reviews
        self.ttls = ttls or CacheTtls()
        self.tokens: TtlCache[str, Authenticated] = TtlCache(max_entries, clock)
        """HMAC of a token -> its TokenReview's answer."""
        self.decisions: TtlCache[tuple[User, str, str], Decision] = TtlCache(max_entries, clock)
        """(user, path, verb) -> the SubjectAccessReview's answer."""
        self.key = secrets.token_bytes(32)
        """The per-process HMAC key of token cache keys: no token is kept in memory."""

    def token_key(self, token: str) -> str:
        return hmac.new(self.key, token.encode(), hashlib.sha256).hexdigest()

    async def check(self, path: str, authorization: str | None) -> Answer:
        """The verdict on a GET of `path` with that Authorization header; never raises (but
        passes cancellation)."""
        if path in ALWAYS_OPEN_PATHS:
            return Answer(Verdict.ALLOWED)
        token = bearer_token(authorization)
        if token is None:
            return Answer(Verdict.UNAUTHENTICATED, reason="no bearer token")
        try:
            user = await self.authenticate(token)
        except Exception as error:  # any failure is an answer, never a crash
            return self.failed("TokenReview", error)
        if user is None:
            return Answer(Verdict.UNAUTHENTICATED, reason="token not authenticated")
        if ALWAYS_ALLOWED_GROUPS.intersection(user.groups):
            return Answer(Verdict.ALLOWED, user)
        try:
            decision = await self.authorize(user, path)
        except Exception as error:
            return self.failed("SubjectAccessReview", error, user)
        if decision.allowed:
            return Answer(Verdict.ALLOWED, user)
        return Answer(Verdict.FORBIDDEN, user, decision.reason[:MAX_REASON_CHARS])

    async def authenticate(self, token: str) -> User | None:
        key = self.token_key(token)
        cached = self.tokens.get(key)
        if cached is not None:
            return cached.user
        user = await self.reviews.authenticate(token)
        self.tokens.put(key, Authenticated(user), self.ttls.authentication)
        return user

    async def authorize(self, user: User, path: str) -> Decision:
        key = (user, path, VERB)
        cached = self.decisions.get(key)
        if cached is not None:
            return cached
        decision = await self.reviews.authorize(user, path, VERB)
        ttl = self.ttls.allowed if decision.allowed else self.ttls.denied
        self.decisions.put(key, decision, ttl)
        return decision

    def failed(self, review: str, error: Exception, user: User | None = None) -> Answer:
        reason = f"{review} failed: {type(error).__name__}: {error}"[:MAX_REASON_CHARS]
        log.warning(
            "metrics_access_review_failed",
            review=review,
            user=user.username if user else None,
            error=reason,
        )
        return Answer(Verdict.ERROR, user, reason)
