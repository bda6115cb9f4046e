"""Raw API responses and typed errors.

The daemon calls the generated kubernetes_asyncio methods with `_preload_content=False`: decoding
into the generated model classes is slow, and it fails for some answers (a Binding answers with a
Status). Without decoding the client does not raise on HTTP errors, so every such call goes
through `expect_success`, which raises `APIError` with the API server's own message.

Errors are typed, so callers decide by class or property, never by message text:

    APIError                     any failed call; `status` is the HTTP status, 0 without an answer
      APITransportError          no answer: connection refused or reset, server disconnected,
                                 timeout (aiohttp.ClientError, asyncio.TimeoutError, OSError);
                                 the request may or may not have reached the API server
      APINotSentError            no request left this process, so nothing was written: the
                                 write fence refused it (`NotLeader`), or it failed before its
                                 first byte was sent
      APINotFoundError           404: the object is gone
      APIConflictError           409: a precondition or the object's state does not allow it
        APIAlreadyAssignedError  409 on a Binding: the pod is already bound to a node
      APITooManyRequestsError    429: e.g. an eviction a PodDisruptionBudget does not allow now,
                                 or a request API Priority and Fairness turned away; carries
                                 the seconds the API server asked to wait (`retry_after`)

`api_call(what)` wraps one request: inside it, client errors of every kind come out as an
`APITransportError` (status 0) naming the request, so an adapter never lets an aiohttp or socket
exception escape to its caller.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiException

MAX_MESSAGE_CHARS = 1000
"""API messages are truncated to this length (they are echoed into logs and events)."""

TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientError,
    asyncio.TimeoutError,
    TimeoutError,
    OSError,
)
"""What a request can raise when no answer arrives (aiohttp's errors are not all OSErrors:
ServerDisconnectedError, for one, is not)."""


class APIError(RuntimeError):
    """An API call failed; `status` is the HTTP status (0 when no answer came)."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        message = _truncate(message)
        super().__init__(f"{status} {reason}: {message}".strip() if status else message)
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def transport(self) -> bool:
        """No answer came (the request may or may not have reached the API server)."""
        return self.status == 0

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def already_assigned(self) -> bool:
        """A Binding was refused because the pod is already bound."""
        return False

    @property
    def too_many_requests(self) -> bool:
        return self.status == 429


class PreBindError(APIError):
    """A write the binding cycle makes before the Binding failed (about another object: a
    volume, a claim), so the pod was not bound. Never "not found" or "already assigned" for the
    pod's binding, whatever the object's answer; `what` names the write."""

    def __init__(self, what: str, cause: APIError) -> None:
        super().__init__(cause.status, f"{what}: {cause.message}", cause.reason)

    @property
    def not_found(self) -> bool:
        return False

    @property
    def already_assigned(self) -> bool:
        return False


class APITransportError(APIError):
    """No answer (status 0)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


class APINotSentError(APIError):
    """Status 0 with a known outcome: the request never left this process, so the API server
    changed nothing. A write that failed this way is a plain failure, never an unknown outcome."""

    def __init__(self, message: str, reason: str = "NotSent") -> None:
        super().__init__(0, message, reason=reason)


class APINotFoundError(APIError):
    """404."""


class APIConflictError(APIError):
    """409."""


class APIAlreadyAssignedError(APIConflictError):
    """409 on a Binding for a pod that already has a node."""

    @property
    def already_assigned(self) -> bool:
        return True


class APIPreconditionFailedError(APIConflictError):
    """409 because a precondition (the UID of a delete or an eviction) names another object:
    the pod meant is gone, a pod of the same name stands in its place."""


class APITooManyRequestsError(APIError):
    """429. `retry_after`: the seconds the API server asked the client to wait before trying
    again (its Retry-After header, else the Status's `details.retryAfterSeconds`), None when
    it named none."""

    def __init__(
        self, status: int, message: str, reason: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(status, message, reason)
        self.retry_after = retry_after


_ALREADY_ASSIGNED = "is already assigned to node"
"""The API server's text for a Binding of a bound pod (registry/core/pod/storage: "pod %s is
already assigned to node %q"); 409 has no finer machine-readable reason. Only `api_error`
reads it."""

_PRECONDITION_FAILED = "Precondition failed"
"""The API server's text for a failed UID precondition (apimachinery's
NewConflict(..., "Precondition failed: UID in precondition: ...")). Only `api_error` reads it."""


def api_error(
    status: int, message: str, reason: str = "", retry_after: float | None = None
) -> APIError:
    """The typed error for an HTTP status and the API server's Status message and reason;
    `retry_after` (seconds) goes with a 429."""
    if status == 0:
        return APITransportError(message)
    if status == 404:
        return APINotFoundError(status, message, reason)
    if status == 409:
        if _ALREADY_ASSIGNED in message:
            return APIAlreadyAssignedError(status, message, reason)
        if _PRECONDITION_FAILED in message:
            return APIPreconditionFailedError(status, message, reason)
        return APIConflictError(status, message, reason)
    if status == 429:
        return APITooManyRequestsError(status, message, reason, retry_after)
    return APIError(status, message, reason)


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


@asynccontextmanager
async def api_call(what: str) -> AsyncIterator[None]:
    """Turn every client-side failure inside the block into an `APIError`:
    transport errors into `APITransportError("<what>: <error>")`, the generated client's
    `ApiException` into the typed error of its status. `APIError` and cancellation pass."""
    try:
        yield
    except APIError:
        raise
    except ApiException as error:
        body = error.body.decode(errors="replace") if isinstance(error.body, bytes) else ""
        status, wait = int(error.status or 0), retry_after_of(error.headers)
        raise _from_body(status, body, str(error.reason or ""), wait) from error
    except TRANSPORT_ERRORS as error:
        raise APITransportError(f"{what}: {describe(error)}") from error


def describe(error: BaseException) -> str:
    """`Type: message` of a client-side error, never with an empty message: a timeout carries
    no text of its own (`str(TimeoutError())` is "")."""
    text = str(error)
    if not text and isinstance(error, TimeoutError):
        text = "no answer within the timeout"
    return f"{type(error).__name__}: {text or 'no message'}"


def retry_after_of(headers: Mapping[str, str] | None) -> float | None:
    """The seconds of a Retry-After header (the API server sends whole seconds), None when
    there is none or it is not a number of seconds >= 0 (an HTTP date is not honoured)."""
    text = headers.get("Retry-After") if headers is not None else None
    return _seconds(text)


def _seconds(value: object) -> float | None:
    try:
        seconds = float(str(value).strip()) if value is not None else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _from_body(status: int, body: str, fallback: str, retry_after: float | None = None) -> APIError:
    message, reason = body or fallback, ""
    try:
        parsed = json.loads(body)
        message = str(parsed.get("message", message))
        reason = str(parsed.get("reason", ""))
        if retry_after is None:
            retry_after = _seconds((parsed.get("details") or {}).get("retryAfterSeconds"))
    except (ValueError, AttributeError):
        pass
    return api_error(status, message, reason, retry_after)


async def expect_success(response: Any, what: str = "reading the response") -> bytes:
    """Read a raw response; return its body on 2xx, raise the typed APIError otherwise (a
    connection lost while reading the body is an `APITransportError` naming `what`). Releases
    it."""
    try:
        async with api_call(what):
            body: bytes = await response.read()
        if 200 <= response.status <= 299:
            return body
        wait = retry_after_of(getattr(response, "headers", None))
        raise _from_body(int(response.status), body.decode(errors="replace"), "", wait)
    finally:
        response.release()
