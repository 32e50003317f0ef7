"""The read-only guard every SQL statement passes, generated or sent by a caller.

A statement runs only if sqlglot parses it (DuckDB dialect) into exactly one query (SELECT,
or a UNION/INTERSECT/EXCEPT of SELECTs) whose every table is a readable user table or a CTE
in scope and whose every function is on an allowlist. What runs is sqlglot's regeneration of
the checked tree, not the caller's text, with each table replaced by the service's view of
it: `data.<table>`, filtered by the row ACL for tables that have one. A forbidden table gets
the same "unknown table" error as a missing one. Behind this guard the catalog connection
has file and network access switched off and its configuration locked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from retrieval.errors import SqlRejected
from retrieval.sql.bounds import VALUE_BYTES, bound_values
from retrieval.sql.parse_message import parse_error_message
from retrieval.sql.schema import TableInfo
from retrieval.types import AccessScope

MAX_SQL_CHARS = 10_000
MAX_NESTING = 32  # parentheses deep: sqlglot parses recursively, and no real query nests this far
# Names DuckDB answers with session facts when no column has them: not data, so not allowed.
_SESSION_NAMES = frozenset({"current_schema", "current_role", "current_user", "user", "session_user",
                            "current_catalog", "current_database", "current_query", "current_schemas"})

_FORBIDDEN_NODE_NAMES = (
    "Command", "Pragma", "Set", "Use", "Attach", "Detach", "Copy", "Install", "Create", "Insert", "Update",
    "Delete", "Drop", "Alter", "Merge", "Transaction", "Commit", "Rollback", "Into", "Describe", "Show",
    "Summarize", "LoadData", "Export", "Grant", "Revoke", "Placeholder", "Parameter", "Analyze", "Refresh",
)
_FORBIDDEN_NODES = tuple(getattr(exp, n) for n in _FORBIDDEN_NODE_NAMES if hasattr(exp, n))

# Functions by sqlglot class: aggregates, arithmetic, strings, dates, conditionals, windows.
_ALLOWED_FUNC_CLASSES = frozenset("""
Count Sum Avg Min Max Round Abs Floor Ceil Sign Sqrt Pow Ln Log Exp Cast TryCast Lower Upper Length Trim
Substring Concat ConcatWs Coalesce Nullif If Case Extract TimestampTrunc DateTrunc TimeToStr StrToTime
StrToDate Year Month Day Quarter Week DayOfWeek DayOfMonth DayOfYear DateDiff DateAdd DateSub TsOrDsAdd
TsOrDsDiff TsOrDsToDate CurrentDate CurrentTimestamp Date Greatest Least StartsWith ArrayAgg GroupConcat
Stddev StddevSamp StddevPop Variance VariancePop Median Quantile PercentileCont PercentileDisc
ApproxDistinct CountIf RegexpLike RegexpExtract RegexpReplace Left Right Initcap Pad Reverse StrPosition
LogicalOr LogicalAnd AnyValue ArgMax ArgMin First Last RowNumber Rank DenseRank Lag Lead FirstValue
LastValue NthValue Ntile CumeDist PercentRank Exists ArrayContains ArraySize Filter Interval
""".split())
_ALLOWED_ANONYMOUS = frozenset("""
strftime strptime date_part datepart date_diff datediff date_sub date_add epoch epoch_ms dayname monthname
yearweek isodow dayofweek hour minute second today now current_date string_agg listagg median mode
quantile_cont quantile_disc ifnull nvl split_part starts_with ends_with contains prefix suffix left right
lpad rpad list_contains list_has len array_length trunc count_if bool_or bool_and any_value arg_max
arg_min max_by min_by first last greatest least regexp_matches regexp_extract regexp_replace concat_ws
make_date last_day isoyear week weekofyear
""".split())


@dataclass(frozen=True)
class GuardedSql:
    sql: str  # what runs: the checked tree with every table replaced by the caller's view of it
    statement: str  # the statement as understood (normalised by sqlglot)
    tables: tuple[str, ...]


def _reject(message: str, **context: object) -> SqlRejected:
    return SqlRejected(message, **context)


def _function_name(node: exp.Func) -> str:
    return node.name if isinstance(node, exp.Anonymous) else type(node).__name__


def _function_allowed(node: exp.Func) -> bool:
    if isinstance(node, exp.Anonymous):
        return node.name.lower() in _ALLOWED_ANONYMOUS
    return type(node).__name__ in _ALLOWED_FUNC_CLASSES


def _cte_in_scope(table: exp.Table, name: str) -> bool:
    """True when `name` resolves to a WITH query (CTE) at this reference, by SQL scoping: a
    query's CTEs are visible in its body, and inside the WITH list only the ones defined
    before the reference's own definition. A name that is not visible is a catalog lookup
    (DuckDB would read a system view of that name), so it must be checked as a table."""
    child: exp.Expr = table
    node = table.parent
    while node is not None:
        if isinstance(node, exp.With):
            earlier = node.expressions[: next((i for i, c in enumerate(node.expressions) if c is child), 0)]
            if any(c.alias_or_name.lower() == name for c in earlier):
                return True
        else:
            with_ = node.args.get("with_") or node.args.get("with")
            if isinstance(with_, exp.With) and with_ is not child and any(
                    c.alias_or_name.lower() == name for c in with_.expressions):
                return True
        child, node = node, node.parent
    return False


def _check_session_names(root: exp.Expr, readable: Mapping[str, TableInfo]) -> None:
    """`SELECT current_role, user` parses as columns, which DuckDB answers with session facts
    when no table has such a column: refuse those names unless a readable table has them."""
    columns = {c.name.lower() for t in readable.values() for c in t.visible_columns()}
    for col in root.find_all(exp.Column):
        name = col.name.lower()
        if not col.table and name in _SESSION_NAMES and name not in columns:
            raise _reject(f"unknown column {col.name!r}", reason="column", column=col.name)


def _view_of(table: exp.Table, info: TableInfo, access: AccessScope) -> exp.Expression:
    alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(info.name))
    if not info.row_acl:
        return exp.Table(this=exp.to_identifier(info.name, quoted=True), db=exp.to_identifier("data"), alias=alias)
    tokens = ", ".join(exp.Literal.string(t).sql(dialect="duckdb") for t in sorted(access.tokens))
    inner = sqlglot.parse_one(
        f'SELECT * EXCLUDE (acl) FROM data."{info.name}" WHERE list_has_any(acl, [{tokens}])', read="duckdb"
    )
    return exp.Subquery(this=inner, alias=alias)


def guard_sql(statement: object, tables: Mapping[str, TableInfo], access: AccessScope,
              value_bytes: int = VALUE_BYTES) -> GuardedSql:
    """Check one statement for a caller's access scope and return what may run (its tables
    narrowed to the rows the scope may read), or raise SqlRejected;
    what runs builds at most `value_bytes` per row through its calls (retrieval/sql/bounds.py)."""
    if not isinstance(statement, str) or not statement.strip():
        raise _reject("the statement is empty", reason="empty")
    if len(statement) > MAX_SQL_CHARS:
        raise _reject(f"the statement is {len(statement)} characters; the limit is {MAX_SQL_CHARS}", reason="too_long")
    if "\x00" in statement:
        raise _reject("the statement contains a NUL character", reason="nul")
    if _nesting(statement) > MAX_NESTING:
        raise _reject(f"the statement nests parentheses more than {MAX_NESTING} deep", reason="too_deep")
    try:
        return _guard(statement, tables, access, value_bytes)
    except RecursionError:
        raise _reject("the statement is nested too deeply to check", reason="too_deep") from None


def _nesting(statement: str) -> int:
    """Deepest parenthesis nesting outside string literals and quoted names."""
    depth = deepest = 0
    quote: str | None = None
    for c in statement:
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth = max(0, depth - 1)
    return deepest


def _guard(statement: str, tables: Mapping[str, TableInfo], access: AccessScope, value_bytes: int) -> GuardedSql:
    try:
        parsed = [s for s in sqlglot.parse(statement, read="duckdb") if s is not None]
    except (ParseError, TokenError) as e:
        raise _reject(parse_error_message(e), reason="parse") from None
    if len(parsed) != 1:
        raise _reject(f"send exactly one statement; got {len(parsed)}", reason="multiple_statements")
    root = parsed[0]
    if not isinstance(root, exp.Query) or isinstance(root, _FORBIDDEN_NODES):
        kind = statement.strip().split(None, 1)[0].upper() if statement.strip() else type(root).__name__
        raise _reject(f"statement kind {kind} is not allowed; only one read-only SELECT", reason="statement_kind", kind=kind)
    for node in root.walk():
        if isinstance(node, exp.With) and node.args.get("recursive"):
            # DuckDB resolves a recursive CTE's self-reference to a catalog object of the same
            # name when one exists (a system view), so recursion cannot be confined.
            raise _reject("WITH RECURSIVE is not allowed", reason="statement_kind", kind="WITH RECURSIVE")
        if isinstance(node, _FORBIDDEN_NODES):
            raise _reject(f"{type(node).__name__.upper()} is not allowed inside a query", reason="statement_kind")
        if isinstance(node, exp.Func) and not isinstance(node, (exp.Connector, exp.Binary)) and not _function_allowed(node):
            name = _function_name(node)
            raise _reject(f"function {name!r} is not allowed", reason="function", function=name)
        if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):  # main.lpad(...): past every check by name
            name = _function_name(node.expression)
            raise _reject(f"function {name!r} is called by its bare name, never qualified", reason="function", function=name)
    readable = {n.lower(): t for n, t in tables.items() if t.readable_by(access)}
    _check_session_names(root, readable)
    bound_values(root, value_bytes)  # the caller's calls share the row budget; the views' filters are the service's
    used: list[str] = []
    for table in list(root.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            raise _reject(f"table function {table.this.sql(dialect='duckdb')[:60]!r} is not allowed", reason="function")
        qualified = ".".join(p.name for p in (table.args.get("catalog"), table.args.get("db")) if p is not None)
        name = table.name.lower()
        if qualified:
            raise _reject(f"unknown table '{qualified}.{table.name}'", reason="table", table=f"{qualified}.{table.name}")
        if _cte_in_scope(table, name):
            continue
        info = readable.get(name)
        if info is None:
            raise _reject(f"unknown table '{table.name}'", reason="table", table=table.name)
        used.append(info.name)
        table.replace(_view_of(table, info, access))
    return GuardedSql(
        sql=root.sql(dialect="duckdb", comments=False),
        statement=statement.strip(),
        tables=tuple(dict.fromkeys(used)),
    )
