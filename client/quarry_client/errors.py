"""Quarry's JSON error shape (`{"error": {"code", "message", "retryable"}}`) as exceptions.

Every error answer becomes the exception of its `code` (an unknown code: of its HTTP status
class). An evidence gap is not among them: it is a normal `Answer` with `status ==
"evidence_gap"`. `retryable` errors (`RateLimited`, `RetrievalUnavailable`,
`RetrievalTimeout`) are retried by the client within its bound; no other error is.
"""

from __future__ import annotations

import re
from typing import Any

_AUTH_PARAM = re.compile(r'([A-Za-z_]+)\s*=\s*"([^"]*)"')


class QuarryError(Exception):
    """An error answer of the service (or no answer at all: `TransportError`)."""

    code = "error"
    retryable = False

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 retryable: bool | None = None, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code or type(self).code
        self.retryable = type(self).retryable if retryable is None else retryable
        self.body = body or {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, message={self.message!r})"


class InvalidRequest(QuarryError):
    """400 or 422: the request is malformed, out of bounds or has unknown fields."""

    code = "invalid_request"


class SqlRejected(InvalidRequest):
    code = "sql_rejected"


class Unauthenticated(QuarryError):
    """401: no credential, or one the server does not accept. `challenge` is the answer's
    `WWW-Authenticate` (it names the reason class of a refused token, never the token)."""

    code = "unauthenticated"

    def __init__(self, message: str, *, challenge: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.challenge = challenge

    @property
    def token_expired(self) -> bool:
        """The server refused a token because its `exp` is past (`error="invalid_token"`,
        `error_description="expired"`): a fresh token from its provider may be accepted."""
        params = dict(_AUTH_PARAM.findall(self.challenge or ""))
        return params.get("error") == "invalid_token" and params.get("error_description") == "expired"


class Forbidden(QuarryError):
    """The key lacks the scope the call needs."""

    code = "forbidden"


class NotFound(QuarryError):
    """Missing, or not readable with this key: the service answers both the same way."""

    code = "not_found"


class Conflict(QuarryError):
    code = "conflict"


class PayloadTooLarge(QuarryError):
    code = "payload_too_large"


class RateLimited(QuarryError):
    """429; `retry_after` is the server's Retry-After in seconds."""

    code = "rate_limited"
    retryable = True

    def __init__(self, message: str, *, retry_after: float = 1.0, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class RetrievalUnavailable(QuarryError):
    """503: the service cannot answer now (loading, busy, a failing dependency); retry."""

    code = "retrieval_unavailable"
    retryable = True


class RetrievalTimeout(RetrievalUnavailable):
    code = "retrieval_timeout"


class ServerError(QuarryError):
    """500: a fault of the service, not of the request."""

    code = "internal"


class TransportError(RetrievalUnavailable):
    """No answer: the connection failed or timed out (retried like a 503)."""

    code = "transport"


BY_CODE: dict[str, type[QuarryError]] = {c.code: c for c in (
    InvalidRequest, SqlRejected, Unauthenticated, Forbidden, NotFound, Conflict, PayloadTooLarge, RateLimited,
    RetrievalUnavailable, RetrievalTimeout, ServerError)}
BY_STATUS: dict[int, type[QuarryError]] = {400: InvalidRequest, 401: Unauthenticated, 403: Forbidden, 404: NotFound,
                                           409: Conflict, 413: PayloadTooLarge, 422: InvalidRequest, 429: RateLimited,
                                           503: RetrievalUnavailable}


def from_response(status: int, body: Any, headers: Any) -> QuarryError:
    """The exception for one error answer."""
    detail = body.get("error") if isinstance(body, dict) else None
    if not isinstance(detail, dict):
        detail = {"code": None, "message": f"HTTP {status}", "retryable": status in (429, 503)}
    code = detail.get("code")
    cls = BY_CODE.get(code) if isinstance(code, str) else None
    cls = cls or BY_STATUS.get(status) or (ServerError if status >= 500 else QuarryError)
    message = str(detail.get("message") or f"HTTP {status}")
    kw: dict[str, Any] = {"status": status, "code": code if isinstance(code, str) else None,
                          "retryable": bool(detail.get("retryable", cls.retryable)),
                          "body": body if isinstance(body, dict) else None}
    if cls is RateLimited:
        try:
            kw["retry_after"] = float(headers.get("retry-after", 1))
        except (TypeError, ValueError):
            kw["retry_after"] = 1.0
    if issubclass(cls, Unauthenticated):
        kw["challenge"] = headers.get("www-authenticate")
    return cls(message, **kw)
