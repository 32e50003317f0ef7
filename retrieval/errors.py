"""Domain errors. The edges (HTTP, MCP, CLI) map `code` to a status; nothing here knows HTTP."""

from __future__ import annotations

from typing import Any


class RetrievalError(Exception):
    """Base of every error Quarry reports to a caller; `code` is the stable wire name."""

    code: str = "internal"
    retryable: bool = False

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def to_dict(self) -> dict[str, Any]:
        """The `{"error": {...}}` body shared by every interface."""
        return {"error": {"code": self.code, "message": self.message, "retryable": self.retryable}}


class ServerFault(RetrievalError):
    """A fault of the service itself (an unreadable file, a failing database): no request
    could avoid it, so it is never reported as the caller's mistake."""

    code = "internal"


class StorageError(ServerFault):
    """The service's own files could not be written (a full disk, a quota, a file size limit,
    a read-only mount). Its message names the cause, never a path."""


class InvalidRequest(RetrievalError):
    code = "invalid_request"


class Unauthenticated(RetrievalError):
    code = "unauthenticated"


class Forbidden(RetrievalError):
    code = "forbidden"


class NotFound(RetrievalError):
    """Also raised for documents the caller may not read, so both look the same."""

    code = "not_found"


class PayloadTooLarge(RetrievalError):
    code = "payload_too_large"


class SqlRejected(RetrievalError):
    code = "sql_rejected"


class RateLimited(RetrievalError):
    code = "rate_limited"
    retryable = True


class RetrievalTimeout(RetrievalError):
    code = "retrieval_timeout"
    retryable = True


class RetrievalUnavailable(RetrievalError):
    code = "retrieval_unavailable"
    retryable = True


class IngestError(InvalidRequest):
    """A corpus problem; names the file and line so the author can fix it."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {message}" if where else message, path=path, line=line)
        self.path = path
        self.line = line


class SnapshotError(RetrievalError):
    """An index snapshot is missing, incomplete, or built with another model or format."""

    code = "internal"


class NoSnapshot(SnapshotError):
    """The index directory holds no snapshot yet: the caller named the wrong directory or
    has not ingested, so it reads as `not_found`."""

    code = "not_found"
