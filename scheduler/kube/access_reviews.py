"""The API server's TokenReview and SubjectAccessReview, the reviews the metrics server delegates
to (`metrics.access.AccessReviews`), as kube-scheduler's secure port does.

    authenticate(token)            POST authentication.k8s.io/v1 tokenreviews, `spec.token`
                                   only (no audiences: the API server's own); the user of
                                   `status.user` when `status.authenticated`, else None
    authorize(user, path, verb)    POST authorization.k8s.io/v1 subjectaccessreviews with the
                                   user, uid, groups and extra, and `nonResourceAttributes`
                                   {path, verb}; allowed when `status.allowed` and not
                                   `status.denied`

The object shapes are k8s.io/api@v0.37.2 authentication/v1/types.go and authorization/v1/types.go.
Neither review is stored nor passes admission policies, so they are not writes the leader fence
guards (`scheduler.kube.fence.is_fenced`): every replica answers its own scrapes. The caller
needs `create` on both resources (manifests/rbac.yaml). Failures raise `APIError`, each request
bounded by `timeout_s`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client

from metrics.access import Decision, User
from scheduler.kube.apierrors import api_call, expect_success

REVIEW_TIMEOUT_S = 5.0
"""Upper bound of one review request (upstream's client timeout is 10 s; a scrape waits less)."""


def token_review(token: str) -> dict[str, Any]:
    """The TokenReview asking who `token` belongs to."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }


def reviewed_user(answer: Mapping[str, Any]) -> User | None:
    """The user of a TokenReview answer; None unless `status.authenticated` is true and a
    username is given."""
    status = answer.get("status") or {}
    if status.get("authenticated") is not True:
        return None
    user = status.get("user") or {}
    username = user.get("username")
    if not isinstance(username, str) or not username:
        return None
    extra = user.get("extra") or {}
    return User(
        username=username,
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(v) for v in vs or ())) for k, vs in extra.items())),
    )


def subject_access_review(user: User, path: str, verb: str) -> dict[str, Any]:
    """The SubjectAccessReview asking whether `user` may `verb` the non-resource URL `path`."""
    spec: dict[str, Any] = {
        "user": user.username,
        "groups": list(user.groups),
        "nonResourceAttributes": {"path": path, "verb": verb},
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra}
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
    }


def access_decision(answer: Mapping[str, Any]) -> Decision:
    """A SubjectAccessReview answer: allowed only when `status.allowed` is true and
    `status.denied` is not; the reason is `status.reason`, else `status.evaluationError`."""
    status = answer.get("status") or {}
    allowed = status.get("allowed") is True and status.get("denied") is not True
    reason = status.get("reason") or status.get("evaluationError") or ""
    return Decision(allowed, str(reason))


class ApiAccessReviews:
    """`metrics.access.AccessReviews` through the daemon's API client."""

    def __init__(self, api_client: client.ApiClient, timeout_s: float = REVIEW_TIMEOUT_S) -> None:
        self.api_client = api_client
        self.timeout_s = timeout_s

    async def authenticate(self, token: str) -> User | None:
        what = "creating a tokenreview"
        api = client.AuthenticationV1Api(self.api_client)
        body: Any = token_review(token)  # the client sends a plain mapping as it is
        async with api_call(what):
            response = await api.create_token_review(
                body, _preload_content=False, _request_timeout=self.timeout_s
            )
        return reviewed_user(json.loads(await expect_success(response, what)))

    async def authorize(self, user: User, path: str, verb: str) -> Decision:
        what = "creating a subjectaccessreview"
        api = client.AuthorizationV1Api(self.api_client)
        body: Any = subject_access_review(user, path, verb)
        async with api_call(what):
            response = await api.create_subject_access_review(
                body, _preload_content=False, _request_timeout=self.timeout_s
            )
        return access_decision(json.loads(await expect_success(response, what)))
