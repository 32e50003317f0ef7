"""A query plan as DuckDB SQL, built with sqlglot's expression builders: every column is a
quoted identifier and every value a literal node, so quoting holds by construction whatever
the names and values are. The text still goes through the guard like any caller's statement."""

from __future__ import annotations

from sqlglot import exp

from retrieval.sql.plan import Aggregate, Compare, DateWithin, Equals, Filter, Order, QueryPlan

_COMPARISONS: dict[str, type[exp.Binary]] = {"=": exp.EQ, ">": exp.GT, ">=": exp.GTE, "<": exp.LT, "<=": exp.LTE}


def render_sql(plan: QueryPlan) -> str:
    """The plan's SELECT as DuckDB SQL text (function names in lower case)."""
    return select_of(plan).sql(dialect="duckdb", normalize_functions="lower")


def select_of(plan: QueryPlan) -> exp.Select:
    """The plan's SELECT as a sqlglot expression (built in place: no node is shared)."""
    projections: list[exp.Expr] = [_column(c) for c in plan.columns]
    if plan.aggregate is not None:
        projections.append(exp.alias_(_aggregate(plan.aggregate), "value", copy=False))
    query = exp.select(*projections, copy=False).from_(exp.Table(this=exp.to_identifier(plan.table)), copy=False)
    predicates = _where(plan.filters)
    if predicates:
        query = query.where(exp.and_(*predicates, copy=False), copy=False)
    if plan.group_by is not None:
        query = query.group_by(_column(plan.group_by), copy=False)
    if plan.order_by:
        query = query.order_by(*(_ordered(o) for o in plan.order_by), copy=False)
    if plan.limit is not None:
        query = query.limit(plan.limit, copy=False)
    return query


def _column(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def _aggregate(agg: Aggregate) -> exp.Expr:
    if agg.fn == "count" or agg.column is None:
        return exp.Count(this=exp.Star())
    column = _column(agg.column)
    if agg.fn == "avg":
        return exp.Round(this=exp.Avg(this=column), decimals=exp.Literal.number(2))
    if agg.fn == "sum":
        if agg.decimals:  # exact decimal addition: no binary floating-point residue in a sum of money
            return exp.Sum(this=exp.cast(column, exp.DataType.build(f"DECIMAL(38, {agg.decimals})")))
        return exp.Sum(this=column)
    return exp.Max(this=column) if agg.fn == "max" else exp.Min(this=column)


def _where(filters: tuple[Filter, ...]) -> list[exp.Expr]:
    """The predicates ANDed. Two values of one column ("open or in progress", "brake and door
    defects") can never both hold, so they are one IN: the rows with either."""
    values: dict[str, list[str]] = {}
    for f in filters:
        if isinstance(f, Equals):
            values.setdefault(f.column, []).append(f.value)
    out: list[exp.Expr] = []
    for f in filters:
        if isinstance(f, Equals) and len(set(values[f.column])) > 1:
            if values[f.column][0] == f.value:  # once per column, at its first value
                out.append(exp.In(this=_column(f.column),
                                  expressions=[exp.Literal.string(v) for v in dict.fromkeys(values[f.column])]))
            continue
        out.extend(_predicates(f))
    return out


def _predicates(f: Filter) -> list[exp.Expr]:
    if isinstance(f, Equals):
        return [exp.EQ(this=_column(f.column), expression=exp.Literal.string(f.value))]
    if isinstance(f, Compare):
        return [_COMPARISONS[f.op](this=_column(f.column), expression=exp.Literal.number(_number(f.value)))]
    return _date_bounds(f)


def _date_bounds(f: DateWithin) -> list[exp.Expr]:
    day = exp.cast(_column(f.column), exp.DataType.Type.DATE)
    out: list[exp.Expr] = []
    if f.start is not None:
        out.append(exp.GTE(this=day, expression=_date(f.start.isoformat())))
    if f.end is not None:
        out.append(exp.LTE(this=day.copy(), expression=_date(f.end.isoformat())))
    return out


def _date(iso: str) -> exp.Expr:
    return exp.cast(exp.Literal.string(iso), exp.DataType.Type.DATE)


def _ordered(o: Order) -> exp.Ordered:
    key = _column(o.column) if o.column is not None else exp.column("value")  # the aggregate's alias
    return exp.Ordered(this=key, desc=True) if o.descending else exp.Ordered(this=key)


def _number(value: float) -> str:
    """The exact literal: 20.0 is written 20, 2.5 stays 2.5, and 1234567 is not rounded."""
    v = float(value)
    return str(int(v)) if v.is_integer() else repr(v)
