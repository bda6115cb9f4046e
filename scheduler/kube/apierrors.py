"""Raw API responses and typed errors.

The daemon calls the generated kubernetes_asyncio methods with `_preload_content=False`: decoding
into the generated model classes is slow, and it fails for some answers (a Binding answers with a
Status). Without decoding the client does not raise on HTTP errors, so every such call goes
through `expect_success`, which raises `APIError` with the API server's own message.
"""

from __future__ import annotations

import json
from typing import Any


class APIError(RuntimeError):
    """An API call failed; `status` is the HTTP status (0 when no answer came)."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}".strip() if status else message)
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def too_many_requests(self) -> bool:
        return self.status == 429


async def expect_success(response: Any) -> bytes:
    """Read a raw response; return its body on 2xx, raise APIError otherwise. Releases it."""
    try:
        body: bytes = await response.read()
        if 200 <= response.status <= 299:
            return body
        message, reason = body.decode(errors="replace"), ""
        try:
            status = json.loads(body)
            message, reason = str(status.get("message", message)), str(status.get("reason", ""))
        except (ValueError, AttributeError):
            pass
        raise APIError(int(response.status), message, reason)
    finally:
        response.release()
