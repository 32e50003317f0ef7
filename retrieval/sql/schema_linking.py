"""Schema linking: the table a question is about, and the categorical values, identifiers,
dates and numeric comparisons it names, as typed filters.

Everything is read from the tables one principal may read and from their `ColumnProfile`s
(the categorical values and identifier prefixes of the rows that principal may read), so a
value the caller cannot see never links. Linking also records which of the question's
words it explained; the translator declines a question with a content word left over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Literal, Mapping, Sequence

from retrieval.dates import find_dates
from retrieval.sql.plan import Compare, CompareOp, DateWithin, Decline, Equals, Filter
from retrieval.sql.meaning import ColumnMeaning
from retrieval.sql.schema import ColumnInfo, ColumnProfile, TableInfo
from retrieval.sql.words import (CONTAINERS, FILLER, RECORDING, RELATION_VERBS, WORD, WORD_NUMBERS, matches, names, noun_forms,
                                 plural, same_root, singular, value_forms, words_in)
from retrieval.text import stem

COMPARE = re.compile(
    r"\b(more than|over|greater than|above|at least|no less than|fewer than|less than|under|below|at most|"
    r"no more than|exactly|equal to|longer than|shorter than|faster than|quicker than|slower than|higher than|"
    r"lower than|bigger than|smaller than|exceeding|beyond|within)"
    r"\s+(\d+(?:\.\d+)?|an?|one|two|three|four|five|six|seven|eight|nine|ten)\b"
)
OPS: dict[str, CompareOp] = {
    "more than": ">", "over": ">", "greater than": ">", "above": ">", "at least": ">=", "no less than": ">=",
    "fewer than": "<", "less than": "<", "under": "<", "below": "<", "at most": "<=", "no more than": "<=",
    "exactly": "=", "equal to": "=", "longer than": ">", "shorter than": "<", "faster than": "<",
    "quicker than": "<", "slower than": ">", "higher than": ">", "lower than": "<", "bigger than": ">",
    "smaller than": "<", "exceeding": ">", "beyond": ">", "within": "<=",
}
# Verbs that name a date column by the start of its name ("shipped" -> deployed_at).
DATE_VERBS = {"opened": "open", "open": "open", "resolved": "resolv", "closed": "close", "deployed": "deploy",
              "released": "deploy", "shipped": "deploy", "ship": "deploy", "rolled out": "deploy", "created": "creat"}
# Where a categorical value word is a verb, not a value: ending a clause that an auxiliary
# opened ("did radiology open in Q1"); where it is a value: right after a copula or "still"
# ("tickets that are open"), or before the noun it modifies ("open tickets").
# ("does finance have": a word right after the auxiliary is its subject, not the verb; and a
# verb ends its clause: "did radiology open in Q1", "did they close?")
_VERB_BEFORE = re.compile(r"\b(?:did|do|does|didn't|don't|doesn't|will|won't|would|can|could|should|shall|"
                          r"was|were|is|are|has|have|had)\s+(?:[\w-]+\s+){1,2}$")
_CLAUSE_END = frozenset("in on at during before after since between from by for over within last this so".split())
_VALUE_BEFORE = re.compile(r"\b(?:is|are|was|were|be|been|being|still|currently|remain|remains|remained|status|marked|as|not|"
                           r"the|a|an|to|by|of|for|with|from|in|on|at|than)\s+$")


MIN_NUMBER_DIGITS = 3  # a shorter number is read as a count or a limit ("top 5"), never as a record's number
MAX_LABEL_WORDS = 3  # a column whose values are all this short holds labels ("wheels and tyres", "Talvane Diagnostics")


@dataclass
class Link:
    """What linking found in one question, and the words explained so far (shaping the
    SELECT explains more). Mutable working state of one translation."""

    table: TableInfo
    text: str
    words: set[str]
    filters: list[Filter] = field(default_factory=list)
    consumed: set[str] = field(default_factory=set)
    value_forms: set[str] = field(default_factory=set)
    value_words: set[str] = field(default_factory=set)  # the question's words that wrote a linked value
    lookup_column: str | None = None  # the key column an identifier pins: the question names one record

    def consume_column(self, col: ColumnInfo) -> None:
        """The question's words that name `col` are explained."""
        self.consumed |= {w for w in self.words if matches(w, col)}


def written_as(value: str, tokens: Sequence[tuple[str, int, int]], text: str) -> str | None:
    """The question's words that write a value of two words or more word for word in other
    forms of the same words: each word the same, its singular or plural, or of the same root
    where both are six letters or more ("sample rejections" for `sample rejected`, "pumps
    inspected" for `pump inspection`). None when no run of the question's words does."""
    parts = re.findall(r"[a-z0-9]+", value.lower())
    if len(parts) < 2:
        return None
    for i in range(len(tokens) - len(parts) + 1):
        run = tokens[i : i + len(parts)]
        if all(w == p or singular(w) == singular(p) or same_root(w, (p,)) for (w, _, _), p in zip(run, parts, strict=True)):
            return text[run[0][1] : run[-1][2]]
    return None


class SchemaLinker:
    """Links question text to the tables one principal may read and to their profiles;
    `meaning` (when given) links a word to the column it means though it names none."""

    def __init__(self, tables: Sequence[TableInfo], profiles: Mapping[tuple[str, str], ColumnProfile],
                 meaning: ColumnMeaning | None = None) -> None:
        self.tables = {t.name: t for t in tables}
        self.profiles = profiles
        self.meaning = meaning

    def link(self, text: str, idents: Sequence[str], today: date) -> Link | Decline:
        """Table and filters of a normalised question (`idents`: its identifiers, as written)."""
        t = self.pick_table(text, idents)
        if t is None:
            return Decline("no readable table matches the question")
        link, decline = self.link_table(t, text, idents, today)
        return link if decline is None else decline

    def link_table(self, t: TableInfo, text: str, idents: Sequence[str], today: date) -> tuple[Link, Decline | None]:
        """The filters of a normalised question over table `t`, and the first reason to
        decline, if any. Every step runs even after one declines, so the link still records
        every word the schema explains: what is left is what a decline reports."""
        link = Link(t, self._split_value_column(t, text), set())
        link.words = words_in(link.text)
        table_words = self.table_words(t)
        link.consumed |= {w for w in link.words if w in table_words or stem(w) in table_words}
        # "entries in the fault log", "faults logged in March": the container of the table's
        # records and the verbs of recording one are about its rows, whatever the table is called
        link.consumed |= link.words & (CONTAINERS | RECORDING)
        # values first: an identifier that is also a categorical value is linked as the value
        declines = (self._link_values(link), self._link_identifiers(link, idents), self._link_dates(link, idents, today),
                    self._link_comparisons(link))
        self._link_numbers(link)
        self._link_value_words(link)
        # "faults that concern the brakes": a relation verb before a value it links explains itself
        for m in re.finditer(r"\b([a-z]+)(?=\s+(?:to\s+)?(?:the\s+|a\s+|an\s+)?([\w-]+))", text):
            if m.group(1) in RELATION_VERBS and m.group(2) in link.consumed and m.group(2) not in FILLER:
                link.consumed.add(m.group(1))
        return link, next((d for d in declines if d is not None), None)

    def _split_value_column(self, t: TableInfo, text: str) -> str:
        """"high-severity events": a value of a column joined to that column's name is the two
        words ("high severity"), so the value links as a value and the name as its column."""
        def split(m: re.Match[str]) -> str:
            value, name = m.group(1), m.group(2)
            for col in t.visible_columns():
                profile = self.profiles.get((t.name, col.name))
                if profile and matches(name, col) and any(value in value_forms(v) for v in profile.values):
                    return f"{value} {name}"
            return m.group(0)

        return re.sub(r"(?<![\w-])([a-z0-9]+)-([a-z]+)(?![\w-])", split, text)

    def _link_values(self, link: Link) -> Decline | None:
        """Categorical values present in the readable rows, where the question uses them as values."""
        t, text = link.table, link.text
        for col, value, form in self.value_hits(t, text):
            reading = self.value_reading(t, text, col, form)
            if reading == "verb":
                continue  # "did radiology open": the word names an event (a date column), not a status
            if reading == "ambiguous":
                return Decline(f"{form!r} could be a value of {col} or name another column; say which", (form,))
            link.filters.append(Equals(col, value))
            at = re.search(rf"(?<![\w-]){re.escape(form)}(?![\w-])", text)
            after = WORD.findall(text[at.end():])[:1] if at else []
            if after and any(matches(after[0], c) for c in t.visible_columns()):
                link.consumed.add(after[0])  # "Brindle Cross vehicles": the noun the value describes
            if col == t.id_column:
                link.lookup_column = col  # a value of the key names one record, whatever its shape
            link.value_forms |= value_forms(value)
            link.value_words |= set(WORD.findall(form))
            link.consumed |= set(WORD.findall(form))
            column = t.column(col)
            if column is not None:
                link.consume_column(column)
        return None

    def _link_value_words(self, link: Link) -> None:
        """Words of a value of several words, where the question does not write the whole
        value: "Talvane" for "Talvane Diagnostics", "electric buses" for "electric single-deck",
        "drivers' walkaround" for "driver walkaround". Only words nothing else explains (no
        column, no table noun), only values of one column (a word in values of two columns is
        not read; a column with a value longer than MAX_LABEL_WORDS holds phrases such as
        titles, not labels, and is not read), the value most of the question's words point to first; a word in several
        values of that column means any of them ("diesel" for "diesel midibus" and "diesel
        single-deck"). A column a whole value already pinned is not read again, nor the noun
        right after such a value ("courier services" is no "instrument service"). A word that
        names a column only by its crude root ("drivers" ~ `driven`, a distance word of
        `odometer_km`) is still read as a value's word ("driver walkaround")."""
        t = link.table
        pinned = {f.column for f in link.filters if isinstance(f, Equals)}
        nouns = self.table_words(t)
        left = {w for w in link.words - link.consumed - FILLER - self._after_values(link)
                if len(w) >= 4 and w.isalpha() and w not in nouns and not any(names(w, c) for c in t.visible_columns())}
        pointed: dict[tuple[str, frozenset[str]], list[str]] = {}  # (column, question words) -> values
        columns_of: dict[str, set[str]] = {}
        for col in t.visible_columns():
            if col.name in pinned or col.name == t.doc_column or col.name.endswith("_id") or col.name == t.id_column:
                continue
            profile = self.profiles.get((t.name, col.name))
            if profile is None or any(len(re.findall(r"[a-z0-9]+", v.lower())) > MAX_LABEL_WORDS for v in profile.values):
                continue  # a column of phrases (titles, descriptions), not of short labels
            for value in profile.values:
                parts = set(re.findall(r"[a-z0-9]+", value.lower()))
                if len(parts) < 2:
                    continue  # a one-word value is linked whole, or not at all
                words = frozenset(w for w in left if {w, singular(w), plural(w)} & parts)
                if words:
                    pointed.setdefault((col.name, words), []).append(value)
                    for w in words:
                        columns_of.setdefault(w, set()).add(col.name)
        used: set[str] = set()
        for (name, words), values in sorted(pointed.items(), key=lambda kv: (-len(kv[0][1]), kv[0][0], sorted(kv[0][1]))):
            if name in pinned or words & used or any(len(columns_of[w]) > 1 for w in words):
                continue
            link.filters.extend(Equals(name, v) for v in values)
            link.consumed |= words
            link.value_words |= words
            used |= words
            pinned.add(name)

    @staticmethod
    def _after_values(link: Link) -> set[str]:
        """The word right after each value linked whole: the noun it describes ("courier
        services"), never a value of its own."""
        out = set()
        for f in link.filters:
            if isinstance(f, Equals):
                for form in value_forms(f.value):
                    for m in re.finditer(rf"(?<![\w-]){re.escape(form)}\s+([\w-]+)", link.text):
                        out.add(m.group(1))
        return out

    def _link_identifiers(self, link: Link, idents: Sequence[str]) -> Decline | None:
        """Identifiers -> equality on the column whose values have that shape."""
        t = link.table
        unmatched = []
        for ident in idents:
            if ident.lower() in link.value_forms:
                continue
            if t.column(ident.lower()) is not None:  # a column named literally, e.g. cost_usd
                link.consumed.add(ident.lower())
                continue
            cols = self.id_columns(t, ident)
            if not cols:
                unmatched.append(ident)
                continue
            col = t.id_column if t.id_column in cols else cols[0]
            link.filters.append(Equals(col, ident))
            link.consumed.add(ident.lower())
            if col == t.id_column:
                link.lookup_column = col
        if unmatched:
            return Decline(f"identifier {unmatched[0]} does not match any column of {t.name}", tuple(unmatched))
        return None

    def _link_dates(self, link: Link, idents: Sequence[str], today: date) -> Decline | None:
        """Dates -> a range on the date column the verb names."""
        t, text = link.table, link.text
        spans = [(m.start(), m.end()) for i in idents for m in re.finditer(re.escape(i.lower()), text)]
        spans += [(m.start(), m.end()) for m in COMPARE.finditer(text)]  # "over 2000 dollars" is no year
        ranges = find_dates(text, today, exclude=spans, strict=True)
        if ranges:
            dcol = self.date_column(t, text)
            if dcol is None:
                return Decline(f"{t.name} has no date column for {ranges[0].text!r}",
                               tuple(WORD.findall(ranges[0].text.lower())))
            for r in ranges:
                if r.start is not None or r.end is not None:
                    link.filters.append(DateWithin(dcol.name, r.start, r.end))
                link.consumed |= set(WORD.findall(r.text.lower()))
            link.consumed |= {"so", "far", "since", "before", "after", "during"}
        # verbs naming a date column explain themselves ("shipped" for deployed_at)
        dates = [c.name for c in t.visible_columns() if c.kind in ("date", "timestamp")]
        for verb, root in DATE_VERBS.items():
            if re.search(rf"\b{verb}\b", text) and any(d.startswith(root) for d in dates):
                link.consumed |= set(verb.split())
        return None

    def _link_comparisons(self, link: Link) -> Decline | None:
        """Numeric comparisons: "more than 30 changes"."""
        t, text = link.table, link.text
        for m in COMPARE.finditer(text):
            value = float(WORD_NUMBERS.get(m.group(2), m.group(2)))
            near = words_in(text[m.end() : m.end() + 40]) | words_in(text[max(0, m.start() - 40) : m.start()])
            col = self.column_mentioned(t, ("number",), near) or self.column_meant(link, ("number",), near)
            if col is None:
                return Decline(f"cannot tell which column {m.group(0)!r} compares", tuple(WORD.findall(m.group(0))))
            link.filters.append(Compare(col.name, OPS[m.group(1)], value))
            link.consumed |= set(WORD.findall(m.group(0)))
            link.consume_column(col)
        return None

    def _link_numbers(self, link: Link) -> None:
        """A record named by a noun and its number ("bus 2214", "room 101", "unit 4471"): a
        number of MIN_NUMBER_DIGITS or more, right after a word that is no filler, names no
        other column and was not linked as anything else, and of as many digits as every
        value of exactly one text column (its profile's `digits`) is that column's value, and
        the word before it says what the number numbers. A number a date, a comparison or a
        value already took is not read again; a bare number ("top 100", "in 2214") is not read."""
        t, text = link.table, link.text
        for m in re.finditer(r"(?<![\w.-])(\d+)(?![\w.-])", text):
            number = m.group(1)
            before = WORD.findall(text[: m.start()])[-1:]
            if (len(number) < MIN_NUMBER_DIGITS or not before or before[0] in FILLER or before[0] in link.consumed
                    or not before[0].isalpha()):
                continue
            if number in link.value_words:  # a few such numbers are categorical values, linked as such: "ship 4471"
                column = next((f.column for f in link.filters if isinstance(f, Equals) and f.value == number), None)
                if column is not None and not any(names(before[0], c) for c in t.visible_columns() if c.name != column):
                    link.consumed.add(before[0])
                continue
            if number in link.consumed:
                continue  # a year of a date, a comparison's figure
            cols = [c for c in t.visible_columns() if c.kind == "text" and c.name != t.doc_column
                    and (p := self.profiles.get((t.name, c.name))) is not None and p.digits == len(number)]
            if len(cols) != 1 or any(names(before[0], c) for c in t.visible_columns() if c is not cols[0]):
                continue  # "depot 2214": a number of another column, not read by its shape alone
            link.filters.append(Equals(cols[0].name, number))
            link.consumed |= {number, before[0]}
            link.value_words |= {number, before[0]}

    def explain_record_nouns(self, link: Link) -> None:
        """Words left that name the table's records in other words ("faults" for `defects`,
        by meaning) are explained when the question does not name them with the table's own
        noun: they say what is counted or listed, as that noun would ("which repairs had a
        fault log" asks about something the repairs had, not about repairs)."""
        t = link.table
        nouns = self.table_words(t)
        if self.meaning is None or any(w in nouns or stem(w) in nouns for w in link.words):
            return  # a question names its records once: beside the table's own noun, another is something else
        for w in sorted(link.words - link.consumed - FILLER):
            if not any(matches(w, c) for c in t.visible_columns()) and self.meaning.means_table(w, t):
                link.consumed.add(w)

    def mentions(self, link: Link, idents: Sequence[str], left: set[str], by_meaning: bool = True) -> tuple[str, ...]:
        """The question's words that name `link.table` itself: its noun, one of its rows' keys
        (an identifier of the key's shape, or a value of the key) or its columns by name;
        failing those (and given `by_meaning`), a word of `left` (words nothing explained)
        that means one of its columns (`meaning`, an embedding per word). Empty when the
        question only shares a categorical value with the table ("the kiln room"): that does
        not make it a question about the table's records."""
        t = link.table
        nouns = self.table_words(t)
        named = {w for w in link.words if w in nouns or stem(w) in nouns}
        named |= {i.lower() for i in idents if t.id_column and t.id_column in self.id_columns(t, i)}
        named |= {w for f in link.filters if isinstance(f, Equals) and f.column == t.id_column
                  for w in WORD.findall(f.value.lower())}
        columns = [c for c in t.visible_columns() if c.name != t.doc_column]
        named |= {w for w in link.words - FILLER if any(matches(w, c) for c in columns)}
        if not named and by_meaning and self.meaning is not None:
            meant = self.meaning.column_for(left, [c for c in columns if c.name != t.id_column])
            if meant is not None:
                named.add(meant.word)
        return tuple(sorted(named))

    # -- what the schema and the profiles say ---------------------------------------------
    def table_words(self, t: TableInfo) -> set[str]:
        """Words that name a table, singular or plural: its name and the words of a snake_case
        name (`purchase_orders`: "purchase order", "orders"), and the noun of a `*_id` key
        (`release_id` -> "release")."""
        names = [t.name, *(p for p in t.name.split("_") if len(p) >= 3)]
        names += [w for a in t.aliases for w in a.lower().split() if len(w) >= 3]
        if t.id_column and t.id_column.endswith("_id") and len(t.id_column) > len("_id"):
            names.append(t.id_column[: -len("_id")])
        return {form for name in names for form in noun_forms(name.lower())}

    def value_hits(self, t: TableInfo, text: str) -> list[tuple[str, str, str]]:
        """(column, value, surface form) for categorical values present as whole words, or
        written word for word in another form of the same words ("sample rejections" for
        `sample rejected`, `written_as`)."""
        hits = []
        tokens = [(m.group(0), m.start(), m.end()) for m in re.finditer(r"[\w-]+", text)]
        for col in t.visible_columns():
            if (col.name.endswith("_id") and col.name != t.id_column) or col.name == t.doc_column:
                continue  # ids are linked as identifiers, not as categories
            profile = self.profiles.get((t.name, col.name))
            for value in profile.values if profile else ():
                for form in sorted(value_forms(value), key=len, reverse=True):
                    if form in FILLER:
                        continue  # "what is it worth" names no department "IT"
                    if len(form) > 1 and re.search(rf"(?<![\w-]){re.escape(form)}(?![\w-])", text):
                        hits.append((col.name, value, form))
                        break
                else:
                    written = written_as(value, tokens, text)
                    if written is not None:
                        hits.append((col.name, value, written))
        return hits

    def value_reading(self, t: TableInfo, text: str, col: str, form: str) -> Literal["value", "verb", "ambiguous"]:
        """How the question uses a categorical value's words: as the value (after a copula,
        or modifying a noun), as a verb (ending a clause an auxiliary opened), or either (the
        words also name another column, "open" ~ opened_on, and nothing around them tells):
        then the translator declines rather than guesses."""
        m = re.search(rf"(?<![\w-]){re.escape(form)}(?![\w-])", text)
        if m is None:
            return "value"
        words = WORD.findall(form)
        if not any(c.name != col and any(matches(w, c) for w in words) for c in t.visible_columns()):
            return "value"  # no other reading: the words name no other column
        before, after = text[: m.start()], WORD.findall(text[m.end() :])[:1]
        if _VALUE_BEFORE.search(before) or (after and after[0] not in _CLAUSE_END):
            return "value"  # "are open", "open tickets", "closed p2 tickets"
        if _VERB_BEFORE.search(before):
            return "verb"  # "did radiology open in Q1", "when was ticket FIN-307 closed?"
        return "ambiguous"

    def id_columns(self, t: TableInfo, ident: str) -> list[str]:
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

    def pick_table(self, text: str, idents: Sequence[str]) -> TableInfo | None:
        """The table the question's words, identifiers and values fit best; None on a tie."""
        scored = []
        words = words_in(text)
        for t in self.tables.values():
            score = 3 * len(self.table_words(t) & words)
            score += sum(2 + (2 if t.id_column in self.id_columns(t, i) else 0) for i in idents if self.id_columns(t, i))
            score += sum(1 for c in t.visible_columns() if any(matches(w, c) for w in words))
            score += len({c for c, _, _ in self.value_hits(t, text)})
            scored.append((score, bool(self.table_words(t) & words), t.name))
        scored.sort(reverse=True)
        if not scored or scored[0][0] == 0:
            return None
        if len(scored) > 1 and scored[0][:2] == scored[1][:2]:
            return None  # two tables fit equally well: do not guess
        return self.tables[scored[0][2]]

    def column_mentioned(self, t: TableInfo, kinds: Sequence[str], words: set[str]) -> ColumnInfo | None:
        """The column of one of `kinds` (not the key) that the most of `words` name."""
        best: tuple[int, ColumnInfo] | None = None
        for col in t.visible_columns():
            if col.kind in kinds and col.name != t.id_column:
                overlap = sum(1 for w in words if matches(w, col))
                if overlap and (best is None or overlap > best[0]):
                    best = (overlap, col)
        return best[1] if best else None

    def column_meant(self, link: Link, kinds: Sequence[str], words: set[str]) -> ColumnInfo | None:
        """The column of one of `kinds` (not the key) that one of `words` still unexplained
        means (retrieval/sql/meaning.py); that word is explained by it."""
        if self.meaning is None:
            return None
        t = link.table
        unexplained = words - link.consumed - FILLER - self.table_words(t)
        columns = [c for c in t.visible_columns() if c.kind in kinds and c.name != t.id_column and c.name != t.doc_column]
        meant = self.meaning.column_for(unexplained, columns)
        if meant is None:
            return None
        link.consumed.add(meant.word)
        return meant.column

    def date_column(self, t: TableInfo, text: str) -> ColumnInfo | None:
        """The date column the question's verb names: a column whose name the words match
        ("close" ~ closed_on, "decided" ~ decided_on), else a known synonym, else the first."""
        dates = [c for c in t.visible_columns() if c.kind in ("date", "timestamp")]
        words = words_in(text)
        named = [c for c in dates if any(matches(w, c) for w in words)]
        if len(named) == 1:
            return named[0]
        for verb, root in DATE_VERBS.items():
            if re.search(rf"\b{verb}\b", text):
                for c in dates:
                    if c.name.lower().startswith(root):
                        return c
        if words & RECORDING:  # "logged in March": the date a record was recorded, by its column's name
            recorded = [c for c in dates if any(matches(v, c) for v in RECORDING)]
            if recorded:
                return recorded[0]
        return dates[0] if dates else None
