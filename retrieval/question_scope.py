"""What every call made for one question shares, however deep and on whichever thread: its
deadline, and what the shards already told about it.

The loop knows when a question must be answered; a remote shard call several layers down
(a link, a statistic, an annotation, on a fan-out thread) does not take the budget as an
argument, and before this it waited on its own retry window (10 s) whatever the question's
deadline. So the question's scope travels in a context variable: `question_scope` opens it
for the loop's thread, and `carried` binds a function to a copy of the caller's context, so
an executor's thread sees the scope of the question that submitted the work (a thread pool
does not copy context variables by itself).

The scope also remembers what a front merged from its shards for this question
(`remembered`): the BM25 statistics of the question's text, read once for routing, again
for the BM25 route and again for the evidence signals, are one round, not three. A question
reads its statistics once (a write that lands meanwhile counts from the next question),
and nothing is remembered past the question.

Only time and merged shard answers are carried, never identity: a call's access scope stays
an explicit argument, and every remembered answer is keyed by the scope it was read for.
"""

from __future__ import annotations

import contextvars
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, TypeVar

T = TypeVar("T")


@dataclass
class _Scope:
    deadline: float  # time.monotonic() seconds
    memo: dict[Hashable, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("quarry_question_scope", default=None)


@contextmanager
def question_scope(seconds: float) -> Iterator[None]:
    """Calls made inside (on this thread, or on threads given `carried` functions) have at
    most `seconds` from now and share one memo. An outer, earlier deadline stays in force."""
    at = time.monotonic() + max(0.0, seconds)
    outer = _SCOPE.get()
    token = _SCOPE.set(_Scope(at if outer is None else min(outer.deadline, at)))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def time_left() -> float | None:
    """Seconds left to the current question (never below 0), or None outside any question
    (an admin's describe, a write, a document fetch: their own limits apply)."""
    scope = _SCOPE.get()
    return None if scope is None else max(0.0, scope.deadline - time.monotonic())


def call_window(own_s: float, floor_s: float) -> float:
    """How long one remote call (retries included) may take: its own window `own_s`, cut to
    the question's time left, but never under `floor_s`, so a call the loop makes as its
    deadline ends (grading the last attempt) still gets one short try instead of failing
    the whole answer unasked."""
    left = time_left()
    return own_s if left is None else min(own_s, max(left, floor_s))


def remembered(key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()`, once per question for `key` (outside a question, every time). Two threads
    asking at once may both compute; the first answer stored is kept."""
    scope = _SCOPE.get()
    if scope is None:
        return compute()
    with scope.lock:
        if key in scope.memo:
            return scope.memo[key]  # type: ignore[no-any-return]
    value = compute()
    with scope.lock:
        return scope.memo.setdefault(key, value)  # type: ignore[no-any-return]


def recalled(key: Hashable) -> Any:
    """What this question remembered under `key`, or None (outside a question: None)."""
    scope = _SCOPE.get()
    if scope is None:
        return None
    with scope.lock:
        return scope.memo.get(key)


def remember(key: Hashable, value: Any) -> None:
    """Store an answer read as part of a larger call (outside a question: nothing)."""
    scope = _SCOPE.get()
    if scope is not None:
        with scope.lock:
            scope.memo.setdefault(key, value)


def carried(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, to run on another thread with the caller's context (and so its question's scope).
    Each call gets its own copy of the context, so one carried function may run on several
    threads at once; the scope inside is the same object, shared."""
    context = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> T:
        return context.copy().run(fn, *args, **kwargs)

    return run
