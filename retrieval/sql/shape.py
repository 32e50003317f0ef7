"""The shape of the SELECT a linked question asks for, read from its cue words: an aggregate
("how many", "average", "total"), a superlative ("longest", "most recent"), a grouping
("per team", "which team had the most incidents"), a limit ("top 3"), one record's columns
(the question names its identifier), or a list of records. The outcome is a `QueryPlan`
carrying the filters linking found, or a Decline when the shape needs a column the table
lacks."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from retrieval.sql.plan import (Aggregate, AggregateFn, Decline, Order, QueryPlan, compared_columns,
                                equality_columns)
from retrieval.sql.schema import ColumnInfo, TableInfo
from retrieval.sql.schema_linking import Link, SchemaLinker
from retrieval.sql.words import FILLER, NUM, WORD, matches, number_value, words_in

_COUNT = re.compile(r"\b(how many|counts?|number of)\b")  # "number of <numeric column>" is not a count
_AVG = re.compile(r"\b(average|mean|on average)\b")
_SUM = re.compile(r"\b(total|add up|sum of|sum|how much)\b")  # "how much did we spend": a sum of money
_MAX = re.compile(r"\b(longest|largest|highest|maximum|max|biggest|most recently|most recent|latest|newest|slowest|greatest"
                  r"|most expensive)\b")
_MIN = re.compile(r"\b(shortest|quickest|lowest|minimum|min|smallest|earliest|fastest|cheapest|fewest|oldest)\b")
_MOST = re.compile(r"(?<!\bat )\b(most|fewest|least)\b")
_GROUP = re.compile(r"\b(?:per|by|for each|in each|each|broken down by|break down (?:the )?[\w-]+(?: [\w-]+)? by"
                    r"|grouped by|split by)\s+(?:the\s+|a\s+|an\s+)?(?!number\b|count\b|total\b)(\w[\w-]*)")
_TOP = re.compile(
    rf"\b(?:top|first|last)\s+{NUM}\b|\b{NUM}\s+(?=(?:most|least|latest|newest|oldest|largest|smallest|highest|lowest|biggest)\b)"
    rf"|\bwhich\s+(two|three|four|five|six|seven|eight|nine|ten)\b"
)
_TEMPORAL = re.compile(r"\b(most recently|most recent|latest|newest|earliest|oldest)\b")  # superlatives of a date
_COST_ASKED = re.compile(r"\bwhat\s+(?:have|has|did|do|does)\b.*\b(?:cost|costs|spent|spend|paid|pay)\b")
_WHEN = re.compile(r"\b(when|on what date|what date|which date|what day|on which day)\b")
_DISPLAY = ("title", "service", "version")  # shown beside a record's key when the table has them


@dataclass
class _Cues:
    """What the cue words ask for, once their words are counted as explained."""

    agg: AggregateFn | None
    measure: ColumnInfo | None  # the numeric column the question names
    superlative: Literal["max", "min"] | None
    most: str | None  # "most", "fewest" or "least"
    limit: int | None
    group: ColumnInfo | None
    date_col: ColumnInfo | None


def shape_select(linker: SchemaLinker, link: Link) -> QueryPlan | Decline:
    """The SELECT list, grouping, ordering and limit of a linked question."""
    cues = _read_cues(linker, link)
    t = link.table
    if cues.group is not None:
        return _grouped(linker, link, cues, cues.group)
    filters = tuple(link.filters)
    if cues.agg == "count":
        return QueryPlan(t.name, "count", aggregate=Aggregate("count"), filters=filters)
    if cues.agg in ("avg", "sum"):
        if cues.measure is None:
            return _no_measure(link, cues.agg)
        return QueryPlan(t.name, cues.agg, aggregate=_aggregate(linker, t, cues.agg, cues.measure), filters=filters)
    if cues.superlative:
        return _superlative(linker, link, cues, cues.superlative)
    if link.lookup_column:
        return _lookup(linker, link, cues, link.lookup_column)
    return _listing(link, cues)


def _read_cues(linker: SchemaLinker, link: Link) -> _Cues:
    t, text, words = link.table, link.text, link.words
    agg: AggregateFn | None = None
    # a word naming the table ("delays") names its records, not a column (`delay_minutes`); nor
    # does a word of a value ("sample rejections" counts events, not `samples_affected`)
    measure = linker.column_mentioned(t, ("number",), words - linker.table_words(t) - link.value_words)
    quantity = False  # "how many hours": the count cue names a number column
    count_cue = _COUNT.search(text)
    if count_cue and measure is not None:
        # "number of changes", "change count", "how many hours": the cue names a quantity
        after = WORD.findall(text[count_cue.end() : count_cue.end() + 20])[:1]
        before = words_in(text[max(0, count_cue.start() - 20) : count_cue.start()])
        near = set(after) | (before if count_cue.group(1) != "how many" else set())
        if any(matches(w, measure) for w in near):
            count_cue = None
            quantity = True
    if _AVG.search(text):
        agg = "avg"
    elif count_cue and (count_cue.group(1) == "how many" or not _SUM.search(text)):
        agg = "count"
    elif (m := _SUM.search(text)) and not (m.group(1) == "how much" and link.lookup_column):
        agg = "sum"  # "how much did DEF-0042 cost" reads one record: a lookup, not a sum
    for rx in (_COUNT, _AVG, _SUM):
        for m in rx.finditer(text):
            link.consumed |= set(m.group(0).split())
    superlative: Literal["max", "min"] | None = None
    if _MAX.search(text):
        superlative = "max"
    elif _MIN.search(text):
        superlative = "min"
    for rx in (_MAX, _MIN):
        for cue in rx.finditer(text):
            link.consumed |= set(cue.group(0).split())
    if measure is None and (agg in ("avg", "sum") or (superlative and not _TEMPORAL.search(text))):
        # "total spending", "the highest charges": the number the question means, not names
        measure = linker.column_meant(link, ("number",), words)
    most = _MOST.search(text)
    if most:
        link.consumed.add(most.group(1))
    if quantity and agg is None and superlative is None and not most and not link.lookup_column:
        agg = "sum"  # "how many hours were lost to fog": the hours of every such record, added up
    limit = _limit(linker, link)
    group = _group(link, limit)
    date_col = linker.date_column(t, text)
    if measure is not None:
        link.consume_column(measure)
    if re.search(r"\blatest first|newest first|most recent|latest\b", text):
        link.consumed |= {"latest", "first", "newest", "most", "recent"}
    # "which team had the most incidents (and how many)", "which supplier did we spend the
    # most with": a count (or the sum asked for) per group, the top one
    if group is None and most and agg in (None, "count", "sum"):
        word_after = re.search(r"\bwhich\s+(?:(?:two|three|four|five|six|seven|eight|nine|ten|\d+)\s+)?([\w-]+)", text)
        if word_after:
            group = _groupable(link, word_after.group(1))
            if group is not None:
                link.consumed.add(word_after.group(1))
                agg = "sum" if agg == "sum" and measure is not None else "count"
    # "which three events affected the most samples": the records with the largest measure
    if group is None and most and agg is None and superlative is None and measure is not None:
        superlative = "max" if most.group(1) == "most" else "min"
    # "the top 100 defects by repair cost": records ranked by the measure named, not the latest ones
    if group is None and limit and measure is not None and agg is None and superlative is None and not most \
            and any(matches(w, measure) for w in _ranked_by(text)):
        superlative = "max"
    # "what have dangerous defects cost us": money asked of many records is their sum
    if agg is None and superlative is None and measure is not None and not link.lookup_column and _COST_ASKED.search(text):
        agg = "sum"
    if group is not None and re.search(r"\bbreak(?:s|ing)?\s+down\b|\bbreakdown\b", text):
        link.consumed |= {"break", "breaks", "breaking", "breakdown", "down"}
    return _Cues(agg, measure, superlative, most.group(1) if most else None, limit, group, date_col)


def _ranked_by(text: str) -> set[str]:
    """Words that may name what a number of records is ranked by: those after "by" ("5
    defects by repair cost"), or any word of a question that asks for the "top" ones."""
    return {w for m in re.finditer(r"\bby\s+((?:[\w-]+\s*){1,3})", text) for w in m.group(1).split()} | (
        words_in(text) if re.search(r"\btop\b", text) else set())


def _limit(linker: SchemaLinker, link: Link) -> int | None:
    """"top 3", "the 5 latest", "which two", "three incidents"."""
    text = link.text
    if m := _TOP.search(text):
        link.consumed |= set(m.group(0).split())
        return number_value(next(g for g in m.groups() if g))
    nouns = "|".join(map(re.escape, sorted(linker.table_words(link.table), key=len, reverse=True)))
    if m := re.search(rf"\b{NUM}\s+(?:[\w-]+\s+)?(?:{nouns})\b", text):
        link.consumed.add(m.group(1))
        return number_value(m.group(1))
    return None


def _groupable(link: Link, word: str) -> ColumnInfo | None:
    """The text column (not a key, not pinned by a filter) a grouping word names."""
    if word in link.value_forms:
        return None
    t, filtered = link.table, equality_columns(link.filters)
    return next((c for c in t.visible_columns() if c.kind == "text" and c.name not in filtered
                 and c.name != t.id_column and not c.name.endswith("_id") and matches(word, c)), None)


def _group(link: Link, limit: int | None) -> ColumnInfo | None:
    """The column of "per team", "by severity", or "top 3 services by number of incidents"."""
    t, text = link.table, link.text
    m = next((g for g in _GROUP.finditer(text) if _groupable(link, g.group(1)) is not None), None)
    if m is None and limit:
        # "top 3 services by number of incidents": the noun after the number is the group
        m = re.search(rf"\b(?:top|first|last)\s+{NUM}\s+([\w-]+)", text)
        if m and not any(c.kind == "text" and matches(m.group(2), c) for c in t.visible_columns()):
            m = None
        if m:
            m = re.search(rf"(\b{re.escape(m.group(2))}\b)", text)
    if m is None:
        return None
    group = _groupable(link, m.group(1))
    if group is not None:
        link.consumed |= set(m.group(0).split())
    return group


def _grouped(linker: SchemaLinker, link: Link, cues: _Cues, group: ColumnInfo) -> QueryPlan | Decline:
    """One row per group with its aggregate; the top ones when the question ranks them."""
    link.consume_column(group)
    fn: AggregateFn = cues.agg or "count"
    if fn != "count" and cues.measure is None:
        return _no_measure(link, fn)
    agg = Aggregate("count") if fn == "count" or cues.measure is None else _aggregate(linker, link.table, fn, cues.measure)
    plan = QueryPlan(link.table.name, "grouped", columns=(group.name,), aggregate=agg, filters=tuple(link.filters),
                     group_by=group.name, order_by=(Order(group.name),))
    if cues.limit or cues.most or cues.superlative:
        descending = not (cues.superlative == "min" or cues.most in ("fewest", "least"))
        return replace(plan, kind="grouped top", order_by=(Order(None, descending), Order(group.name)), limit=cues.limit or 1)
    return plan


def _aggregate(linker: SchemaLinker, t: TableInfo, fn: AggregateFn, measure: ColumnInfo) -> Aggregate:
    """`fn` over a number column; a sum of a column whose readable values have at most a few
    decimals (money) is added up as decimals, so it reads 104189.72, not 104189.72000000002."""
    profile = linker.profiles.get((t.name, measure.name))
    decimals = profile.decimals if profile is not None and fn == "sum" else None
    return Aggregate(fn, measure.name, decimals=decimals)


def _no_measure(link: Link, fn: str) -> Decline:
    """Why an aggregate has no column: the table has no number column, or none the words name
    or mean (then the words left, so the caller can name one)."""
    t = link.table
    numbers = [c.name for c in t.visible_columns() if c.kind == "number" and c.name != t.id_column]
    if not numbers:
        return Decline(f"{t.name} has no number column to {fn}")
    left = tuple(sorted(w for w in link.words - link.consumed - FILLER if not w.isdigit()))
    return Decline(f"could not tell which number column of {t.name} to {fn} ({', '.join(numbers)}): "
                   f"name one in the question", left)


def _display(t: TableInfo) -> list[str]:
    return [c for c in (t.id_column, *_DISPLAY) if c and t.column(c)]


def _superlative(linker: SchemaLinker, link: Link, cues: _Cues, superlative: Literal["max", "min"]) -> QueryPlan | Decline:
    """The record(s) with the largest or smallest value ("which release was the largest"), or
    the value itself ("what was the longest outage")."""
    t = link.table
    target = cues.measure or cues.date_col
    if target is None:
        return Decline("nothing to take the maximum or minimum of")
    link.consume_column(target)
    entity = bool(re.search(rf"\b(which|what)\s+({'|'.join(map(re.escape, linker.table_words(t)))})\b", link.text)) or cues.limit
    key = t.id_column
    if entity and key:
        columns = tuple(dict.fromkeys(_display(t) + [target.name]))
        return QueryPlan(t.name, "superlative", columns, filters=tuple(link.filters),
                         order_by=(Order(target.name, superlative == "max"), Order(key)), limit=cues.limit or 1)
    return QueryPlan(t.name, superlative, aggregate=Aggregate(superlative, target.name), filters=tuple(link.filters))


def _lookup(linker: SchemaLinker, link: Link, cues: _Cues, lookup_col: str) -> QueryPlan | Decline:
    """One record the question names by its key: the columns it asks for first, then its key,
    its linked document and the rest of the row ("what was decided on BP-2201" is its status
    and notice as much as its decision date)."""
    t, words = link.table, link.words
    unexplained = words - link.consumed - FILLER
    asked = [c for c in t.visible_columns() if c.name != lookup_col and any(matches(w, c) for w in unexplained)]
    if not asked and cues.measure is not None:
        asked = [cues.measure]
    if not asked:  # "what was the spend on PO-1005?": a column the words mean, though they name none
        meant = linker.column_meant(link, ("text", "number", "date", "timestamp", "bool"), unexplained)
        asked = [meant] if meant is not None else []
    if _WHEN.search(link.text) or {"date", "day"} & words:
        dcol = linker.date_column(t, link.text)
        if dcol is not None and dcol not in asked:
            asked.insert(0, dcol)
            link.consumed |= {"when", "date", "day", "what", "on", "which"} & words
    if not asked:
        return Decline("the question names a record but no column to read from it")
    for c in asked:
        link.consume_column(c)
    row = [c.name for c in asked] + [lookup_col] + [c.name for c in t.visible_columns()]
    return QueryPlan(t.name, "lookup", tuple(dict.fromkeys(row)), filters=tuple(link.filters))


def _listing(link: Link, cues: _Cues) -> QueryPlan | Decline:
    """A list of records, with the columns the question names ("along with their severity");
    the latest ones first when it asks for a number of them."""
    t, words, key = link.table, link.words, link.table.id_column
    display = _display(t)
    order: tuple[Order, ...] = (Order(key),) if key else ()
    extra = [c for c in compared_columns(link.filters) if c not in display]
    pinned = equality_columns(link.filters)
    for c in t.visible_columns():
        named = any(matches(w, c) for w in words - link.consumed - FILLER)
        if c.name not in display and c.name not in pinned and named:
            extra.append(c.name)
            link.consume_column(c)
    if cues.limit and cues.date_col:
        order = (Order(cues.date_col.name, True),) + ((Order(key, True),) if key else ())
        extra.append(cues.date_col.name)
    if not display:
        return Decline(f"{t.name} has no key column to list")
    return QueryPlan(t.name, "list", tuple(dict.fromkeys(display + extra)), filters=tuple(link.filters),
                     order_by=order, limit=cues.limit or None)
