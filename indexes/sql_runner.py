"""Guarded SQL statements run within bounds that hold for any statement.

- **Its own database.** Statements run in a DuckDB database of the SQL route's own, with the
  snapshot's catalog file attached read-only: its memory limit (`memory_mb`, 128 MB) bounds
  what callers' SQL, table profiles and translated questions hold together (aggregates, joins,
  sorts), apart from the exact scans of the serving catalog, and it cannot spill to disk. File
  and network access are off and its configuration is locked, as for the catalog.
- **A watchdog.** Past its time limit a statement is interrupted, and interrupted again every
  50 ms until it returns: DuckDB looks at the interrupt between vectors, and one that arrives
  before the statement has started is forgotten. What a call can build within a vector is
  bounded by the guard (retrieval/sql/bounds.py), so the next look comes soon. Each running
  statement's watchdog takes a thread of the `watchdogs` executor the runtime gives the
  runner (one per statement that may run at once, so none waits for a thread).
- **Sized before converted.** Rows come as Arrow record batches, at most `max_rows + 1` of
  them; their bytes are counted as they arrive and the statement is refused past `max_bytes`
  before any Python object is made of them, so no result holds the interpreter for seconds.
- **Slots, shared fairly.** At most `max_concurrent` statements run at once across the
  server: the runtime gives every runner it opens (one per generation, and a reload overlaps
  two) the same `slots`, as many as its watchdog threads, so no statement's watchdog waits
  for a thread. They are `FairSlots` (indexes/fair_slots.py), taken for the statement's
  `owner`, the caller's principal id: one caller holds at most all slots but one, and a freed
  slot goes to the waiting caller holding the fewest, so a caller looping slow statements
  queues behind its own, and another caller's simple statement waits for a slot only while
  other callers hold them all (with the default two slots and one caller flooding, never).
  The wait for a slot counts against the statement's time limit.

`interrupt_all` stops every running statement (a closing engine calls it before it waits
for its background work to end).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Executor, wait
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Hashable, Protocol

import duckdb
import pyarrow as pa

from indexes.fair_slots import FairSlots
from retrieval.errors import RetrievalTimeout, RetrievalUnavailable, ServerFault, SqlRejected
from retrieval.sql.schema import TableInfo

log = logging.getLogger("quarry.sql")
ATTACHED = "snapshot"  # the catalog's name inside the SQL route's database
RETRY_INTERRUPT_S = 0.05
LOCAL = ("quarry", "local")  # the owner of statements whose caller names none (a direct use of the runner)
# DuckDB errors a statement causes (bad names, types, values, unsupported or forbidden
# features). Everything else DuckDB raises (I/O, out of memory, internal errors) is a
# server fault, whatever statement was running.
STATEMENT_ERRORS = (duckdb.ProgrammingError, duckdb.DataError, duckdb.NotSupportedError, duckdb.PermissionException)
# The same kinds by the name DuckDB writes before its message (an error raised while Arrow
# batches stream arrives as a plain OSError that carries only the message).
_STATEMENT_KINDS = ("Binder", "Catalog", "Conversion", "Invalid Input", "Out of Range", "Parser", "Syntax",
                    "Not implemented", "Permission", "Constraint", "Invalid type", "Mismatch Type", "Dependency")


class CatalogFile(Protocol):
    path: Path

    def tables(self) -> dict[str, TableInfo]: ...

    def acl_tokens(self) -> frozenset[str]: ...


def statement_database(catalog_path: Path, memory_mb: int, threads: int = 1) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the catalog file attached read-only, locked down."""
    con = duckdb.connect(":memory:", config={"memory_limit": f"{memory_mb}MB", "temp_directory": "", "threads": threads})
    try:
        con.execute(f"ATTACH ? AS {ATTACHED} (READ_ONLY)", [str(catalog_path)])
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


class _Watchdog:
    """Interrupts a cursor at its deadline, and again every RETRY_INTERRUPT_S until stopped,
    on a thread of `threads`."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection, seconds: float, threads: Executor) -> None:
        self._cursor, self._done = cursor, threading.Event()
        self.fired = False
        self._watching = threads.submit(self._watch, time.monotonic() + seconds)

    def _watch(self, deadline: float) -> None:
        if self._done.wait(max(0.0, deadline - time.monotonic())):  # the deadline holds even if it started late
            return
        self.fired = True
        while True:
            try:
                self._cursor.interrupt()
            except duckdb.Error:  # closed meanwhile: nothing left to stop
                return
            if self._done.wait(RETRY_INTERRUPT_S):
                return

    def stop(self) -> None:
        self._done.set()
        if self._watching.cancel():  # it never started: nothing to wait for (a wait would, until a thread took it)
            return
        wait([self._watching])  # as a join: returns once it ended (or was cancelled), raising nothing


class SqlRunner:
    """Runs guarded SELECTs (see the module docstring)."""

    def __init__(self, catalog: CatalogFile, max_concurrent: int = 2, max_bytes: int = 4_000_000, memory_mb: int = 128,
                 threads: int = 1, connection: duckdb.DuckDBPyConnection | None = None, *, watchdogs: Executor,
                 slots: FairSlots | None = None) -> None:
        """`watchdogs` runs the statements' watchdogs: at least as many threads as there are
        slots, owned by the caller, who shuts them down after `close`. `slots` are shared with
        the caller's other runners (`max_concurrent` of the runner's own by default)."""
        self._catalog = catalog
        self._watchdogs = watchdogs
        self._con = connection if connection is not None else statement_database(catalog.path, memory_mb, threads)
        self._use = None if connection is not None else f"USE {ATTACHED}"  # a given connection is used as it is
        self._slots = slots if slots is not None else FairSlots(max_concurrent)
        self._lock = threading.Condition()
        self._cursors: set[duckdb.DuckDBPyConnection] = set()
        self._closed = False
        self.max_concurrent, self.max_bytes = max_concurrent, max_bytes

    def tables(self) -> dict[str, TableInfo]:
        return self._catalog.tables()

    def acl_tokens(self) -> frozenset[str]:
        return self._catalog.acl_tokens()

    @property
    def running(self) -> int:
        """Statements running now (for metrics and tests)."""
        with self._lock:
            return len(self._cursors)

    def interrupt_all(self) -> None:
        """Interrupt every running statement (they end with RetrievalTimeout)."""
        with self._lock:
            cursors = list(self._cursors)
        for cur in cursors:
            try:
                cur.interrupt()
            except duckdb.Error:
                pass

    def close(self, wait_s: float = 30.0) -> None:
        """Refuse new statements, stop the running ones and close the database once they
        returned (a database cannot close under a running statement)."""
        with self._lock:
            self._closed = True
        self.interrupt_all()
        with self._lock:
            if not self._lock.wait_for(lambda: not self._cursors, timeout=wait_s):
                log.warning("an SQL statement outlived its interrupt for %g s; its database is left open", wait_s)
                return
        self._con.close()

    def run(self, sql: str, timeout_s: float, max_rows: int,
            owner: Hashable = LOCAL) -> tuple[list[str], list[tuple[Any, ...]], bool]:
        """(columns, rows, truncated). A statement still running at `timeout_s` is interrupted;
        waiting for `owner`'s turn at a slot counts against the same time limit."""
        started = time.monotonic()
        if not self._slots.acquire(owner, timeout_s):
            slots = self._slots
            raise RetrievalUnavailable(f"the SQL route is busy ({slots.slots} statements at once, at most "
                                       f"{slots.per_owner} per caller); retry shortly")
        try:
            with self._lock:
                if self._closed:
                    raise RetrievalUnavailable("the SQL route is closing; retry shortly")
                cur = self._con.cursor()
                self._cursors.add(cur)
            watchdog: _Watchdog | None = None
            try:
                watchdog = _Watchdog(cur, max(0.001, timeout_s - (time.monotonic() - started)), self._watchdogs)
                return self._run(cur, sql, timeout_s, max_rows)
            finally:
                # Rows past the ones read may still be in the making: stop them before closing,
                # since closing waits for a running statement.
                cur.interrupt()
                cur.close()
                if watchdog is not None:
                    watchdog.stop()
                with self._lock:
                    self._cursors.discard(cur)
                    self._lock.notify_all()
        finally:
            self._slots.release(owner)

    def _run(self, cur: duckdb.DuckDBPyConnection, sql: str, timeout_s: float,
             max_rows: int) -> tuple[list[str], list[tuple[Any, ...]], bool]:
        try:
            if self._use:
                cur.execute(self._use)
            reader = cur.sql(sql).to_arrow_reader(min(1024, max_rows + 1))
            columns = list(reader.schema.names)
            batches, rows, size = [], 0, 0
            for batch in reader:
                size += batch.nbytes
                if size > self.max_bytes:
                    raise SqlRejected(f"the result is larger than {self.max_bytes:,} bytes; select fewer rows or "
                                      "shorter values", reason="too_large", limit=self.max_bytes)
                batches.append(batch)
                rows += batch.num_rows
                if rows > max_rows:
                    break
            table = pa.Table.from_batches(batches, schema=reader.schema)
        except duckdb.InterruptException:
            raise self._interrupted(timeout_s) from None
        except STATEMENT_ERRORS as e:
            raise _refused(str(e)) from None
        except duckdb.OperationalError as e:  # I/O, out of memory, ...: the server's fault, maybe passing
            log.error("SQL statement failed in the database: %s", str(e).splitlines()[0])
            raise RetrievalUnavailable(f"the database could not run the statement ({type(e).__name__})") from None
        except duckdb.Error as e:
            log.error("SQL statement failed in the database: %s", str(e).splitlines()[0])
            raise ServerFault(f"the database failed ({type(e).__name__})") from None
        except (OSError, pa.ArrowException) as e:  # raised while batches streamed: only DuckDB's message is left
            raise self._streamed_error(str(e), timeout_s) from None
        return columns, python_rows(table.slice(0, max_rows)), rows > max_rows

    def _interrupted(self, timeout_s: float) -> Exception:
        if self._closed:
            return RetrievalUnavailable("the SQL route closed while the statement ran; retry shortly")
        return RetrievalTimeout(f"SQL exceeded its time limit of {timeout_s:g} s and was interrupted")

    def _streamed_error(self, message: str, timeout_s: float) -> Exception:
        kind = message.split(" Error:", 1)[0].strip() if " Error:" in message else ""
        if kind.upper() == "INTERRUPT":
            return self._interrupted(timeout_s)
        if kind in _STATEMENT_KINDS:
            return _refused(message)
        log.error("SQL statement failed in the database: %s", message.splitlines()[0] if message else "?")
        if kind in ("Out of Memory", "IO"):
            return RetrievalUnavailable(f"the database could not run the statement ({kind} error)")
        return ServerFault("the database failed while returning rows")


def _refused(message: str) -> SqlRejected:
    return SqlRejected(f"the database refused the statement: {message.splitlines()[0] if message else ''}")


def python_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows of a (small, already sized) Arrow table as the Python values DuckDB's own fetch
    gives: a whole-number decimal of scale 0 (how HUGEINT sums arrive) as int, an interval as
    timedelta (months as 30 days)."""
    columns = []
    for column in table.columns:
        values = column.to_pylist()
        kind = column.type
        if pa.types.is_decimal(kind) and kind.scale == 0:
            values = [int(v) if isinstance(v, Decimal) else v for v in values]
        elif pa.types.is_interval(kind):
            values = [None if v is None else timedelta(days=v.months * 30 + v.days, microseconds=v.nanoseconds / 1000)
                      for v in values]
        columns.append(values)
    return list(zip(*columns, strict=True)) if columns else []
