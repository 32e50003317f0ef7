"""A page's date as it states it at its top, for a file that carries none.

A saved HTML page or a Markdown note often says its date only in its title or heading
("Incident report — 14 March 2025") or a dateline under it ("Date: 2025-03-14"). Where
nothing else gives the file a date (front matter, a sidecar, a folder manifest, the file's own
metadata: PDF CreationDate, DOCX created, HTML meta or `<time datetime>`), that stated day is
its date. Read conservatively, since a wrong date puts a page into the wrong period's lists:

- only the title, the first headings (Markdown `#` lines among the first TOP_LINES non-blank
  lines; an HTML or DOCX file's first sections) and a dateline among those first lines (a
  line that ends with the day, with at most MAX_DATELINE_WORDS words before it: "Date: 14
  March 2025"), each at most MAX_LINE_CHARS long: never a sentence that mentions a day;
- only a full calendar day (ISO 2025-03-14, "14 March 2025", "March 14, 2025"): never a month
  or year alone, a relative word, or a numeric form such as 03/04/2025 (which is first?);
  never a day under an operator or in a range ("due before 3 May 2025");
- the first of those lines that states a day decides (title, headings, then datelines): one
  day is the date, two different days in it are no date at all.

JSONL records and JSON write bodies are not read this way: their fields are explicit, and a
record without a date says so.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Sequence

from retrieval.dates import stated_days
from retrieval.types import Region

TOP_LINES = 3
MAX_LINE_CHARS = 120
MAX_DATELINE_WORDS = 2  # "Date: 14 March 2025", "Published 2025-03-14", "Minutes of 3 June 2025"


def stated_date(title: str | None, text: str, headings: Sequence[str] = ()) -> date | None:
    """The day the page's title, first headings or first dateline state as its date (module
    docstring), or None. `headings`: a file's headings in order (HTML and DOCX sections);
    Markdown headings are read from `text`'s `#` lines."""
    lines = _top_lines(text)
    marked = [line.lstrip("#").strip() for line in lines if line.lstrip().startswith("#")]
    candidates = [(title or "", True), *((h, True) for h in [*headings[:TOP_LINES], *marked]),
                  *((line.strip(), False) for line in lines if not line.lstrip().startswith("#"))]
    for line, heading in candidates:
        if not line or len(line) > MAX_LINE_CHARS:
            continue
        days = stated_days(line)
        if not days:
            continue
        if len(days) > 1:
            return None  # two days in one line: which is the page's?
        if heading or _dateline(line):
            return days[0]
    return None


def _dateline(line: str) -> bool:
    """A line that is a date with a short label before it, not a sentence that mentions one."""
    end = _DATE_AT_END.search(line)
    if end is None:
        return False
    words = re.findall(r"[^\W\d_]+", line[: end.start()])
    return len(words) <= MAX_DATELINE_WORDS


# the line ends with a full day (ISO, "14 March 2025", "March 14, 2025"), then at most closing punctuation
_DATE_AT_END = re.compile(r"(?:\d{4}-\d{2}-\d{2}|\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?[A-Za-z]+\.?,?\s+\d{4}"
                          r"|[A-Za-z]+\.?\s+\d{1,2}(?:st|nd|rd|th)?,?\s+\d{4})[\s.)\]]*$")


def _top_lines(text: str) -> list[str]:
    lines: list[str] = []
    for line in text[: TOP_LINES * (MAX_LINE_CHARS + 1) * 4].splitlines():
        if line.strip():
            lines.append(line)
            if len(lines) == TOP_LINES:
                break
    return lines


def headings_of(regions: Sequence[Region]) -> list[str]:
    """A file's headings in reading order, each once (its regions' section paths)."""
    return list(dict.fromkeys(name for r in regions for name in r.section))


def with_stated_date(record: dict[str, object], text: str, headings: Sequence[str] = ()) -> dict[str, object]:
    """`record` with `date` set from the page (`stated_date`) when no field gave it one."""
    if record.get("date") not in (None, ""):
        return record
    title = record.get("title")
    found = stated_date(title if isinstance(title, str) else None, text, headings)
    return record if found is None else {**record, "date": found.isoformat()}
