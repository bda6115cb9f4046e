"""The TokenReview and SubjectAccessReview bodies the metrics server sends, and how their answers
are read (`scheduler.kube.access_reviews`), on plain data; the `metricsServing` settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from metrics.access import Decision, User
from scheduler.config import ConfigError, MetricsServingConfig, load_config
from scheduler.kube.access_reviews import (
    access_decision,
    reviewed_user,
    subject_access_review,
    token_review,
)


def test_token_review_carries_only_the_token() -> None:
    assert token_review("t0k") == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "t0k"},
    }


@pytest.mark.parametrize(
    ("answer", "user"),
    [
        (
            {
                "status": {
                    "authenticated": True,
                    "user": {
                        "username": "system:serviceaccount:monitoring:prometheus",
                        "uid": "1-2",
                        "groups": ["system:serviceaccounts", "system:authenticated"],
                        "extra": {"b": ["2"], "a": ["1", "x"]},
                    },
                }
            },
            User(
                "system:serviceaccount:monitoring:prometheus",
                "1-2",
                ("system:serviceaccounts", "system:authenticated"),
                (("a", ("1", "x")), ("b", ("2",))),
            ),
        ),
        ({"status": {"authenticated": True, "user": {"username": "u"}}}, User("u")),
        ({"status": {"authenticated": False, "error": "token expired"}}, None),
        ({"status": {"authenticated": True, "user": {}}}, None),  # no username: not trusted
        ({"status": {"authenticated": "true", "user": {"username": "u"}}}, None),
        ({"status": {}}, None),
        ({}, None),
    ],
)
def test_reviewed_user(answer: dict[str, Any], user: User | None) -> None:
    assert reviewed_user(answer) == user


def test_subject_access_review_asks_for_the_non_resource_url() -> None:
    user = User("alice", "9", ("team",), (("scopes", ("a",)),))
    assert subject_access_review(user, "/metrics", "get") == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "alice",
            "uid": "9",
            "groups": ["team"],
            "extra": {"scopes": ["a"]},
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        },
    }
    bare = subject_access_review(User("bob"), "/metrics", "get")["spec"]
    assert "uid" not in bare and "extra" not in bare and bare["groups"] == []


@pytest.mark.parametrize(
    ("status", "decision"),
    [
        ({"allowed": True}, Decision(True)),
        (
            {"allowed": True, "reason": "RBAC: allowed by ClusterRoleBinding"},
            Decision(True, "RBAC: allowed by ClusterRoleBinding"),
        ),
        ({"allowed": True, "denied": True}, Decision(False)),  # denied wins
        ({"allowed": False, "reason": "no rule"}, Decision(False, "no rule")),
        ({"allowed": False, "evaluationError": "webhook down"}, Decision(False, "webhook down")),
        ({}, Decision(False)),
    ],
)
def test_access_decision(status: dict[str, Any], decision: Decision) -> None:
    assert access_decision({"status": status}) == decision


def test_metrics_serving_defaults_to_plain_http_with_upstreams_cache_ttls() -> None:
    serving = load_config(None, {}, {}).metrics_serving
    assert serving == MetricsServingConfig()
    assert serving.secure is False
    assert serving.cert_file is None and serving.key_file is None
    assert (
        serving.authentication_cache_ttl_seconds,
        serving.authorization_allowed_cache_ttl_seconds,
        serving.authorization_denied_cache_ttl_seconds,
    ) == (10.0, 10.0, 10.0)


def test_metrics_serving_from_file_environment_and_flag(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "metricsServing:\n  certFile: /tls/tls.crt\n  keyFile: /tls/tls.key\n"
        "  authorizationDeniedCacheTtlSeconds: 0\n"
    )
    config = load_config(path, {"GPU_SCHEDULER_METRICS_SECURE": "true"}, {})
    serving = config.metrics_serving
    assert serving.secure is True
    assert serving.cert_file == Path("/tls/tls.crt") and serving.key_file == Path("/tls/tls.key")
    assert serving.authorization_denied_cache_ttl_seconds == 0.0
    off = load_config(
        path, {"GPU_SCHEDULER_METRICS_SECURE": "true"}, {"metricsServing.secure": False}
    )
    assert off.metrics_serving.secure is False


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"certFile": "/tls/tls.crt"}, "metricsServing.certFile: needs keyFile too"),
        ({"keyFile": "/tls/tls.key"}, "metricsServing.keyFile: needs certFile too"),
        ({"secure": "yes"}, "metricsServing.secure: must be"),
        ({"authenticationCacheTtlSeconds": -1}, "metricsServing.authenticationCacheTtlSeconds"),
        ({"authorizationAllowedCacheTtlSeconds": 3601}, "in 0..3600"),
        ({"clientCAFile": "/ca.crt"}, "unknown key"),
    ],
)
def test_metrics_serving_refuses(data: dict[str, Any], message: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"metricsServing": data}))
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(path, {}, {})
