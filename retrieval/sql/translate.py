"""Deterministic question-to-SQL by schema linking; it declines rather than guess.

Every content word of the question must be explained by something linked to the schema:
the table (its name, or the noun of its key column: `release_id` -> "release"), a column
(its name's words), a categorical value present in the rows the caller may read, an
identifier found in a column, a number with a comparison, a date or range, or a cue word
for an aggregate, grouping, ordering or limit. A question with an unexplained word is
declined with the words it could not link, so the loop can route elsewhere. The SQL it
writes still goes through the guard like any caller's statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Literal, Mapping, Sequence

from retrieval.constraints import identifiers
from retrieval.dates import DateRange, find_dates
from retrieval.sql.schema import ColumnInfo, ColumnProfile, TableInfo
from retrieval.text import stem as _stem

Agg = Literal["count", "avg", "sum", "max", "min"]

# General English that carries no schema meaning in a record question.
FILLER = frozenset("""
a an the of in on at to for from with by and or is are was were be been being has have had do does did
what which who whom whose when where how there their its it this that these those any all each every
me my we our us you your i show list give tell find get display return please much many so far
total overall ever recorded record records single one value values table data number numbers
took take taken takes spent needed currently still now amount among first assigned then than went go gone
up down out along across over into onto about around within during after before since until ever
include including included includes put puts shows show shown showed appear appears appeared ended end ends
happen happened happens occur occurred affect affected affects involve involved involving belong belonged
got get gets go goes going come came make made give given gave see saw seen often times time whole overall
both also only just very all any some such other same own per across so far yet again too
as owned owns own handled handle handles
hey hi hello could would can will please provide tell know want like need curious m fine just well kindly
level hit hits
""".split())
_COUNT = re.compile(r"\b(how many|counts?|number of)\b")  # "number of <numeric column>" is not a count
_AVG = re.compile(r"\b(average|mean|on average)\b")
_SUM = re.compile(r"\b(total|add up|sum of|sum)\b")
_MAX = re.compile(r"\b(longest|largest|highest|maximum|max|biggest|most recently|most recent|latest|newest|slowest|greatest|most expensive)\b")
_MIN = re.compile(r"\b(shortest|quickest|lowest|minimum|min|smallest|earliest|fastest|cheapest|fewest|oldest)\b")
_MOST = re.compile(r"(?<!\bat )\b(most|fewest|least)\b")
_GROUP = re.compile(r"\b(?:per|by|for each|in each|each|broken down by|break down (?:the )?[\w-]+(?: [\w-]+)? by|grouped by|split by)\s+(?:the\s+|a\s+|an\s+)?(?!number\b|count\b|total\b)(\w[\w-]*)")
_NUM = r"(\d+|two|three|four|five|six|seven|eight|nine|ten)"
_TOP = re.compile(
    rf"\b(?:top|first|last)\s+{_NUM}\b|\b{_NUM}\s+(?=(?:most|least|latest|newest|oldest|largest|smallest|highest|lowest|biggest)\b)"
    rf"|\bwhich\s+(two|three|four|five|six|seven|eight|nine|ten)\b"
)
_WORDNUM = {"one": 1, "a": 1, "an": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10}
_COMPARE = re.compile(
    r"\b(more than|over|greater than|above|at least|no less than|fewer than|less than|under|below|at most|"
    r"no more than|exactly|equal to|longer than|shorter than|faster than|quicker than|slower than|higher than|"
    r"lower than|bigger than|smaller than|exceeding|beyond|within)\s+(\d+(?:\.\d+)?|an?|one|two|three|four|five|six|seven|eight|nine|ten)\b"
)
_OPS = {"more than": ">", "over": ">", "greater than": ">", "above": ">", "at least": ">=", "no less than": ">=",
        "fewer than": "<", "less than": "<", "under": "<", "below": "<", "at most": "<=", "no more than": "<=",
        "exactly": "=", "equal to": "=", "longer than": ">", "shorter than": "<", "faster than": "<",
        "quicker than": "<", "slower than": ">", "higher than": ">", "lower than": "<", "bigger than": ">",
        "smaller than": "<", "exceeding": ">", "beyond": ">", "within": "<="}
_WHEN = re.compile(r"\b(when|on what date|what date|which date|what day|on which day)\b")
_UNIT_SYNONYMS = {"usd": ("dollar", "dollars", "usd", "$"), "hours": ("hour", "hours", "time", "duration"), "count": ("number",)}
_DATE_VERBS = {"opened": "open", "open": "open", "resolved": "resolv", "closed": "close", "deployed": "deploy",
               "released": "deploy", "shipped": "deploy", "ship": "deploy", "rolled out": "deploy", "created": "creat"}
_WORD = re.compile(r"[a-z0-9][a-z0-9_.$-]*")
# Where a categorical value word is a verb, not a value: ending a clause that an auxiliary
# opened ("did radiology open in Q1"); where it is a value: right after a copula or "still"
# ("tickets that are open"), or before the noun it modifies ("open tickets").
# ("does finance have": a word right after the auxiliary is its subject, not the verb; and a
# verb ends its clause: "did radiology open in Q1", "did they close?")
_VERB_BEFORE = re.compile(r"\b(?:did|do|does|didn't|don't|doesn't|will|won't|would|can|could|should|shall|"
                          r"was|were|is|are|has|have|had)\s+(?:[\w-]+\s+){1,2}$")
_CLAUSE_END = frozenset("in on at during before after since between from by for over within last this so".split())
_VALUE_BEFORE = re.compile(r"\b(?:is|are|was|were|be|been|being|still|currently|remain|remains|remained|status|marked|as|not|the|a|an|"
                            r"to|by|of|for|with|from|in|on|at|than)\s+$")


@dataclass(frozen=True)
class Translation:
    sql: str
    table: str
    explanation: str
    ordered: bool = False


@dataclass(frozen=True)
class Decline:
    reason: str
    unlinked: tuple[str, ...] = ()


@dataclass
class _Link:
    """Mutable working state of one translation."""

    text: str
    consumed: set[str] = field(default_factory=set)
    value_forms: set[str] = field(default_factory=set)
    where: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _root(word: str) -> str:
    """A crude stem for linking verbs and nouns to column names: resolve ~ resolution."""
    for suf in ("ations", "ation", "ions", "ion", "ing", "ed", "es", "ee", "s", "e"):
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            word = word[: -len(suf)]
            break
    return word[:5]


def _matches(word: str, column_words: set[str]) -> bool:
    return word in column_words or _stem(word) in column_words or (
        len(word) >= 4 and _root(word) in {_root(c) for c in column_words if len(c) >= 4}
    )


def _forms(value: str) -> set[str]:
    v = value.lower()
    return {v, v.replace("_", " "), v.replace("-", " "), v.replace("_", " ").replace("-", " ")}


def _quote(value: object) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _column_words(col: ColumnInfo) -> set[str]:
    parts = col.name.lower().split("_")
    words = set(parts) | {_stem(p) for p in parts} | {col.name.lower()}
    for p in parts:
        words.update(_UNIT_SYNONYMS.get(p, ()))
    return words - {"id", "at", "on"}


class Translator:
    """Links questions to the tables one principal may read (built per principal)."""

    def __init__(self, tables: Sequence[TableInfo], profiles: Mapping[tuple[str, str], ColumnProfile], today: date) -> None:
        self.tables = {t.name: t for t in tables}
        self.profiles = profiles
        self.today = today

    # -- linking helpers ---------------------------------------------------------------
    def _table_words(self, t: TableInfo) -> set[str]:
        words = {t.name, _stem(t.name)}
        if t.id_column:
            noun = t.id_column[: -len("_id")]
            words |= {noun, noun + "s", _stem(noun)}
        return words

    def _value_hits(self, t: TableInfo, text: str) -> list[tuple[str, str, str]]:
        """(column, value, surface form) for categorical values present as whole words."""
        hits = []
        for col in t.visible_columns():
            if col.name.endswith("_id") or col.name == t.doc_column:
                continue  # keys are linked as identifiers, not as categories
            profile = self.profiles.get((t.name, col.name))
            for value in profile.values if profile else ():
                for form in sorted(_forms(value), key=len, reverse=True):
                    if len(form) > 1 and re.search(rf"(?<![\w-]){re.escape(form)}(?![\w-])", text):
                        hits.append((col.name, value, form))
                        break
        return hits

    def _value_reading(self, t: TableInfo, text: str, col: str, form: str) -> Literal["value", "verb", "ambiguous"]:
        """How the question uses a categorical value's words: as the value (after a copula,
        or modifying a noun), as a verb (ending a clause an auxiliary opened), or either (the
        words also name another column, "open" ~ opened_on, and nothing around them tells):
        then the translator declines rather than guesses."""
        m = re.search(rf"(?<![\w-]){re.escape(form)}(?![\w-])", text)
        if m is None:
            return "value"
        words = _WORD.findall(form)
        if not any(c.name != col and any(_matches(w, _column_words(c)) for w in words) for c in t.visible_columns()):
            return "value"  # no other reading: the words name no other column
        before, after = text[: m.start()], _WORD.findall(text[m.end() :])[:1]
        if _VALUE_BEFORE.search(before) or (after and after[0] not in _CLAUSE_END):
            return "value"  # "are open", "open tickets", "closed p2 tickets"
        if _VERB_BEFORE.search(before):
            return "verb"  # "did radiology open in Q1", "when was ticket FIN-307 closed?"
        return "ambiguous"

    def _id_columns(self, t: TableInfo, ident: str) -> list[str]:
        """Columns whose values share the identifier's shape (same prefix before the digits)."""
        prefix = re.match(r"[A-Za-z]+[-_]?", ident)
        out = []
        for col in t.visible_columns():
            if col.name == t.doc_column:
                continue
            profile = self.profiles.get((t.name, col.name))
            if prefix and profile and prefix.group(0).upper() in profile.prefixes:
                out.append(col.name)
        return out

    def _pick_table(self, text: str, idents: list[str]) -> TableInfo | None:
        scored = []
        words = set(_WORD.findall(text))
        for t in self.tables.values():
            score = 3 * len(self._table_words(t) & words)
            score += sum(2 + (2 if t.id_column in self._id_columns(t, i) else 0) for i in idents if self._id_columns(t, i))
            score += sum(1 for c in t.visible_columns() if any(_matches(w, _column_words(c)) for w in words))
            score += len({c for c, _, _ in self._value_hits(t, text)})
            scored.append((score, bool(self._table_words(t) & words), t.name))
        scored.sort(reverse=True)
        if not scored or scored[0][0] == 0:
            return None
        if len(scored) > 1 and scored[0][:2] == scored[1][:2]:
            return None  # two tables fit equally well: do not guess
        return self.tables[scored[0][2]]

    def _column_mentioned(self, t: TableInfo, text: str, kinds: Sequence[str], words: set[str]) -> ColumnInfo | None:
        best = None
        for col in t.visible_columns():
            if col.kind in kinds and col.name != t.id_column:
                overlap = sum(1 for w in words if _matches(w, _column_words(col)))
                if overlap and (best is None or overlap > best[0]):
                    best = (overlap, col)
        return best[1] if best else None

    def _consume_column(self, link: "_Link", col: ColumnInfo, words: set[str]) -> None:
        link.consumed |= {w for w in words if _matches(w, _column_words(col))}

    def _date_column(self, t: TableInfo, text: str) -> ColumnInfo | None:
        """The date column the question's verb names: a column whose name the words match
        ("close" ~ closed_on, "decided" ~ decided_on), else a known synonym, else the first."""
        dates = [c for c in t.visible_columns() if c.kind in ("date", "timestamp")]
        words = set(_WORD.findall(text))
        named = [c for c in dates if any(_matches(w, _column_words(c)) for w in words)]
        if len(named) == 1:
            return named[0]
        for verb, root in _DATE_VERBS.items():
            if re.search(rf"\b{verb}\b", text):
                for c in dates:
                    if c.name.lower().startswith(root):
                        return c
        return dates[0] if dates else None

    # -- translation ---------------------------------------------------------------------
    def translate(self, question: str) -> Translation | Decline:
        text = question.lower().replace("\u2019", "'")
        text = re.sub(r"\b(what|who|where|when|how|that|it|there)'s\b", r"\1 is", text)
        text = re.sub(r"'s\b|s'(?=\s)", "", text)
        text = " ".join(re.sub(r"[?,;:!()]|\.(?=\s|$)", " ", text).split())
        idents = [i for i in identifiers(question)]
        t = self._pick_table(text, idents)
        if t is None:
            return Decline("no readable table matches the question")
        link = _Link(text)
        words = set(_WORD.findall(text))
        link.consumed |= {w for w in words if w in self._table_words(t) or _stem(w) in self._table_words(t)}

        # categorical values present in the readable rows, where the question uses them as values
        for col, value, form in self._value_hits(t, text):
            reading = self._value_reading(t, text, col, form)
            if reading == "verb":
                continue  # "did radiology open": the word names an event (a date column), not a status
            if reading == "ambiguous":
                return Decline(f"{form!r} could be a value of {col} or name another column; say which", (form,))
            link.where.append(f'"{col}" = {_quote(value)}')
            link.value_forms |= _forms(value)
            link.consumed |= set(_WORD.findall(form))
            self._consume_column(link, t.column(col), words)

        # identifiers -> equality on the column whose values have that shape
        lookup_col = None
        for ident in idents:
            if ident.lower() in link.value_forms:
                continue
            named = t.column(ident.lower())
            if named is not None:  # a column named literally, e.g. cost_usd
                link.consumed.add(ident.lower())
                continue
            cols = self._id_columns(t, ident)
            if not cols:
                return Decline(f"identifier {ident} does not match any column of {t.name}", (ident,))
            col = t.id_column if t.id_column in cols else cols[0]
            link.where.append(f'"{col}" = {_quote(ident)}')
            link.consumed.add(ident.lower())
            if col == t.id_column:
                lookup_col = col

        # dates -> range on the date column the verb names
        spans = [(m.start(), m.end()) for i in idents for m in re.finditer(re.escape(i.lower()), text)]
        spans += [(m.start(), m.end()) for m in _COMPARE.finditer(text)]  # "over 2000 dollars" is no year
        ranges = find_dates(text, self.today, exclude=spans, strict=True)
        if ranges:
            dcol = self._date_column(t, text)
            if dcol is None:
                return Decline(f"{t.name} has no date column for {ranges[0].text!r}")
            for r in ranges:
                link.where.extend(_date_predicates(dcol, r))
                link.consumed |= set(_WORD.findall(r.text.lower()))
            link.consumed |= {"so", "far", "since", "before", "after", "during"}
        # verbs naming a date column explain themselves ("shipped" for deployed_at)
        dates = [c.name for c in t.visible_columns() if c.kind in ("date", "timestamp")]
        for verb, root in _DATE_VERBS.items():
            if re.search(rf"\b{verb}\b", text) and any(d.startswith(root) for d in dates):
                link.consumed |= set(verb.split())

        # numeric comparisons: "more than 30 changes"
        for m in _COMPARE.finditer(text):
            number = m.group(2)
            value = float(_WORDNUM.get(number, number)) if number in _WORDNUM else float(number)
            tail = set(_WORD.findall(text[m.end() : m.end() + 40]))
            col = self._column_mentioned(t, text, ("number",), tail | set(_WORD.findall(text[max(0, m.start() - 40) : m.start()])))
            if col is None:
                return Decline(f"cannot tell which column {m.group(0)!r} compares")
            link.where.append(f'"{col.name}" {_OPS[m.group(1)]} {value:g}')
            link.consumed |= set(_WORD.findall(m.group(0)))
            self._consume_column(link, col, words)

        return self._shape(t, text, words, link, lookup_col)

    def _shape(self, t: TableInfo, text: str, words: set[str], link: _Link, lookup_col: str | None) -> Translation | Decline:
        """Decide the SELECT list, grouping, ordering and limit from cue words."""
        agg: Agg | None = None
        measure = self._column_mentioned(t, text, ("number",), words)
        count_cue = _COUNT.search(text)
        if count_cue and measure is not None:
            # "number of changes", "change count", "how many hours": the cue names a quantity
            after = _WORD.findall(text[count_cue.end() : count_cue.end() + 20])[:1]
            before = set(_WORD.findall(text[max(0, count_cue.start() - 20) : count_cue.start()]))
            near = set(after) | (before if count_cue.group(1) != "how many" else set())
            if any(_matches(w, _column_words(measure)) for w in near):
                count_cue = None
        if _AVG.search(text):
            agg = "avg"
        elif count_cue and (count_cue.group(1) == "how many" or not _SUM.search(text)):
            agg = "count"
        elif _SUM.search(text):
            agg = "sum"
        for rx in (_COUNT, _AVG, _SUM):
            for m in rx.finditer(text):
                link.consumed |= set(m.group(0).split())
        superlative: Literal["max", "min"] | None = None
        if m := _MAX.search(text):
            superlative = "max"
        elif m := _MIN.search(text):
            superlative = "min"
        for rx in (_MAX, _MIN):
            for cue in rx.finditer(text):
                link.consumed |= set(cue.group(0).split())
        most = _MOST.search(text)
        if most:
            link.consumed.add(most.group(1))
        limit = None
        if m := _TOP.search(text):
            number = next(g for g in m.groups() if g)
            limit = int(_WORDNUM.get(number, number))
            link.consumed |= set(m.group(0).split())
        group = None
        filtered = set(re.findall(r'"(\w+)" = ', " ".join(link.where)))

        def groupable(word: str) -> ColumnInfo | None:
            if word in link.value_forms:
                return None
            return next((c for c in t.visible_columns() if c.kind == "text" and c.name not in filtered
                         and c.name != t.id_column and not c.name.endswith("_id") and _matches(word, _column_words(c))), None)

        if limit is None:
            nouns = "|".join(map(re.escape, sorted(self._table_words(t), key=len, reverse=True)))
            if m := re.search(rf"\b{_NUM}\s+(?:[\w-]+\s+)?(?:{nouns})\b", text):
                limit = int(_WORDNUM.get(m.group(1), m.group(1)))
                link.consumed.add(m.group(1))
        m = next((g for g in _GROUP.finditer(text) if groupable(g.group(1)) is not None), None)
        if m is None and limit:
            # "top 3 services by number of incidents": the noun after the number is the group
            m = re.search(rf"\b(?:top|first|last)\s+{_NUM}\s+([\w-]+)", text)
            if m and not any(c.kind == "text" and _matches(m.group(2), _column_words(c)) for c in t.visible_columns()):
                m = None
            if m:
                m = re.search(rf"(\b{re.escape(m.group(2))}\b)", text)
        if m:
            group = groupable(m.group(1))
            if group is not None:
                link.consumed |= set(m.group(0).split())
        date_col = self._date_column(t, text)
        if measure is not None:
            self._consume_column(link, measure, words)
        if re.search(r"\blatest first|newest first|most recent|latest\b", text):
            link.consumed |= {"latest", "first", "newest", "most", "recent"}

        where = f" WHERE {' AND '.join(link.where)}" if link.where else ""
        key = t.id_column
        display = [c for c in (key, "title", "service", "version") if c and t.column(c)]

        # grouping: "per team", "by severity", "which team had the most incidents"
        if group is None and most and (superlative or most) and agg is None:
            word_after = re.search(r"\bwhich\s+(?:(?:two|three|four|five|six|seven|eight|nine|ten|\d+)\s+)?([\w-]+)", text)
            if word_after:
                group = groupable(word_after.group(1))
                if group is not None:
                    link.consumed.add(word_after.group(1))
                    agg = "count"
        if group is not None:
            self._consume_column(link, group, words)
            value_expr = _agg_expr(agg or "count", measure)
            if value_expr is None:
                return Decline("no numeric column to aggregate per group")
            sql = f'SELECT "{group.name}", {value_expr} AS value FROM {t.name}{where} GROUP BY "{group.name}"'
            if limit or most or superlative:
                direction = "ASC" if (superlative == "min" or (most and most.group(1) in ("fewest", "least"))) else "DESC"
                sql += f' ORDER BY value {direction}, "{group.name}" LIMIT {limit or 1}'
                return self._finish(t, link, words, Translation(sql, t.name, "grouped top", ordered=True))
            return self._finish(t, link, words, Translation(sql + f' ORDER BY "{group.name}"', t.name, "grouped"))

        if agg == "count":
            return self._finish(t, link, words, Translation(f"SELECT count(*) AS value FROM {t.name}{where}", t.name, "count"))
        if agg in ("avg", "sum"):
            if measure is None:
                return Decline(f"no numeric column of {t.name} to {agg}")
            return self._finish(t, link, words, Translation(f"SELECT {_agg_expr(agg, measure)} AS value FROM {t.name}{where}", t.name, agg))
        if superlative:
            target = measure or date_col
            if target is None:
                return Decline("nothing to take the maximum or minimum of")
            self._consume_column(link, target, words)
            entity = bool(re.search(rf"\b(which|what)\s+({'|'.join(map(re.escape, self._table_words(t)))})\b", text)) or limit
            if entity and key:
                direction = "DESC" if superlative == "max" else "ASC"
                cols = ", ".join(f'"{c}"' for c in dict.fromkeys(display + [target.name]))
                sql = f'SELECT {cols} FROM {t.name}{where} ORDER BY "{target.name}" {direction}, "{key}" LIMIT {limit or 1}'
                return self._finish(t, link, words, Translation(sql, t.name, "superlative", ordered=True))
            return self._finish(t, link, words, Translation(f'SELECT {superlative}("{target.name}") AS value FROM {t.name}{where}', t.name, superlative))
        if lookup_col:
            unexplained = words - link.consumed - FILLER
            asked = [c for c in t.visible_columns() if c.name != lookup_col and any(_matches(w, _column_words(c)) for w in unexplained)]
            if not asked and measure is not None:
                asked = [measure]
            if _WHEN.search(text) or {"date", "day"} & words:
                dcol = self._date_column(t, text)
                if dcol is not None and dcol not in asked:
                    asked.insert(0, dcol)
                    link.consumed |= {"when", "date", "day", "what", "on", "which"} & words
            if not asked:
                return Decline("the question names a record but no column to read from it")
            for c in asked:
                self._consume_column(link, c, words)
            # The record itself: the columns asked for first, then its key, its linked document
            # and the rest of the row ("what was decided on BP-2201" is its status and notice as
            # much as its decision date).
            row = [c.name for c in asked] + [lookup_col] + [c.name for c in t.visible_columns()]
            cols = ", ".join(f'"{c}"' for c in dict.fromkeys(row))
            return self._finish(t, link, words, Translation(f"SELECT {cols} FROM {t.name}{where}", t.name, "lookup"))
        # a list of records, with the columns the question names ("along with their severity")
        order = f' ORDER BY "{key}"' if key else ""
        extra = [c for c in re.findall(r'"(\w+)" [<>=]', where) if c not in display]
        filtered_eq = set(re.findall(r'"(\w+)" = ', where))
        for c in t.visible_columns():
            if c.name not in display and c.name not in filtered_eq and any(_matches(w, _column_words(c)) for w in words - link.consumed - FILLER):
                extra.append(c.name)
                self._consume_column(link, c, words)
        if limit and date_col:
            order = f' ORDER BY "{date_col.name}" DESC' + (f', "{key}" DESC' if key else "")
            extra.append(date_col.name)
        if not display:
            return Decline(f"{t.name} has no key column to list")
        cols = ", ".join(f'"{c}"' for c in dict.fromkeys(display + extra))
        sql = f"SELECT {cols} FROM {t.name}{where}{order}" + (f" LIMIT {limit}" if limit else "")
        return self._finish(t, link, words, Translation(sql, t.name, "list", ordered=bool(limit)))

    def _finish(self, t: TableInfo, link: _Link, words: set[str], out: Translation) -> Translation | Decline:
        """Decline when some content word was linked to nothing."""
        used = {c.name for c in t.visible_columns() if f'"{c.name}"' in out.sql}
        left = sorted(w for w in words - link.consumed - FILLER if not w.isdigit() and not _is_linked(w, t, used))
        left = [w for w in left if not re.fullmatch(r"[\d.:-]+", w)]
        if left:
            return Decline("could not link every word of the question to the schema", tuple(left))
        return out


def _is_linked(word: str, t: TableInfo, used: set[str]) -> bool:
    """A word naming a column is explained only when the SQL uses that column; otherwise
    the question asks something about it that the translation would silently drop."""
    return any(_matches(word, _column_words(c)) for c in t.visible_columns() if c.name in used)


def _agg_expr(agg: Agg, measure: ColumnInfo | None) -> str | None:
    if agg == "count":
        return "count(*)"
    if measure is None:
        return None
    if agg == "avg":
        return f'round(avg("{measure.name}"), 2)'
    return f'{agg}("{measure.name}")'


def _date_predicates(col: ColumnInfo, r: DateRange) -> list[str]:
    expr = f'CAST("{col.name}" AS DATE)'
    out = []
    if r.start is not None:
        out.append(f"{expr} >= DATE '{r.start.isoformat()}'")
    if r.end is not None:
        out.append(f"{expr} <= DATE '{r.end.isoformat()}'")
    return out
