"""Generated hostile SQL: nestings of the allowed string, regex, list and aggregate functions
over self-joins, each statement under 300 characters (seeded, so every run sends the same).

Used by benchmarks/sql_hostile.py (200 statements against a served index) and by
tests/retrieval/test_sql_bounds.py (a smaller set through the guard and the runner). It
imports nothing from the service: the statements are text, as an attacker sends them.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

MAX_CHARS = 300
NUMBERS = (3, 40, 5000, 100000, 1000000000)


@dataclass(frozen=True)
class Schema:
    """The table the statements join with itself, and its columns."""

    table: str
    text: tuple[str, ...]
    number: str


def _string(rng: random.Random, aliases: list[str], schema: Schema, depth: int) -> str:
    leaf = f"{rng.choice(aliases)}.{rng.choice(schema.text)}"
    if depth <= 0 or rng.random() < 0.15:
        return leaf

    def s() -> str:
        return _string(rng, aliases, schema, depth - 1)

    n = rng.choice(NUMBERS)
    shapes = [
        lambda: f"concat({s()}, {s()})", lambda: f"{s()} || {s()}", lambda: f"concat_ws(',', {s()}, {s()}, {s()})",
        lambda: f"lpad({s()}, {n}, {s()})", lambda: f"rpad({s()}, {n}, '*')",
        lambda: f"regexp_replace({s()}, '', {s()}, 'g')", lambda: f"regexp_replace({s()}, '.', {s()}, 'g')",
        lambda: f"regexp_replace({s()}, '(.)', '\\1\\1\\1', 'g')", lambda: f"upper({s()})", lambda: f"initcap({s()})",
        lambda: f"reverse({s()})", lambda: f"left({s()}, {n})", lambda: f"trim({s()})",
        lambda: f"split_part({s()}, ' ', 1)", lambda: f"regexp_extract({s()}, '(.+)', 1)",
    ]
    return rng.choice(shapes)()


def _from(aliases: list[str], schema: Schema) -> str:
    return "FROM " + ", ".join(f"{schema.table} {a}" for a in aliases)


def _statement(rng: random.Random, schema: Schema) -> str:
    aliases = list("abcde"[: rng.randint(1, 5)])
    s = _string(rng, aliases, schema, rng.randint(1, 4))
    num = f"{rng.choice(aliases)}.{schema.number}"
    shapes = [
        f"SELECT max(length({s})) {_from(aliases, schema)}",
        f"SELECT length(string_agg({s}, ',')) {_from(aliases, schema)}",
        f"SELECT count(*) {_from(aliases, schema)} WHERE regexp_matches({s}, '(x+x+)+y')",
        f"SELECT len(array_agg({s})) {_from(aliases, schema)}",
        f"SELECT array_agg({num}) {_from(aliases, schema)}",
        f"SELECT {s} {_from(aliases, schema)}",
        f"SELECT list_contains(array_agg({s}), 'x') {_from(aliases, schema)}",
        f"SELECT {s}, count(*) {_from(aliases, schema)} GROUP BY 1 ORDER BY 2 DESC LIMIT 5",
        f"SELECT string_agg({s}, ';') {_from(aliases, schema)}",
    ]
    return rng.choice(shapes)


def hostile_statements(n: int, schema: Schema, seed: int = 31) -> list[str]:
    """`n` distinct statements, each under MAX_CHARS characters."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        statement = _statement(rng, schema)
        if len(statement) < MAX_CHARS:
            out[statement] = None
    return list(out)


def rss_mb(pid: str = "self") -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


class Peak:
    """The resident memory of a process, sampled every 5 ms while in use."""

    def __init__(self, pid: str = "self") -> None:
        self.pid, self.samples, self._done = pid, [rss_mb(pid)], threading.Event()
        self.before = self.samples[0]
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.samples.append(rss_mb(self.pid))

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    @property
    def growth(self) -> float:
        return max(self.samples) - self.before
