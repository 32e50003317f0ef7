"""The typed query plan a linked question becomes: one SELECT over one table, described as
values (filters with typed values, an aggregate, grouping, order, limit) before any SQL is
written. `render.py` turns it into SQL; nothing here knows SQL syntax."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Literal

AggregateFn = Literal["count", "avg", "sum", "max", "min"]
CompareOp = Literal["=", ">", ">=", "<", "<="]
# What the SELECT answers, which is also the translation's explanation.
PlanKind = Literal["count", "avg", "sum", "max", "min", "grouped", "grouped top", "superlative", "lookup", "list"]


@dataclass(frozen=True)
class Decline:
    """The translator will not guess: why, and the question's words it could not link.

    `table` is the readable table the question is about, when it names one (its noun, one of
    its rows' keys, or its columns, by name or by meaning); then `unlinked` holds every
    content word its schema could not explain and `explained` the ones it could, so a caller
    can tell how much of the question the table accounts for. A table the caller may not read
    is never named: the translator sees only the readable ones."""

    reason: str
    unlinked: tuple[str, ...] = ()
    table: str | None = None
    explained: tuple[str, ...] = ()
    # the question asks the table for a figure over its records (a count, sum, average,
    # extreme or ranking), which passages do not hold (retrieval/table_decline.py)
    aggregate: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Equals:
    """A column equals a categorical value or an identifier found in the question."""

    column: str
    value: str


@dataclass(frozen=True)
class Compare:
    """A numeric comparison: "more than 20 changes" is `change_count > 20`."""

    column: str
    op: CompareOp
    value: float


@dataclass(frozen=True)
class DateWithin:
    """The column's value, as a date, lies in an inclusive range (a side may be open)."""

    column: str
    start: date | None
    end: date | None


Filter = Equals | Compare | DateWithin


@dataclass(frozen=True)
class Aggregate:
    """`fn` over `column`, or over rows (`count(*)`) when `column` is None; selected as `value`.
    `decimals`: the column's values are decimals of at most that many places (money kept as
    a float), so the sum is added up exactly at that scale."""

    fn: AggregateFn
    column: str | None = None
    decimals: int | None = None


@dataclass(frozen=True)
class Order:
    """One sort key: a column, or the aggregate's `value` when `column` is None."""

    column: str | None
    descending: bool = False


@dataclass(frozen=True)
class QueryPlan:
    """One SELECT: the columns (then the aggregate) it returns from `table`, rows kept by every
    filter, grouped, ordered and limited. A plan with a limit is a top-n: its row order is
    part of the answer."""

    table: str
    kind: PlanKind
    columns: tuple[str, ...] = ()
    aggregate: Aggregate | None = None
    filters: tuple[Filter, ...] = ()
    group_by: str | None = None
    order_by: tuple[Order, ...] = ()
    limit: int | None = None

    @property
    def ordered(self) -> bool:
        return self.limit is not None

    def columns_used(self) -> set[str]:
        """Every column the SELECT reads: returned, aggregated, filtered, grouped or sorted on."""
        used = set(self.columns) | {f.column for f in self.filters} | {o.column for o in self.order_by if o.column}
        if self.aggregate is not None and self.aggregate.column:
            used.add(self.aggregate.column)
        if self.group_by:
            used.add(self.group_by)
        return used


def equality_columns(filters: tuple[Filter, ...] | list[Filter]) -> set[str]:
    """Columns some filter pins to one value (a category, an identifier, "exactly 5")."""
    return {f.column for f in filters if isinstance(f, Equals) or (isinstance(f, Compare) and f.op == "=")}


def compared_columns(filters: tuple[Filter, ...] | list[Filter]) -> list[str]:
    """Columns of the value filters (not the date ranges), in the order the question gave them."""
    return [f.column for f in filters if isinstance(f, (Equals, Compare))]
