"""Who may read /metrics (`metrics.access`), with an in-memory double of the API server's
reviews and a fake clock: probes' paths open, 401 without a token or with one the reviews do not
know, 403 when the access review denies, 200 when it allows; answers cached for their TTL
(allowed and denied apart), failures answered 500 and never cached, the caches bounded. Then the
same decisions over HTTPS through the aiohttp middleware, with a self-signed certificate."""

from __future__ import annotations

import asyncio
import ssl

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from hack.localcluster.cluster import free_port
from metrics.access import (
    ALWAYS_OPEN_PATHS,
    CacheTtls,
    Decision,
    MetricsAccess,
    TtlCache,
    User,
    Verdict,
    bearer_token,
)
from metrics.server import make_app, start_server
from scheduler.admission.certs import self_signed_context

READER = User("system:serviceaccount:monitoring:prometheus", "u-1", ("system:serviceaccounts",))
NOBODY = User("system:serviceaccount:default:nobody", "u-2", ("system:serviceaccounts",))
ADMIN = User("admin", "", ("system:masters",))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reviews:
    """The API server's reviews in memory: tokens -> users, users allowed to get paths; every
    call counted; `failing` makes the next calls raise."""

    def __init__(self) -> None:
        self.users = {"reader-token": READER, "nobody-token": NOBODY, "admin-token": ADMIN}
        self.allowed = {(READER.username, "/metrics")}
        self.token_reviews: list[str] = []
        self.access_reviews: list[tuple[str, str, str]] = []
        self.failing: BaseException | None = None

    async def authenticate(self, token: str) -> User | None:
        self.token_reviews.append(token)
        if self.failing:
            raise self.failing
        return self.users.get(token)

    async def authorize(self, user: User, path: str, verb: str) -> Decision:
        self.access_reviews.append((user.username, path, verb))
        if self.failing:
            raise self.failing
        if (user.username, path) in self.allowed:
            return Decision(True)
        return Decision(False, "no RBAC policy matched")


def access(reviews: Reviews, clock: Clock, ttls: CacheTtls | None = None) -> MetricsAccess:
    return MetricsAccess(reviews, ttls or CacheTtls(10.0, 10.0, 10.0), clock)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Bearer", None),
        ("Bearer ", None),
        ("Basic dXNlcjpwdw==", None),
        ("Bearer a b", None),
    ],
)
def test_bearer_token_of_the_authorization_header(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize(
    ("header", "verdict", "token_reviews", "access_reviews"),
    [
        (None, Verdict.UNAUTHENTICATED, 0, 0),
        ("Basic dXNlcjpwdw==", Verdict.UNAUTHENTICATED, 0, 0),
        ("Bearer unknown-token", Verdict.UNAUTHENTICATED, 1, 0),
        ("Bearer nobody-token", Verdict.FORBIDDEN, 1, 1),
        ("Bearer reader-token", Verdict.ALLOWED, 1, 1),
        ("Bearer admin-token", Verdict.ALLOWED, 1, 0),  # system:masters: no access review
    ],
)
async def test_verdicts_on_metrics(
    header: str | None, verdict: Verdict, token_reviews: int, access_reviews: int
) -> None:
    reviews = Reviews()
    answer = await access(reviews, Clock()).check("/metrics", header)
    assert answer.verdict is verdict
    assert len(reviews.token_reviews) == token_reviews
    assert len(reviews.access_reviews) == access_reviews
    if access_reviews:
        assert reviews.access_reviews[0][1:] == ("/metrics", "get")
    if verdict is Verdict.FORBIDDEN:
        assert answer.reason == "no RBAC policy matched"
        assert answer.user == NOBODY


@pytest.mark.parametrize("path", sorted(ALWAYS_OPEN_PATHS))
async def test_probe_paths_are_open_without_any_review(path: str) -> None:
    reviews = Reviews()
    reviews.failing = RuntimeError("the API server is down")
    answer = await access(reviews, Clock()).check(path, None)
    assert answer.verdict is Verdict.ALLOWED
    assert reviews.token_reviews == [] and reviews.access_reviews == []


async def test_other_paths_are_reviewed_for_their_own_path() -> None:
    reviews = Reviews()
    gate = access(reviews, Clock())
    assert (await gate.check("/healthz/extra", None)).verdict is Verdict.UNAUTHENTICATED
    assert (await gate.check("/debug", "Bearer reader-token")).verdict is Verdict.FORBIDDEN
    assert reviews.access_reviews == [(READER.username, "/debug", "get")]


async def test_answers_are_cached_for_their_ttl_then_asked_again() -> None:
    reviews, clock = Reviews(), Clock()
    gate = access(reviews, clock, CacheTtls(authentication=10.0, allowed=10.0, denied=2.0))
    for _ in range(3):
        assert (await gate.check("/metrics", "Bearer reader-token")).verdict is Verdict.ALLOWED
        assert (await gate.check("/metrics", "Bearer nobody-token")).verdict is Verdict.FORBIDDEN
        assert (await gate.check("/metrics", "Bearer bad")).verdict is Verdict.UNAUTHENTICATED
    assert len(reviews.token_reviews) == 3  # one per token: failures cached too
    assert len(reviews.access_reviews) == 2

    clock.now += 2.0  # the denial expired, nothing else
    reviews.allowed.add((NOBODY.username, "/metrics"))  # a role bound meanwhile
    assert (await gate.check("/metrics", "Bearer nobody-token")).verdict is Verdict.ALLOWED
    assert (await gate.check("/metrics", "Bearer reader-token")).verdict is Verdict.ALLOWED
    assert len(reviews.token_reviews) == 3
    assert len(reviews.access_reviews) == 3

    clock.now += 8.0  # everything expired
    del reviews.users["reader-token"]  # the token revoked
    assert (await gate.check("/metrics", "Bearer reader-token")).verdict is Verdict.UNAUTHENTICATED
    assert len(reviews.token_reviews) == 4


async def test_a_zero_ttl_caches_nothing() -> None:
    reviews = Reviews()
    gate = access(reviews, Clock(), CacheTtls(0.0, 0.0, 0.0))
    for _ in range(2):
        assert (await gate.check("/metrics", "Bearer reader-token")).verdict is Verdict.ALLOWED
    assert len(reviews.token_reviews) == 2 and len(reviews.access_reviews) == 2
    assert len(gate.tokens) == 0 and len(gate.decisions) == 0


async def test_tokens_are_kept_only_as_keyed_digests() -> None:
    gate = access(Reviews(), Clock())
    await gate.check("/metrics", "Bearer reader-token")
    (key,) = gate.tokens.entries
    assert "reader-token" not in key and len(key) == 64
    other = access(Reviews(), Clock())
    assert other.token_key("reader-token") != key  # a random key per process


@pytest.mark.parametrize("failing_review", ["token", "access"])
async def test_a_failed_review_answers_500_is_not_cached_and_never_raises(
    failing_review: str,
) -> None:
    reviews = Reviews()
    gate = access(reviews, Clock())
    if failing_review == "access":
        await gate.authenticate("reader-token")  # cached: only the access review runs below
    reviews.failing = ConnectionResetError("connection reset by peer")
    with capture_logs() as logs:
        answer = await gate.check("/metrics", "Bearer reader-token")
    assert answer.verdict is Verdict.ERROR and answer.verdict.status == 500
    assert "ConnectionResetError" in answer.reason
    [line] = [e for e in logs if e["event"] == "metrics_access_review_failed"]
    assert line["review"] == ("TokenReview" if failing_review == "token" else "SubjectAccessReview")
    reviews.failing = None
    assert (await gate.check("/metrics", "Bearer reader-token")).verdict is Verdict.ALLOWED


async def test_cancellation_passes_through() -> None:
    reviews = Reviews()
    reviews.failing = asyncio.CancelledError()
    with pytest.raises(asyncio.CancelledError):
        await access(reviews, Clock()).check("/metrics", "Bearer reader-token")


def test_ttl_cache_is_bounded_least_recently_used_first_and_expires() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(2, clock)
    cache.put("a", 1, 10.0)
    cache.put("b", 2, 10.0)
    assert cache.get("a") == 1  # "b" is now the least recently used
    cache.put("c", 3, 10.0)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    assert len(cache) == 2
    clock.now += 10.0
    assert cache.get("a") is None and len(cache) == 1  # expired entries dropped when met
    cache.put("d", 4, 0.0)
    assert cache.get("d") is None
    with pytest.raises(ValueError, match="max_entries"):
        TtlCache(0, clock)


async def test_the_token_cache_stays_bounded_under_many_tokens() -> None:
    gate = MetricsAccess(Reviews(), CacheTtls(), Clock(), max_entries=16)
    for n in range(100):
        await gate.check("/metrics", f"Bearer random-{n}")
    assert len(gate.tokens) == 16


async def test_the_server_over_https_answers_401_403_200_and_open_probes() -> None:
    registry = CollectorRegistry()
    reviews = Reviews()
    port = free_port()
    app = make_app(registry, lambda: True, access(reviews, Clock()))
    runner = await start_server(app, "127.0.0.1", port, self_signed_context(["127.0.0.1"]))
    base = f"https://127.0.0.1:{port}"
    client_tls = ssl.create_default_context()
    client_tls.check_hostname = False
    client_tls.verify_mode = ssl.CERT_NONE
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_tls)) as http:

            async def status(path: str, token: str | None = None) -> tuple[int, str]:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                async with http.get(f"{base}{path}", headers=headers) as response:
                    return response.status, await response.text()

            assert (await status("/metrics"))[0] == 401
            assert (await status("/metrics", "unknown-token"))[0] == 401
            code, body = await status("/metrics", "nobody-token")
            assert code == 403
            assert f'User "{NOBODY.username}" cannot get path "/metrics"' in body
            assert (await status("/metrics", "reader-token"))[0] == 200
            for probe in ("/healthz", "/readyz", "/livez"):
                assert (await status(probe))[0] == 200
            reviews.failing = TimeoutError()
            assert (await status("/metrics", "other-token"))[0] == 500
        async with aiohttp.ClientSession() as plain:  # no TLS: refused
            with pytest.raises(aiohttp.ClientError):
                await plain.get(f"http://127.0.0.1:{port}/healthz")
    finally:
        await runner.cleanup()
