"""Slots shared fairly between owners: what keeps one caller's SQL from taking every slot.

A plain semaphore hands a freed slot to whichever thread wakes first, so a caller that
keeps many statements queued holds every slot, and another caller's one simple statement
waits behind all of them (for its whole time limit, then gets "busy"). `FairSlots` decides
who gets a slot instead:

- **At most `slots` at once**, as the semaphore did.
- **At most `per_owner` per owner**: `max(1, slots - 1)`, so with two slots or more one is
  always left to the other owners. The cost: one owner alone never uses the last slot, even
  while nobody else asks. A busy server keeps its latency for everyone else; an idle one
  runs one caller's statements one fewer at a time.
- **A freed slot goes to the waiting owner that holds the fewest slots**, then to the one
  served least recently, then, within one owner, to its oldest statement. "Served least
  recently" rather than "waited longest" breaks the ties: a flood of one owner's statements
  has always waited longest, so it would win every tie against a caller that just arrived;
  this way the owners take turns, and a flood queues behind its own statements.

An owner is any hashable value naming who the work is for (the SQL route uses the caller's
principal id; internal work has owners of its own). What the class remembers about an owner
(what it holds, when it was last served) is dropped once the owner holds and waits for
nothing, so it holds only the owners active now; an owner that comes back counts as never
served, which can only put it ahead of owners that are busy at that moment.

The wait for a slot is bounded by the caller's timeout; a waiter that gives up (or is
interrupted) leaves the queue, and the next one in line is woken.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from typing import Hashable


class FairSlots:
    """`slots` shared between owners (see the module docstring)."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, not {slots}")
        self.slots = slots
        self.per_owner = max(1, slots - 1)
        self._changed = threading.Condition()
        self._held: dict[Hashable, int] = {}
        self._queues: dict[Hashable, deque[int]] = {}  # owner -> its waiting tickets, oldest first
        self._served: dict[Hashable, int] = {}  # owner -> the number of its latest grant
        self._tickets = itertools.count()
        self._grants = itertools.count(1)
        self._in_use = 0

    def acquire(self, owner: Hashable, timeout: float | None = None) -> bool:
        """Take a slot for `owner`, waiting up to `timeout` seconds (None: as long as it
        takes) for its turn. False when the turn did not come in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            ticket = next(self._tickets)
            self._queues.setdefault(owner, deque()).append(ticket)
            try:
                while self._next() != ticket:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        self._leave(owner, ticket)
                        return False
                    self._changed.wait(remaining)
            except BaseException:
                self._leave(owner, ticket)
                raise
            queue = self._queues[owner]
            queue.popleft()  # the ticket: an owner's tickets are served oldest first
            if not queue:
                del self._queues[owner]
            self._held[owner] = self._held.get(owner, 0) + 1
            self._served[owner] = next(self._grants)
            self._in_use += 1
            if self._next() is not None:  # another slot is free for someone already asleep
                self._changed.notify_all()
            return True

    def release(self, owner: Hashable) -> None:
        """Give back one of `owner`'s slots; its next one goes to whoever's turn it is."""
        with self._changed:
            held = self._held.get(owner, 0)
            if held == 0:
                raise ValueError(f"{owner!r} holds no slot to release")
            if held == 1:
                del self._held[owner]
                if owner not in self._queues:
                    self._served.pop(owner, None)
            else:
                self._held[owner] = held - 1
            self._in_use -= 1
            self._changed.notify_all()

    def held(self, owner: Hashable) -> int:
        """Slots `owner` holds now."""
        with self._changed:
            return self._held.get(owner, 0)

    @property
    def in_use(self) -> int:
        """Slots held now, by every owner."""
        with self._changed:
            return self._in_use

    def waiting(self, owner: Hashable | None = None) -> int:
        """Acquires waiting for their turn now: `owner`'s, or everyone's."""
        with self._changed:
            if owner is not None:
                return len(self._queues.get(owner, ()))
            return sum(len(q) for q in self._queues.values())

    def _next(self) -> int | None:
        """The ticket whose turn it is, if a slot is free for one (call with the lock held)."""
        if self._in_use >= self.slots:
            return None
        turn = min(((self._held.get(o, 0), self._served.get(o, 0), q[0]) for o, q in self._queues.items()
                    if self._held.get(o, 0) < self.per_owner), default=None)
        return None if turn is None else turn[2]

    def _leave(self, owner: Hashable, ticket: int) -> None:
        """Take a ticket that gave up out of the queue (lock held); the turn may pass to another."""
        queue = self._queues[owner]
        queue.remove(ticket)
        if not queue:
            del self._queues[owner]
            if owner not in self._held:
                self._served.pop(owner, None)
        self._changed.notify_all()
