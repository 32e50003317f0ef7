"""Dates and date ranges named in a question, resolved against a given `today`.

Rules, not a model: ISO dates, "14 March 2025", "March 14, 2025", "March 2025", "Q3 2025",
halves ("H1 2025", "1H 2025", "second half of 2024"), "2024" (as a year, 1990-2099),
relative phrases (today, yesterday, this/last week, month, quarter, half(-year), year, "last
30 days", "the first half of the year" / "of last year"), and the operators before / after /
since / until / up to / between X and Y / from X to Y. "after X" excludes X itself; "since X"
includes it; "this ..." ends today.

A side of a range may leave out what the other side states: "between 1 January and 30 June
2025", "from March to May 2025", "between Q1 and Q3 2025", "from 3 to 17 March 2025" (a bare
day borrows the other side's month and year), "from January 2025 to March". Where the
borrowed year would run the range backwards ("from November to February 2025") the side
without one moves back (or, written second, forward) by a year -- by a month for a bare day
-- so the range runs from November 2024. A range whose sides both lack a year is not read.
A day's name before a side ("from Monday 24 November to Monday 1 December 2025") is read past.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Callable, Protocol, Sequence, TypeVar

from retrieval.errors import InvalidRequest

MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
MONTHS["sept"] = 9
_MONTH = (r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
          r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_WEEKDAY = r"(?:(?:mon|tues|wednes|thurs|fri|satur|sun)day,?\s+)"  # "Monday 24 November": the day's name, read past
_ORD = {"first": 1, "second": 2, "third": 3, "fourth": 4, "1st": 1, "2nd": 2, "3rd": 3, "4th": 4}


@dataclass(frozen=True)
class DateRange:
    """An inclusive range; None on a side means open. `text` is the phrase it came from."""

    start: date | None
    end: date | None
    text: str

    def contains(self, d: date) -> bool:
        return (self.start is None or d >= self.start) and (self.end is None or d <= self.end)

    def holds(self, first: date, last: date) -> bool:
        """Does the whole period `first`..`last` lie inside the range? "3 April 2025" and
        "Q2 2025" lie inside "2025"; "2025" does not lie inside "April 2025", it only overlaps it."""
        return self.contains(first) and self.contains(last)


def _month_range(y: int, m: int) -> tuple[date, date]:
    return date(y, m, 1), date(y, m, calendar.monthrange(y, m)[1])


def _quarter_range(y: int, q: int) -> tuple[date, date]:
    return date(y, 3 * q - 2, 1), _month_range(y, 3 * q)[1]


def _half_range(y: int, h: int) -> tuple[date, date]:
    return date(y, 6 * h - 5, 1), _month_range(y, 6 * h)[1]


_HALF = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "last": 2, "latter": 2}  # "the last half of 2025" is its second


# Each pattern yields (start, end) of a point or period; the order matters (longest first).
_POINTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?:[t ][\d:.]+z?)?\b", re.I), "iso"),
    (re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\.?,?\s+(\d{{4}})\b", re.I), "dmy"),
    (re.compile(rf"\b{_MONTH}\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I), "mdy"),
    (re.compile(rf"\b{_MONTH}\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I), "my"),
    (re.compile(r"\bq([1-4])\s*(?:of\s+)?(\d{4})\b", re.I), "qy"),
    (re.compile(r"\b(first|second|third|fourth|1st|2nd|3rd|4th)\s+quarter\s+(?:of\s+)?(\d{4})\b", re.I), "qy-word"),
    (re.compile(r"\b(?:h([12])|([12])h)\s*(?:of\s+)?(\d{4})\b", re.I), "hy"),
    (re.compile(r"\b(first|second|last|latter|1st|2nd)\s+half(?:[- ]?year)?\s+(?:of\s+)?(\d{4})\b", re.I), "hy-word"),
    (re.compile(r"\b(first|second|last|latter|1st|2nd)\s+half\s+of\s+(the|this|the\s+current|last|previous|the\s+past)\s+year\b",
                re.I), "half-of-year"),
    (re.compile(r"\b(?:last|past|previous)\s+(\d{1,3})\s+days\b", re.I), "last-n-days"),
    (re.compile(r"\b(today|yesterday)\b", re.I), "day-word"),
    (re.compile(r"\b(?:so\s+far\s+)?(this|last|previous|past)\s+(week|month|quarter|year|half(?:[- ]?year)?"
                r"(?![\w-])(?!\s*(?:an?\s+)?(?:of|hour|minute|day|mile|century|decade|dozen|point|percent|time)s?\b))", re.I),
     "relative"),
    (re.compile(r"(?<![\w-])((?:19|20)\d{2})(?![\w-])"), "year"),
]
_BETWEEN = re.compile(r"\b(?:between|from)\s+(.+?)\s+(?:and|to|until|through)\s+(.+)", re.I)
_OPERATOR = re.compile(rf"\b(before|prior to|earlier than|after|later than|since|until|till|through|up to|by)\s*"
                       rf"{_WEEKDAY}?(?:the\s+)?$", re.I)
_OPENER = re.compile(rf"\b(between|from)\s+{_WEEKDAY}?(?:the\s+)?$", re.I)  # a range's first side follows
_CONNECTOR = re.compile(rf"\s+(?:and|to|until|through|-)\s+{_WEEKDAY}?(?:the\s+)?", re.I)  # ... and its second


def _resolve(kind: str, m: re.Match[str], today: date) -> tuple[date, date] | None:
    g = m.groups()
    try:
        if kind == "iso":
            d = date(int(g[0]), int(g[1]), int(g[2]))
            return d, d
        if kind == "dmy":
            d = date(int(g[2]), MONTHS[g[1].lower()[:3]], int(g[0]))
            return d, d
        if kind == "mdy":
            d = date(int(g[2]), MONTHS[g[0].lower()[:3]], int(g[1]))
            return d, d
        if kind == "my":
            return _month_range(int(g[1]), MONTHS[g[0].lower()[:3]])
        if kind == "qy":
            return _quarter_range(int(g[1]), int(g[0]))
        if kind == "qy-word":
            return _quarter_range(int(g[1]), _ORD[g[0].lower()])
        if kind == "hy":
            return _half_range(int(g[2]), int(g[0] or g[1]))
        if kind == "hy-word":
            return _half_range(int(g[1]), _HALF[g[0].lower()])
        if kind == "half-of-year":
            back = " ".join(g[1].lower().split()) in ("last", "previous", "the past")
            return _half_range(today.year - 1 if back else today.year, _HALF[g[0].lower()])
        if kind == "last-n-days":
            return today - timedelta(days=int(g[0])), today
        if kind == "day-word":
            d = today if g[0].lower() == "today" else today - timedelta(days=1)
            return d, d
        if kind == "relative":
            which, unit = g[0].lower(), g[1].lower()
            back = which != "this"
            so_far = m.group(0).lower().startswith("so far") or which == "this"
            if unit == "week":
                start = today - timedelta(days=today.weekday()) - timedelta(weeks=1 if back else 0)
                end = start + timedelta(days=6)
            elif unit == "month":
                y, mth = (today.year, today.month - 1) if back else (today.year, today.month)
                if mth == 0:
                    y, mth = y - 1, 12
                start, end = _month_range(y, mth)
            elif unit == "quarter":
                q = (today.month - 1) // 3 + 1
                y, q = (today.year, q - 1) if back else (today.year, q)
                if q == 0:
                    y, q = y - 1, 4
                start, end = _quarter_range(y, q)
            elif unit.startswith("half"):
                h = 1 if today.month <= 6 else 2
                y, h = (today.year, h - 1) if back else (today.year, h)
                if h == 0:
                    y, h = y - 1, 2
                start, end = _half_range(y, h)
            else:
                y = today.year - 1 if back else today.year
                start, end = date(y, 1, 1), date(y, 12, 31)
            if so_far and not back:
                end = min(end, today)
            return start, end
        if kind == "year":
            y = int(g[0])
            return (date(y, 1, 1), date(y, 12, 31)) if 1990 <= y <= 2099 else None
    except (ValueError, KeyError):
        return None
    return None


_CALENDAR_DAYS = ("iso", "dmy", "mdy")  # a day of the calendar: "2025-02-30" or "30 February 2025" can be impossible


_CALENDAR_KINDS = frozenset({"iso", "dmy", "mdy", "my", "qy", "qy-word", "year"})  # written periods, not relative words


def _points(text: str, today: date, strict: bool = False, kinds: frozenset[str] | None = None
            ) -> list[tuple[int, int, date, date]]:
    """Non-overlapping date mentions: (char start, char end, first day, last day). `strict`
    refuses a calendar day that does not exist instead of reading it as no date; `kinds`
    keeps only the mentions of those pattern kinds (None: all)."""
    taken: list[tuple[int, int, date, date]] = []
    void: list[tuple[int, int]] = []  # impossible days read leniently: no date, and no month or year inside them either
    for pattern, kind in _POINTS:
        if kinds is not None and kind not in kinds:
            continue
        for m in pattern.finditer(text):
            if any(s < m.end() and m.start() < e for s, e, _, _ in taken) or any(s < m.end() and m.start() < e for s, e in void):
                continue
            span = _resolve(kind, m, today)
            if span:
                taken.append((m.start(), m.end(), *span))
            elif kind in _CALENDAR_DAYS:
                if strict:
                    raise InvalidRequest(f"{m.group(0)!r} is not a valid date")
                void.append((m.start(), m.end()))
    return sorted(taken)


# A side of a range that leaves out what the other side states: "1 January" (and 30 June
# 2025), "March" (to May 2025), "Q1", "H1", "3" (to 17 March 2025: a bare day, written first only).
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_SIDES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_WEEKDAY}?(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}\.?", re.I), "dm"),
    (re.compile(rf"{_WEEKDAY}?{_MONTH}\.?\s+(?:the\s+)?{_DAY}", re.I), "md"),
    (re.compile(rf"{_MONTH}\.?", re.I), "m"),
    (re.compile(r"q([1-4])", re.I), "q"),
    (re.compile(r"h([12])|([12])h", re.I), "h"),
    (re.compile(r"(?:the\s+)?(first|second|1st|2nd)\s+half(?:[- ]?year)?", re.I), "h-word"),
    (re.compile(rf"(?:the\s+)?{_DAY}", re.I), "d"),
]
# the words that join a range's sides: "between X and Y", "from X to Y", either with a dash
_OPENS = re.compile(r"\b(between|from)\s+", re.I)
_JOINS = {"between": rf"(?:\s+and\s+{_WEEKDAY}?(?:the\s+)?|\s*[-\u2013]\s*)",
          "from": rf"(?:\s+(?:to|until|till|through)\s+{_WEEKDAY}?(?:the\s+)?|\s*[-\u2013]\s*)"}
_JOIN = {w: re.compile(j, re.I) for w, j in _JOINS.items()}
_JOIN_END = {w: re.compile(rf"{j}\Z", re.I) for w, j in _JOINS.items()}


def _side(kind: str, m: re.Match[str], year: int, month: int) -> tuple[date, date]:
    """A range's side, given the year (and, for a bare day, the month) it leaves out."""
    g = m.groups()
    if kind == "dm":
        d = date(year, MONTHS[g[1].lower()[:3]], int(g[0]))
        return d, d
    if kind == "md":
        d = date(year, MONTHS[g[0].lower()[:3]], int(g[1]))
        return d, d
    if kind == "m":
        return _month_range(year, MONTHS[g[0].lower()[:3]])
    if kind == "q":
        return _quarter_range(year, int(g[0]))
    if kind in ("h", "h-word"):
        return _half_range(year, int(g[0] or g[1]) if kind == "h" else _HALF[g[0].lower()])
    d = date(year, month, int(g[0]))
    return d, d


def _borrowing(side: str, other: tuple[date, date], first: bool, strict: bool) -> tuple[date, date] | None:
    """The period `side` (one side of a range, as written) names, taking the year -- and for a
    bare day the month -- from `other`, the range's other side; `first` when `side` is written
    first. None when `side` is no such phrase, or `other` does not state what it lacks (a bare
    day needs a day on the other side, anything else a period within one year). A side that
    would end the range before it starts steps back a year (a month for a bare day), or
    forward where it is written second: "from November to February 2025" starts in November
    2024."""
    lo, hi = other
    for pattern, kind in _SIDES:
        m = pattern.fullmatch(side)
        if m is None:
            continue
        if kind == "d" and (not first or lo != hi):
            return None
        if lo.year != hi.year:
            return None
        try:
            start, end = _side(kind, m, lo.year, lo.month)
        except ValueError:
            if strict and kind in ("dm", "md"):  # "30 February": a day of the calendar that does not exist
                raise InvalidRequest(f"{side!r} is not a valid date") from None
            return None
        if first and start > hi or not first and end < lo:
            step = 1 if first else -1
            y, mth = (lo.year, lo.month - step) if kind == "d" else (lo.year - step, lo.month)
            y, mth = (y - 1, 12) if mth == 0 else (y + 1, 1) if mth == 13 else (y, mth)
            try:
                start, end = _side(kind, m, y, mth)
            except ValueError:
                return None
        return start, end
    return None


def _range_borrowing(text: str, points: Sequence[tuple[int, int, date, date]], i: int, done: int, strict: bool,
                 free: Callable[[int, int], bool]) -> tuple[DateRange, int] | None:
    """The range that point `i` closes or opens with a side written without the year it states
    (see `_borrowing`), and where its phrase ends; None if it is none. `done`: where the text
    already read ends; `free(start, end)`: whether a span may be read."""
    s, e, first, last = points[i]
    opens = list(_OPENS.finditer(text, max(done, s - 60), s))
    if opens:  # the side written first lacks the year: "between 1 January and 30 June 2025"
        opener = opens[-1]
        joined = _JOIN_END[opener.group(1).lower()].search(text, opener.end(), s)
        if joined and free(opener.end(), joined.start()):
            span = _borrowing(text[opener.end() : joined.start()], (first, last), True, strict)
            if span:
                return DateRange(span[0], last, text[opener.start() : e]), e
    if not opens or opens[-1].end() != s:
        return None
    opener = opens[-1]  # "between" or "from" just before the point: the side written second may lack the year,
    joined = _JOIN[opener.group(1).lower()].match(text, e)  # "from January 2025 to March"
    if joined is None:
        return None
    end = points[i + 1][0] if i + 1 < len(points) else len(text)
    for pattern, _kind in _SIDES[:-1]:  # a bare day written second ("... to the 17th") is too loose a read
        m = pattern.match(text, joined.end(), end)
        if m is None or re.match(r"[\w-]|\.?,?\s*(?:of\s+)?\d", text[m.end() :]) or not free(m.start(), m.end()):
            continue
        span = _borrowing(m.group(0), (first, last), False, strict)
        if span:
            return DateRange(first, span[1], text[opener.start() : m.end()]), m.end()
    return None


def dates_in(text: str, today: date) -> tuple[DateRange, ...]:
    """All date constraints written in a passage (see find_dates)."""
    return tuple(find_dates(text, today))


def written_periods(text: str) -> tuple[tuple[date, date], ...]:
    """The calendar periods a passage writes, each as (first day, last day): a day, month,
    quarter or year as written ("on or after 2 December 2025" writes 2 December 2025), with
    no operator applied and no relative word ("last year", "this month": relative to when the
    passage was written, which a question's today does not know)."""
    return tuple((first, last) for _, _, first, last in _points(text, date(2000, 1, 1), kinds=_CALENDAR_KINDS))


def find_dates(text: str, today: date, exclude: list[tuple[int, int]] | None = None,
               strict: bool = False) -> list[DateRange]:
    """Date constraints of `text`, each with its operator applied; spans in `exclude` are
    skipped. A question is read `strict`ly (an impossible date is the caller's mistake, never
    a question without a date); passages are not (their text is whatever was ingested)."""
    def free(a: int, b: int) -> bool:
        return not any(s < b and a < e for s, e in exclude or [])

    points = [p for p in _points(text, today, strict) if free(p[0], p[1])]
    out: list[DateRange] = []
    i, done = 0, 0  # done: where the text read so far ends
    while i < len(points):
        s, e, first, last = points[i]
        before = text[max(0, s - 40) : s]
        between = _OPENER.search(before)
        if between and i + 1 < len(points) and _CONNECTOR.fullmatch(text[e : points[i + 1][0]]):
            s2, e2, _, last2 = points[i + 1]
            out.append(DateRange(first, last2, text[s - len(before) + between.start() : e2].strip()))
            i, done = i + 2, e2
            continue
        partial = _range_borrowing(text, points, i, done, strict, free)
        if partial:
            out.append(partial[0])
            i, done = i + 1, partial[1]
            continue
        op = _OPERATOR.search(before)
        phrase = text[s:e]
        if op:
            word = " ".join(op.group(1).lower().split())
            phrase = text[s - len(before) + op.start(1) : e]  # as written, so it stays a substring of the text
            if word in ("before", "prior to", "earlier than"):
                out.append(DateRange(None, first - timedelta(days=1), phrase))
            elif word in ("after", "later than"):
                out.append(DateRange(last + timedelta(days=1), None, phrase))
            elif word == "since":
                out.append(DateRange(first, None, phrase))
            else:  # until, till, through, up to, by
                out.append(DateRange(None, last, phrase))
        else:
            out.append(DateRange(first, last, phrase))
        i, done = i + 1, e
    return out


def in_ranges(day: str | None, ranges: Sequence[DateRange]) -> bool:
    """Is an ISO date (a document's) inside every range? False for an undated document."""
    if not day or not ranges:
        return False
    d = date.fromisoformat(day[:10])
    return all(r.contains(d) for r in ranges)


class _Dated(Protocol):
    @property
    def date(self) -> str | None: ...


D = TypeVar("D", bound=_Dated)


def dated_first(hits: Sequence[D], ranges: Sequence[DateRange]) -> list[D]:
    """Passages of documents dated inside the question's ranges first, each group in its own
    order: "the July 2025 meeting" asks for July's minutes before June's, which text
    similarity cannot tell apart."""
    if not ranges:
        return list(hits)
    inside = [h for h in hits if in_ranges(h.date, ranges)]
    return inside + [h for h in hits if not in_ranges(h.date, ranges)] if inside else list(hits)


# "in March": a month named without its year, after a word that places something in time.
_BARE_MONTH = re.compile(r"\b(?:in|during|for|over|throughout)\s+(?:the\s+month\s+of\s+)?(january|february|march|april|may|"
                         r"june|july|august|september|october|november|december)\b(?!\.?,?\s+(?:of\s+)?\d)", re.I)


def bare_month(text: str, today: date) -> DateRange | None:
    """The month a phrase like "in March" names, read as the latest such month that has begun
    by `today` (March of this year in November; March of last year in February). None unless
    exactly one month is named so. Read only where the question's structure asks for it (a
    list over a period): as a general date constraint, "the tree she bought in March" would
    demand a document dated in March."""
    found = {m.group(1).lower() for m in _BARE_MONTH.finditer(text)}
    if len(found) != 1:
        return None
    (name,) = found
    month = MONTHS[name]
    year = today.year if month <= today.month else today.year - 1
    start, end = _month_range(year, month)
    m = _BARE_MONTH.search(text)
    assert m is not None
    return DateRange(start, end, m.group(0)[m.start(1) - m.start():])


_FULL_DAYS = tuple(p for p, kind in _POINTS if kind in _CALENDAR_DAYS)


def stated_days(text: str) -> tuple[date, ...]:
    """The calendar days `text` writes in full (ISO, "14 March 2025", "March 14, 2025"), in
    order, each once; a day under an operator or inside a range ("before 3 May 2025", "from 1
    to 3 March 2025") is no stated day. Months, years, quarters, relative words and numeric
    forms such as 03/04/2025 (day or month first?) are never read as one."""
    days: list[date] = []
    for r in find_dates(text, date(2000, 1, 1)):  # any day: relative words are never a stated day
        if r.start is not None and r.start == r.end and any(p.fullmatch(r.text) for p in _FULL_DAYS) \
                and r.start not in days:
            days.append(r.start)
    return tuple(days)
