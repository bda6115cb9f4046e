"""The `metricsServing` section: how the `/metrics`, `/healthz`, `/readyz` and `/livez` server on
`metricsAddress` is protected.

Off (`secure: false`, the built-in default) it answers plain HTTP to anyone, as it always did: the
local cluster, the demo and the tests scrape it that way. On (`manifests/` turn it on) it serves
HTTPS and lets a request read `/metrics` only when the API server says so, the way kube-scheduler
serves its secure port (k8s.io/apiserver@v0.37.2 pkg/server/options/authentication.go and
authorization.go): the bearer token checked with a TokenReview, then a SubjectAccessReview for the
non-resource URL `/metrics`, verb `get`; `/healthz`, `/readyz` and `/livez` stay open for probes.
Both answers are cached for a few seconds, as upstream's delegating authenticator and authorizer
do (10 s each by default there and here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scheduler.config.errors import ConfigError, Invalid
from scheduler.config.readers import boolean, finite, fmt, optional_path, show
from scheduler.config.tree import check_settings, reads

DEFAULT_CACHE_TTL_SECONDS = 10.0
"""Upstream's defaults: `--authentication-token-webhook-cache-ttl`,
`--authorization-webhook-cache-authorized-ttl` and `--authorization-webhook-cache-unauthorized-ttl`
are all 10 s (k8s.io/apiserver@v0.37.2 pkg/server/options/authentication.go,
`NewDelegatingAuthenticationOptions`; authorization.go, `NewDelegatingAuthorizationOptions`)."""
MAX_CACHE_TTL_SECONDS = 3600.0
"""A revoked token or a removed role binding is honoured at most this late."""


def _ttl(value: object) -> float:
    """A cache lifetime: seconds in 0..`MAX_CACHE_TTL_SECONDS` (0: no caching)."""
    what = f"a number of seconds in 0..{fmt(MAX_CACHE_TTL_SECONDS)}"
    seconds = finite(value, what)
    if not 0.0 <= seconds <= MAX_CACHE_TTL_SECONDS:
        raise Invalid(f"must be {what}, got {show(value)}")
    return seconds


@dataclass(frozen=True, slots=True)
class MetricsServingConfig:
    """TLS and delegated authentication and authorization of the metrics server; see
    docs/operations.md ("Who may read /metrics")."""

    secure: bool = field(default=False, metadata=reads(boolean))
    """Serve HTTPS, and `/metrics` only to bearer tokens the API server authenticates and
    authorizes (get on the non-resource URL `/metrics`). false: plain HTTP, open to anyone who
    reaches the address."""
    cert_file: Path | None = field(default=None, metadata=reads(optional_path))
    """PEM serving certificate (the chain, leaf first); with `keyFile`. null: a self-signed
    certificate is made at start, as kube-scheduler does without `--tls-cert-file`."""
    key_file: Path | None = field(default=None, metadata=reads(optional_path))
    """PEM private key of `certFile`."""
    authentication_cache_ttl_seconds: float = field(
        default=DEFAULT_CACHE_TTL_SECONDS,
        metadata=reads(_ttl),
    )
    """How long a TokenReview's answer (authenticated or not) is reused; 0: never."""
    authorization_allowed_cache_ttl_seconds: float = field(
        default=DEFAULT_CACHE_TTL_SECONDS,
        metadata=reads(_ttl),
    )
    """How long an allowing SubjectAccessReview answer is reused; 0: never."""
    authorization_denied_cache_ttl_seconds: float = field(
        default=DEFAULT_CACHE_TTL_SECONDS,
        metadata=reads(_ttl),
    )
    """How long a denying SubjectAccessReview answer is reused; 0: never."""

    def __post_init__(self) -> None:
        check_settings(self)
        if (self.cert_file is None) != (self.key_file is None):
            given, missing = ("certFile", "keyFile")[:: 1 if self.cert_file else -1]
            raise ConfigError(given, f"needs {missing} too (both or neither)", related=(missing,))
