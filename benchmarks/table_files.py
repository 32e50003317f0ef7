"""Generated files that hold tables, with the cells each table holds: the ground truth of the
table part of benchmarks/extraction.py.

Each seed writes one file per layout: a PDF with drawn cell boxes sized to their text (ruled),
a PDF of columns set apart by whitespace (unruled), a Word table and an HTML table. A table has
a header and 3 to 12 rows of 2 to 6 columns: a label column of one to three made-up words, and
columns of whole numbers, amounts with thousands separators (negatives in parentheses, as
accounts print them), decimals, dates or short codes. Paragraphs stand before and after it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import docx
from fpdf import FPDF

LAYOUTS = ("pdf-ruled", "pdf-unruled", "docx", "html")
_SYLLABLES = ("ka", "lo", "mi", "ren", "tor", "vel", "sa", "quin", "dru", "pel", "mar", "ost", "ul", "fen", "bri")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


@dataclass(frozen=True)
class TableFile:
    path: Path
    layout: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    types: tuple[str, ...]  # what each column's cells are: int, float, date or text (indexes/extract/grids.py)


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _column(rng: random.Random, kind: str, n: int) -> list[str]:
    if kind == "count":
        return [str(rng.randint(0, 999)) for _ in range(n)]
    if kind == "amount":
        out = []
        for _ in range(n):
            value = f"{rng.randint(1_000, 9_999_999):,}"
            out.append(f"({value})" if rng.random() < 0.2 else value)
        return out
    if kind == "decimal":
        return [f"{rng.uniform(0, 500):.2f}" for _ in range(n)]
    if kind == "date":
        return [f"{rng.randint(1, 28)} {rng.choice(_MONTHS)} {rng.randint(2019, 2026)}" for _ in range(n)]
    return [f"{rng.choice('ABCDEFGH')}{rng.randint(10, 99)}" for _ in range(n)]


_TYPES = {"count": "int", "amount": "int", "decimal": "float", "date": "date", "code": "text"}


def _table(rng: random.Random) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...], tuple[str, ...]]:
    width, height = rng.randint(2, 6), rng.randint(3, 12)
    kinds = [rng.choice(("count", "amount", "decimal", "date", "code")) for _ in range(width - 1)]
    labels: list[str] = []
    while len(labels) < height:
        label = " ".join(_word(rng) for _ in range(rng.randint(1, 3)))
        if label not in labels:
            labels.append(label)
    header = ["Item", *(f"{_word(rng)} {k}" for k in kinds)]
    columns = [labels, *(_column(rng, k, height) for k in kinds)]
    return (tuple(header), tuple(tuple(col[i] for col in columns) for i in range(height)),
            ("text", *(_TYPES[k] for k in kinds)))


def _paragraph(rng: random.Random) -> str:
    return " ".join(_word(rng).lower() for _ in range(rng.randint(18, 30))).capitalize() + "."


def _pdf(path: Path, rng: random.Random, header: tuple[str, ...], rows: tuple[tuple[str, ...], ...], ruled: bool) -> None:
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    pdf.multi_cell(0, 5, _paragraph(rng))
    pdf.ln(4)
    table = (header, *rows)
    pad = 3 if ruled else 12
    widths = [max(pdf.get_string_width(r[i]) for r in table) + pad for i in range(len(header))]
    for r in table:
        for width, cell in zip(widths, r, strict=True):
            numeric = cell[:1].isdigit() or cell[:1] == "("
            pdf.cell(width, 6, cell, border=1 if ruled else 0, align="R" if numeric and r is not table[0] else "L")
        pdf.ln(6)
    pdf.ln(4)
    pdf.multi_cell(0, 5, _paragraph(rng))
    pdf.output(str(path))


def _docx(path: Path, rng: random.Random, header: tuple[str, ...], rows: tuple[tuple[str, ...], ...]) -> None:
    document = docx.Document()
    document.add_heading(_word(rng), 1)
    document.add_paragraph(_paragraph(rng))
    table = document.add_table(rows=1 + len(rows), cols=len(header))
    for row, values in zip(table.rows, (header, *rows), strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    document.add_paragraph(_paragraph(rng))
    document.save(str(path))


def _html(path: Path, rng: random.Random, header: tuple[str, ...], rows: tuple[tuple[str, ...], ...]) -> None:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    path.write_text(f"<html><body><main><h1>{_word(rng)}</h1><p>{_paragraph(rng)}</p><table><tr>{head}</tr>{body}"
                    f"</table><p>{_paragraph(rng)}</p></main></body></html>")


def write_table_files(folder: Path, seed: int) -> list[TableFile]:
    """One file per layout for `seed`, each with its own table."""
    rng = random.Random(seed)
    out = []
    for layout in LAYOUTS:
        header, rows, types = _table(rng)
        suffix = {"docx": ".docx", "html": ".html"}.get(layout, ".pdf")
        path = folder / f"table-{seed}-{layout}{suffix}"
        if layout.startswith("pdf"):
            _pdf(path, rng, header, rows, ruled=layout == "pdf-ruled")
        elif layout == "docx":
            _docx(path, rng, header, rows)
        else:
            _html(path, rng, header, rows)
        out.append(TableFile(path, layout, header, rows, types))
    return out
