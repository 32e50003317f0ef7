"""The SQL route: a caller's statement or a translated question, guarded, then run.

Rows are evidence too: `search` returns each row as a Hit (text `column=value; ...`, the
linked document id when the table has a `doc_id` column), so the grader treats rows and
passages alike; `answer` also keeps the table itself for the `rows` field of the answer.

Like every retriever it reads under the caller's `AccessScope`: readable tables, row ACLs in
the guarded statement, and the column profiles translation links against, all computed over
that scope. Only the two calls an edge makes for a caller, `answer` (a question) and
`run_statement` (the caller's own SQL, which needs the `sql` scope), take the `Principal`,
and turn it into its scope once.

Every statement names its **owner** to the backend, who shares its statement slots fairly
between owners (indexes/fair_slots.py): the caller's principal id, so all keys of one
principal count as one caller, and a caller looping slow statements queues behind its own.
The loop passes its principal's id with a translation it runs. Table profile builds, shared
by every caller of a scope, are one owner of their own (`PROFILES`), as is the generic
`search`, which names no caller (`UNNAMED`, offline use only: edges search no table).
"""

from __future__ import annotations

import json
import math
from concurrent.futures import CancelledError, Executor, Future, TimeoutError as FutureTimeout, wait
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from threading import Lock
from typing import Any, Hashable, Iterable, Protocol, Sequence

from sqlglot import exp

from retrieval.errors import Forbidden, RetrievalError, RetrievalUnavailable, SqlRejected
from retrieval.lru import Lru
from retrieval.retrievers import Retrieved
from retrieval.sql.bounds import VALUE_BYTES, refusal
from retrieval.sql.guard import GuardedSql, guard_sql
from retrieval.sql.meaning import ColumnMeaning
from retrieval.sql.schema import ColumnInfo, ColumnProfile, TableInfo
from retrieval.sql.translate import Decline, Translation, Translator
from retrieval.types import AccessScope, Filters, Hit, Principal

MAX_CATEGORICAL = 60
MAX_DECIMALS = 4  # a float column whose values have at most this many decimal places is summed as decimals
_FLOATS = frozenset({"DOUBLE", "FLOAT", "REAL", "FLOAT4", "FLOAT8"})
Profiles = dict[tuple[str, str], ColumnProfile]  # (table, column) -> its values and id prefixes in one scope
# Owners of statements no caller sends (tuples: no principal id, a string, is equal to one).
PROFILES: Hashable = ("quarry", "table profiles")
UNNAMED: Hashable = ("quarry", "unnamed caller")


class SqlBackend(Protocol):
    def tables(self) -> dict[str, TableInfo]: ...

    def run(self, sql: str, timeout_s: float, max_rows: int,
            owner: Hashable) -> tuple[list[str], list[tuple[Any, ...]], bool]:
        """(columns, rows, truncated); `owner` names whom the statement runs for, who waits
        for its own turn at a slot."""
        ...

    def acl_tokens(self) -> frozenset[str]: ...

    def close(self) -> None:
        """Refuse new statements, stop the running ones, and return once none runs."""
        ...


@dataclass(frozen=True)
class SqlLimits:
    max_rows: int = 1000
    timeout_s: float = 2.0
    value_bytes: int = VALUE_BYTES  # what one row of a statement may build through its function calls


@dataclass(frozen=True)
class SqlResult:
    sql: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    tables: tuple[str, ...]
    truncated: bool
    translated_from: str | None = None
    doc_ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"sql": self.sql, "columns": list(self.columns), "data": [list(r) for r in self.rows],
                "tables": list(self.tables), "truncated": self.truncated, "doc_ids": list(self.doc_ids),
                "trust": "untrusted_evidence"}  # cell values and column names come from data files


def json_value(v: Any) -> Any:
    """DuckDB values as JSON: dates and timestamps in ISO 8601, decimals as floats; NaN and
    infinities (which JSON cannot carry) as null."""
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, Decimal):
        v = float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def _profiles_size(key: frozenset[str], profiles: Profiles) -> int:
    """Roughly the bytes a scope's profiles hold: their strings, plus per-object overheads."""
    strings = [*key, *(x for (t, c), p in profiles.items() for x in (t, c, *p.values, *p.prefixes))]
    return sum(len(x) + 50 for x in strings) + 150 * len(profiles)


class SqlRetriever:
    name = "sql"

    def __init__(self, backend: SqlBackend, limits: SqlLimits = SqlLimits(), today: date | None = None,
                 profile_cache: int = 256, profile_cache_bytes: int = 32 << 20, meaning: ColumnMeaning | None = None,
                 *, builder: Executor) -> None:
        """`builder` runs the table profile builds: threads of their own, so that a slow build
        never holds a worker retrieval calls need, owned by the caller (the runtime shuts
        them down after `close`)."""
        self._backend = backend
        self.limits = limits
        self.today = today
        self.meaning = meaning  # links a word to the column it means (the service's embedding model)
        # Access scopes whose profiles are kept, bounded by bytes too: a scope's profiles hold
        # up to a few hundred values per categorical column of every readable table.
        self._profiles: Lru[frozenset[str], Profiles] = Lru(profile_cache, profile_cache_bytes, _profiles_size)
        # The last scope whose profiles alone exceed the budget: kept apart (one, whatever its
        # size), or each of its questions would profile its tables again.
        self._oversize: tuple[frozenset[str], Profiles] | None = None
        self._builds: dict[frozenset[str], Future[Profiles]] = {}  # scopes being profiled now: one build each, shared
        self._builder = builder
        self._closed = False
        self._lock = Lock()
        self.profile_builds = 0  # scopes profiled (not served from the cache)
        self._withdrawn: frozenset[str] = frozenset()  # documents whose file tables are hidden (`withdraw`)

    def scope(self, access: AccessScope) -> frozenset[str]:
        """The effective scope over the tables: the scope's tokens some table or row ACL
        names. Principals with the same groups share one set of profiles."""
        return access.tokens & self._backend.acl_tokens()

    def profiled(self, access: AccessScope) -> bool:
        """Are this access scope's column profiles built (translation then runs no query)?"""
        with self._lock:
            return self._cached(self.scope(access)) is not None

    def profile_ready(self, access: AccessScope, seconds: float | None) -> bool:
        """Wait up to `seconds` (None: as long as it takes) for this scope's profiles, starting
        their build if none runs. False when they are not there in time (the build goes on)
        or the build failed."""
        try:
            self._profile_build(access, self.readable_tables(access)).result(timeout=seconds)
            return True
        except (FutureTimeout, CancelledError, RetrievalError):
            return False

    def close(self) -> None:
        """Stop the background work and wait for it: profile builds not started are cancelled,
        the backend refuses new statements and stops the running ones, then the builds still
        running end (their next statement fails at once). Nothing runs after this returns, so
        the database under it can close."""
        with self._lock:
            self._closed = True
            builds = list(self._builds.values())
        for build in builds:
            build.cancel()
        self._backend.close()
        wait(builds)

    def tables(self) -> dict[str, TableInfo]:
        """The backend's tables less those withdrawn (see `withdraw`): what every statement,
        translation and profile of this route sees."""
        tables = self._backend.tables()
        withdrawn = self._withdrawn
        if not withdrawn:
            return tables
        return {name: t for name, t in tables.items() if t.owner is None or t.owner not in withdrawn}

    def withdraw(self, documents: Iterable[str]) -> None:
        """Hide the tables found inside these documents' files (indexes/tables.py): a live
        write deleted or replaced the documents (a new ACL included), so their tables no longer
        say what the documents do, and stay hidden until an ingest or compaction rebuilds the
        catalog. Never shown again within this route: a table only ever becomes less visible."""
        owners = {t.owner for t in self._backend.tables().values() if t.owner is not None}
        hidden = owners.intersection(documents)
        if hidden - self._withdrawn:
            with self._lock:
                self._withdrawn = self._withdrawn | hidden

    def readable_tables(self, access: AccessScope) -> list[TableInfo]:
        return [t for t in self.tables().values() if t.readable_by(access)]

    def run_statement(self, statement: str, principal: Principal) -> SqlResult:
        """A caller's own SQL: needs the `sql` scope; guarded; row ACLs applied by the service."""
        if "sql" not in principal.scopes:
            raise Forbidden("sending SQL needs the 'sql' scope")
        return self._run(self._guard(statement, principal.access_scope()), principal.id)

    def translate(self, question: str, access: AccessScope, today: date | None = None) -> Translation | Decline:
        tables = self.readable_tables(access)
        if not tables:
            return Decline("no readable tables")
        translator = Translator(tables, self._profiles_for(access, tables), today or self.today or date.today(), self.meaning)
        return translator.translate(question)

    def answer(self, question: str, principal: Principal, today: date | None = None) -> SqlResult | Decline:
        """Translate a caller's question and run it; a Decline when it cannot be linked with
        confidence."""
        return self._answer(question, principal.access_scope(), principal.id, today)

    def run_translation(self, translation: Translation, question: str, access: AccessScope, owner: Hashable) -> SqlResult:
        """Run a translation made for this scope (guarded again: it is only a statement) for
        `owner` (the caller's principal id)."""
        result = self._run(self._guard(translation.sql, access), owner)
        return SqlResult(result.sql, result.columns, result.rows, result.tables, result.truncated, question, result.doc_ids)

    def retrieve(self, translation: Translation, question: str, access: AccessScope, k: int, owner: Hashable) -> Retrieved:
        """The retriever contract for rows: the rows as hits, and the rows themselves."""
        result = self.run_translation(translation, question, access, owner)
        return Retrieved(rows_as_hits(result, k), result)

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        """The shared retriever contract: translated rows as hits (none when it declines)."""
        result = self._answer(query, access, UNNAMED)
        return [] if isinstance(result, Decline) else rows_as_hits(result, k)

    def _answer(self, question: str, access: AccessScope, owner: Hashable, today: date | None = None) -> SqlResult | Decline:
        out = self.translate(question, access, today)
        return out if isinstance(out, Decline) else self.run_translation(out, question, access, owner)

    def _guard(self, statement: str, access: AccessScope) -> GuardedSql:
        return guard_sql(statement, self.tables(), access, self.limits.value_bytes)

    def _run(self, guarded: GuardedSql, owner: Hashable) -> SqlResult:
        try:
            columns, rows, truncated = self._backend.run(guarded.sql, self.limits.timeout_s, self.limits.max_rows, owner)
        except SqlRejected as e:
            raise refusal(e) from None
        data = tuple(tuple(json_value(v) for v in r) for r in rows)
        docs: list[str] = []
        for t in guarded.tables:
            info = self.tables().get(t)
            if info and info.doc_column and info.doc_column in columns:
                i = columns.index(info.doc_column)
                docs.extend(str(r[i]) for r in data if r[i])
        return SqlResult(guarded.statement, tuple(columns), data, guarded.tables, truncated, doc_ids=tuple(dict.fromkeys(docs)))

    def _profiles_for(self, access: AccessScope, tables: Sequence[TableInfo]) -> Profiles:
        """Categorical values and id prefixes over the rows this scope may read (cached).
        Concurrent first questions of a scope share one build, and its outcome (profiles or
        error), rather than each profiling the same tables again."""
        with self._lock:
            cached = self._cached(self.scope(access))
        if cached is not None:
            return cached
        try:
            return self._profile_build(access, tables).result()
        except CancelledError:
            raise RetrievalUnavailable("the table profile build was cancelled (shutting down)") from None

    def _profile_build(self, access: AccessScope, tables: Sequence[TableInfo]) -> Future[Profiles]:
        """The scope's profiles as a future: done when cached, else the running build (started now if none)."""
        key = self.scope(access)
        with self._lock:
            cached = self._cached(key)
            if cached is not None:
                done: Future[Profiles] = Future()
                done.set_result(cached)
                return done
            build = self._builds.get(key)
            if build is None:
                if self._closed:
                    raise RuntimeError("the SQL route is closed: it starts no profile builds")
                build = self._builds[key] = self._builder.submit(self._build, key, access, tables)
            return build

    def _cached(self, key: frozenset[str]) -> Profiles | None:
        """A scope's kept profiles (call with the lock held)."""
        found = self._profiles.get(key)
        if found is None and self._oversize is not None and self._oversize[0] == key:
            found = self._oversize[1]
        return found

    def _build(self, key: frozenset[str], access: AccessScope, tables: Sequence[TableInfo]) -> Profiles:
        try:
            out = self._profile(access, tables)
        except BaseException:
            with self._lock:
                self._builds.pop(key, None)  # the next question starts a new build
            raise
        with self._lock:  # stored and no longer "building" in one step: nobody starts a second build
            self.profile_builds += 1
            self._profiles.put(key, out)
            if key not in self._profiles:  # larger than the whole budget
                self._oversize = (key, out)
            self._builds.pop(key, None)
        return out

    def _profile(self, access: AccessScope, tables: Sequence[TableInfo]) -> Profiles:
        all_tables = self.tables()
        out: Profiles = {}
        for t in tables:
            for col in t.visible_columns():
                if col.type.upper() in _FLOATS:
                    out[(t.name, col.name)] = ColumnProfile(decimals=self._decimals(access, t, col))
                if col.kind != "text":
                    continue
                c, table = _ident(col.name), _ident(t.name)
                q = (f"SELECT count(DISTINCT {c}), list(DISTINCT regexp_extract({c}, '^([A-Za-z]+[-_]?)[0-9]', 1)), "
                     f"bool_and(regexp_matches({c}, '^[0-9]+$')), min(length({c})), max(length({c})) FROM {table}")
                n, prefixes, numeric, shortest, longest = self._backend.run(guard_sql(q, all_tables, access).sql,
                                                                           self.limits.timeout_s, 1, PROFILES)[1][0]
                digits = shortest if numeric and shortest is not None and shortest == longest else None
                values: tuple[str, ...] = ()
                if n <= MAX_CATEGORICAL:
                    vq = f"SELECT DISTINCT {c} FROM {table} WHERE {c} IS NOT NULL"
                    found = self._backend.run(guard_sql(vq, all_tables, access).sql, self.limits.timeout_s, MAX_CATEGORICAL,
                                              PROFILES)[1]
                    values = tuple(sorted(str(r[0]) for r in found))
                out[(t.name, col.name)] = ColumnProfile(values, tuple(sorted({p.upper() for p in prefixes or () if p})),
                                                        digits=digits)
        return out


    def _decimals(self, access: AccessScope, t: TableInfo, col: ColumnInfo) -> int | None:
        """The fewest decimal places, 1 to 4, that every readable value of a floating-point
        column has (amounts of money: 2), else None (whole numbers, measurements)."""
        c = _ident(col.name)
        places = " ".join(f"WHEN bool_and({c} = round({c}, {d})) THEN {d}" for d in range(MAX_DECIMALS + 1))
        q = f"SELECT CASE WHEN count({c}) = 0 THEN NULL {places} ELSE NULL END FROM {_ident(t.name)}"
        found = self._backend.run(guard_sql(q, self.tables(), access).sql, self.limits.timeout_s, 1, PROFILES)[1][0][0]
        return int(found) if found else None  # 0: whole numbers, whose sum is exact already


def _ident(name: str) -> str:
    """A quoted SQL identifier (any embedded quote doubled)."""
    return exp.to_identifier(name, quoted=True).sql(dialect="duckdb")


def rows_as_hits(result: SqlResult, k: int) -> list[Hit]:
    """Rows as evidence hits: one per row, text `col=value; ...`, provenance the table."""
    hits = []
    doc_i = next((i for i, c in enumerate(result.columns) if c == "doc_id"), None)
    table = result.tables[0] if result.tables else "sql"
    for n, row in enumerate(result.rows[:k]):
        cells = zip(result.columns, row, strict=True)
        text = "; ".join(f"{c}={json.dumps(v) if not isinstance(v, str) else v}" for c, v in cells)
        doc = str(row[doc_i]) if doc_i is not None and row[doc_i] else f"table:{table}"
        hits.append(Hit(chunk_id=f"table:{table}#{n}", doc_id=doc, text=text, score=1.0, retrievers=("sql",),
                        start=0, end=len(text), title=table, source="table", signals=(("sql", 1.0),)))
    return hits


def compare_rows(expected: Sequence[Sequence[Any]], actual: Sequence[Sequence[Any]], ordered: bool = False) -> bool:
    """True when every expected column appears, in some column of the actual result, with the
    same values row for row (extra actual columns are allowed; floats match to 2 decimals)."""
    def norm(v: Any) -> Any:
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, (int, float)):
            return round(float(v), 2)
        return str(v)

    if len(expected) != len(actual):
        return False
    if not expected:
        return True
    exp_rows = [tuple(norm(v) for v in r) for r in expected]
    act_rows = [tuple(norm(v) for v in r) for r in actual]
    width = len(exp_rows[0])
    act_width = len(act_rows[0])

    def project(mapping: tuple[int, ...]) -> list[tuple[Any, ...]]:
        return [tuple(r[j] for j in mapping) for r in act_rows]

    from itertools import permutations

    for mapping in permutations(range(act_width), width):
        got = project(mapping)
        if (got == exp_rows) if ordered else (sorted(map(repr, got)) == sorted(map(repr, exp_rows))):
            return True
    return False


