"""Domain errors. Each class says once how every edge reports it: `code` (the wire name of
HTTP and CLI error bodies), `http_status`, `tool_code` (the code of an MCP / function-tool
error result) and `exit_code` (the CLI's). The edges derive their tables from these classes
(`all_error_classes`) and never keep their own; the core only raises.
"""

from __future__ import annotations

from typing import Any

CALLER_MISTAKE_EXIT = 2  # the CLI's exit code of an error the caller can fix (a 4xx)
SERVER_FAULT_EXIT = 1  # ... and of one it cannot (a 5xx, retryable or not)


class RetrievalError(Exception):
    """Base of every error Quarry reports to a caller; `code` is the stable wire name."""

    code: str = "internal"
    http_status: int = 500
    tool_code: str = "internal"
    exit_code: int = SERVER_FAULT_EXIT
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
    http_status = 400
    tool_code = "invalid_arguments"
    exit_code = CALLER_MISTAKE_EXIT


class Unauthenticated(RetrievalError):
    code = "unauthenticated"
    http_status = 401
    tool_code = "unauthenticated"
    exit_code = CALLER_MISTAKE_EXIT


class Forbidden(RetrievalError):
    code = "forbidden"
    http_status = 403
    tool_code = "access_denied"
    exit_code = CALLER_MISTAKE_EXIT


class NotFound(RetrievalError):
    """Also raised for documents the caller may not read, so both look the same."""

    code = "not_found"
    http_status = 404
    tool_code = "not_found"
    exit_code = CALLER_MISTAKE_EXIT


class Conflict(RetrievalError):
    """The request conflicts with the index's current state: an `Idempotency-Key` reused with
    another body, or a second process opening an index's write-ahead log. A model that sent
    it passed arguments that cannot apply now, hence `invalid_arguments`."""

    code = "conflict"
    http_status = 409
    tool_code = "invalid_arguments"
    exit_code = CALLER_MISTAKE_EXIT


class PayloadTooLarge(RetrievalError):
    code = "payload_too_large"
    http_status = 413
    tool_code = "invalid_arguments"
    exit_code = CALLER_MISTAKE_EXIT


class SqlRejected(RetrievalError):
    code = "sql_rejected"
    http_status = 400
    tool_code = "sql_rejected"
    exit_code = CALLER_MISTAKE_EXIT


class RateLimited(RetrievalError):
    code = "rate_limited"
    http_status = 429
    tool_code = "rate_limited"
    exit_code = CALLER_MISTAKE_EXIT
    retryable = True


class RetrievalUnavailable(RetrievalError):
    code = "retrieval_unavailable"
    http_status = 503
    tool_code = "retrieval_unavailable"
    exit_code = SERVER_FAULT_EXIT
    retryable = True


class RetrievalTimeout(RetrievalError):
    code = "retrieval_timeout"
    http_status = 503
    tool_code = "retrieval_unavailable"
    exit_code = SERVER_FAULT_EXIT
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
    http_status = 404
    tool_code = "not_found"
    exit_code = CALLER_MISTAKE_EXIT


def all_error_classes() -> list[type[RetrievalError]]:
    """`RetrievalError` and every subclass, parents before children, in definition order."""
    out: list[type[RetrievalError]] = []
    stack: list[type[RetrievalError]] = [RetrievalError]
    while stack:
        cls = stack.pop(0)
        if cls not in out:
            out.append(cls)
            stack[:0] = cls.__subclasses__()
    return out
