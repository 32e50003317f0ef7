"""Multi-column PDF pages of several layouts, with their reading order: the column part of
benchmarks/extraction.py beside the file corpus's one two-column page.

Each layout is drawn line by line across its columns (row 1 of every column, then row 2, ...),
so the content stream's order is never the reading order; the truth reads each block of
columns column by column, top to bottom:

- `three-columns`: three equal columns;
- `sidebar`: a narrow left column (a third) beside a wide one;
- `spanning`: two columns, a full-width paragraph, then two columns again;
- `ragged`: two columns, the right one half as long.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from fpdf import FPDF

LAYOUTS = ("three-columns", "sidebar", "spanning", "ragged")
_WORDS = ("pump", "valve", "crew", "depot", "sensor", "filter", "relay", "intake", "bearing", "gasket", "inspection",
          "quarter", "throughput", "district", "engineers", "replacement", "schedule", "measurements")
LINE_MM = 5.0
TOP_MM = 25.0


@dataclass(frozen=True)
class ColumnLayout:
    layout: str
    data: bytes
    truth: str  # the page's text in reading order, paragraphs separated by blank lines
    sentences: tuple[str, ...]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(7, 13))).capitalize() + "."


def _lines(pdf: FPDF, text: str, width_mm: float) -> list[str]:
    """`text` broken into lines that fit `width_mm` at the current font."""
    out, line = [], ""
    for word in text.split():
        trial = f"{line} {word}".strip()
        if line and pdf.get_string_width(trial) > width_mm:
            out.append(line)
            line = word
        else:
            line = trial
    return [*out, line] if line else out


def _columns(pdf: FPDF, rng: random.Random, y: float, spans: list[tuple[float, float]], paragraphs: list[int],
             sentences: list[str]) -> tuple[float, list[str]]:
    """Columns at `spans` (x, width in mm), column k holding `paragraphs[k]` paragraphs of two
    sentences, drawn interleaved line by line from `y`; returns the y below them and each
    column's text."""
    texts, rows = [], []
    for (_, width), count in zip(spans, paragraphs, strict=True):
        paras = []
        for _ in range(count):
            two = [_sentence(rng), _sentence(rng)]
            sentences += two
            paras.append(" ".join(two))
        texts.append("\n\n".join(paras))
        rows.append([line for p in paras for line in (*_lines(pdf, p, width), "")])
    for r in range(max(map(len, rows))):
        for (x, _), lines in zip(spans, rows, strict=True):
            if r < len(lines) and lines[r]:
                pdf.text(x, y + LINE_MM * r, lines[r])
    return y + LINE_MM * max(map(len, rows)), texts


def write_layout(layout: str, seed: int) -> ColumnLayout:
    rng = random.Random(f"{layout}-{seed}")
    pdf = FPDF(format="A4")
    pdf.add_page()
    pdf.set_font("Helvetica", size=9)
    sentences: list[str] = []
    parts: list[str] = []
    if layout == "three-columns":
        _, texts = _columns(pdf, rng, TOP_MM, [(15, 55), (78, 55), (141, 55)], [3, 3, 3], sentences)
        parts += texts
    elif layout == "sidebar":
        _, texts = _columns(pdf, rng, TOP_MM, [(15, 50), (75, 120)], [4, 3], sentences)
        parts += texts
    elif layout == "spanning":
        y, texts = _columns(pdf, rng, TOP_MM, [(15, 85), (110, 85)], [2, 2], sentences)
        parts += texts
        middle = " ".join([_sentence(rng), _sentence(rng)])
        lines = _lines(pdf, middle, 180)
        y += LINE_MM * 1.5
        for n, line in enumerate(lines):
            pdf.text(15, y + LINE_MM * n, line)
        parts.append(middle)
        _, texts = _columns(pdf, rng, y + LINE_MM * (len(lines) + 1.5), [(15, 85), (110, 85)], [2, 2], sentences)
        parts += texts
    else:
        _, texts = _columns(pdf, rng, TOP_MM, [(15, 85), (110, 85)], [4, 2], sentences)
        parts += texts
    return ColumnLayout(layout, bytes(pdf.output()), "\n\n".join(parts), tuple(sentences))
