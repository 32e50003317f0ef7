"""FairSlots, driven by threads whose turns are read off the slots themselves (no sleeps)."""

from __future__ import annotations

import threading

import pytest

from indexes.fair_slots import FairSlots

PATIENCE_S = 30.0


def until(condition, what: str) -> None:
    """Wait (polling) until `condition()` holds; a test that never gets there fails."""
    done = threading.Event()
    for _ in range(int(PATIENCE_S / 0.002)):
        if condition():
            return
        done.wait(0.002)
    pytest.fail(f"never happened: {what}")


class Waiter:
    """A thread that acquires a slot for `owner` (no timeout), notes its turn in `order`,
    and gives the slot back when told."""

    def __init__(self, slots: FairSlots, owner: str, order: list[str]) -> None:
        self.slots, self.owner, self.order = slots, owner, order
        self.granted, self.done = threading.Event(), threading.Event()
        before = slots.waiting(owner)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        until(lambda: self.granted.is_set() or slots.waiting(owner) > before, f"{owner} asks for a slot")

    def _run(self) -> None:
        self.slots.acquire(self.owner)
        self.order.append(self.owner)
        self.granted.set()
        self.done.wait(PATIENCE_S)
        self.slots.release(self.owner)

    def finish(self) -> None:
        self.done.set()
        self._thread.join(PATIENCE_S)


def test_one_owner_never_takes_the_last_slot_so_another_owner_gets_it_at_once():
    slots = FairSlots(2)
    assert slots.per_owner == 1
    assert slots.acquire("mallory", 0)
    assert not slots.acquire("mallory", 0)  # its second statement waits for its own slot
    assert slots.acquire("olga", 0)
    assert slots.in_use == 2 and slots.held("mallory") == slots.held("olga") == 1


def test_with_one_slot_an_owner_may_hold_it():
    slots = FairSlots(1)
    assert slots.per_owner == 1 and slots.acquire("mallory", 0)
    assert not slots.acquire("olga", 0)
    slots.release("mallory")
    assert slots.acquire("olga", 0)


def test_an_owner_flooding_the_slots_queues_behind_its_own_statements():
    """Eight statements of one owner wait; another owner's come and go meanwhile, each
    taking the slot the flood cannot; the flood's own run one at a time, oldest first."""
    slots, order = FairSlots(2), []
    assert slots.acquire("mallory")
    flood = [Waiter(slots, "mallory", order) for _ in range(8)]
    assert slots.waiting("mallory") == 8
    for _ in range(5):
        assert slots.acquire("olga", 0)  # no wait at all: the flood holds one slot, never both
        slots.release("olga")
    assert order == [] and slots.held("mallory") == 1
    slots.release("mallory")
    for n, waiter in enumerate(flood):
        until(waiter.granted.is_set, f"mallory's statement {n} runs")
        assert all(not w.granted.is_set() for w in flood[n + 1:])  # the rest still queue behind it
        assert slots.acquire("olga", 0)
        slots.release("olga")
        waiter.finish()
    assert slots.in_use == 0 and slots.waiting() == 0


def test_a_freed_slot_goes_to_the_waiting_owner_holding_the_fewest():
    slots, order = FairSlots(3), []  # two per owner
    assert slots.acquire("mallory") and slots.acquire("mallory") and slots.acquire("olga")
    flood = Waiter(slots, "mallory", order)  # waiting first
    late = Waiter(slots, "pat", order)  # holds none
    slots.release("mallory")  # mallory still holds one: pat's turn, though mallory waited longer
    until(late.granted.is_set, "pat's statement runs")
    assert order == ["pat"] and slots.waiting("mallory") == 1
    slots.release("olga")
    until(flood.granted.is_set, "mallory's statement runs")
    assert order == ["pat", "mallory"]
    late.finish()
    flood.finish()
    slots.release("mallory")
    assert slots.in_use == 0


def test_among_owners_holding_as_many_the_one_served_least_recently_goes_first():
    slots, order = FairSlots(3), []
    assert slots.acquire("mallory")  # served first
    assert slots.acquire("olga")  # served second
    assert slots.acquire("pat")
    olga_next = Waiter(slots, "olga", order)  # waiting longer
    mallory_next = Waiter(slots, "mallory", order)
    slots.release("pat")  # both hold one: mallory was served longer ago
    until(mallory_next.granted.is_set, "mallory's second statement runs")
    assert order == ["mallory"] and slots.waiting("olga") == 1
    slots.release("mallory")
    until(olga_next.granted.is_set, "olga's second statement runs")
    assert order == ["mallory", "olga"]
    for waiter in (mallory_next, olga_next):
        waiter.finish()
    slots.release("olga")
    assert slots.in_use == 0


def test_two_freed_slots_reach_two_waiters():
    slots, order = FairSlots(3), []
    assert slots.acquire("mallory") and slots.acquire("mallory") and slots.acquire("olga")
    first, second = Waiter(slots, "pat", order), Waiter(slots, "quinn", order)
    slots.release("mallory")
    slots.release("olga")
    until(lambda: first.granted.is_set() and second.granted.is_set(), "both waiters run")
    assert sorted(order) == ["pat", "quinn"] and slots.in_use == 3
    first.finish()
    second.finish()
    slots.release("mallory")
    assert slots.in_use == 0


def test_a_waiter_that_gives_up_leaves_the_queue_and_the_slot_goes_to_the_next():
    slots, order = FairSlots(1), []
    assert slots.acquire("mallory")
    assert not slots.acquire("olga", 0.01)  # its turn did not come in time
    assert slots.waiting() == 0
    pat = Waiter(slots, "pat", order)
    slots.release("mallory")
    until(pat.granted.is_set, "pat's statement runs")
    pat.finish()
    assert slots.in_use == 0 and slots.waiting() == 0


def test_releasing_a_slot_not_held_is_an_error():
    slots = FairSlots(2)
    assert slots.acquire("mallory")
    with pytest.raises(ValueError, match="holds no slot"):
        slots.release("olga")
    slots.release("mallory")
    with pytest.raises(ValueError, match="holds no slot"):
        slots.release("mallory")


def test_slots_must_be_at_least_one():
    with pytest.raises(ValueError, match="at least 1"):
        FairSlots(0)
