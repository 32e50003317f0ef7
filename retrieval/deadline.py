"""The question's deadline, carried to every call made for it, however deep and on whichever thread.

The loop knows when a question must be answered; a remote shard call several layers down
(a link, a statistic, an annotation, on a fan-out thread) does not take the budget as an
argument, and before this it waited on its own retry window (10 s) whatever the question's
deadline. The deadline therefore travels in a context variable: `question_deadline` sets it
for the loop's thread, and `carried` binds a function to a copy of the caller's context, so
an executor's thread sees the deadline of the question that submitted the work (a thread
pool does not copy context variables by itself).

Only time is carried, never identity: a call's access scope stays an explicit argument.
"""

from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("quarry_question_deadline", default=None)


@contextmanager
def question_deadline(seconds: float) -> Iterator[None]:
    """Calls made inside (on this thread, or on threads given `carried` functions) have at
    most `seconds` from now. An outer, earlier deadline stays in force."""
    at = time.monotonic() + max(0.0, seconds)
    outer = _DEADLINE.get()
    token = _DEADLINE.set(at if outer is None else min(outer, at))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def time_left() -> float | None:
    """Seconds left to the current question (never below 0), or None outside any question
    (an admin's describe, a write, a document fetch: their own limits apply)."""
    at = _DEADLINE.get()
    return None if at is None else max(0.0, at - time.monotonic())


def call_window(own_s: float, floor_s: float) -> float:
    """How long one remote call (retries included) may take: its own window `own_s`, cut to
    the question's time left, but never under `floor_s`, so a call the loop makes as its
    deadline ends (grading the last attempt) still gets one short try instead of failing
    the whole answer unasked."""
    left = time_left()
    return own_s if left is None else min(own_s, max(left, floor_s))


def carried(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, to run on another thread with the caller's context (and so its deadline). Each
    call gets its own copy, so one carried function may run on several threads at once."""
    context = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> T:
        return context.copy().run(fn, *args, **kwargs)

    return run
