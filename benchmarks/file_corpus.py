"""A folder of PDF, DOCX and HTML files with ground truth, for the extractors' tests and benchmark.

Everything is invented from `random.Random(seed)` (names, codes, numbers), so no real text is
needed and a fact has exactly one right answer: each is one sentence holding a unique code,
placed on a known PDF page or under a known heading path. Every file also carries the
boilerplate an extractor must drop: running PDF headers and footers, DOCX page headers, and
the same site nav, header, sidebar and footer on every HTML page. One PDF page is two-column
and drawn with its columns interleaved line by line, so stream order reads it wrong.

`cer` is the character error rate (edit distance over whitespace-normalised text divided by
the reference length), with Myers' bit-parallel edit distance (Myers 1999, "A fast bit-vector
algorithm for approximate string matching", in Hyyrö's 2001 formulation for global distance).
"""

from __future__ import annotations

import html
import random
import re
import zipfile
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Mapping

import docx
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from fpdf import FPDF

_SYLLABLES = ("van", "tor", "mel", "qua", "rix", "dor", "sel", "bri", "kan", "lum", "ost", "zep", "ner", "val",
              "gar", "fen", "tis", "mor", "pel", "cur")
_DEVICES = ("relay", "pump", "valve", "turbine", "sensor", "gateway", "compressor", "inverter", "boiler", "chiller")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_FACTS = (
    ("The calibration code for the {n} {d} is {c}.", "Which calibration code does the {n} {d} use?"),
    ("The {n} {d} was assigned service tag {c}.", "What service tag was given to the {n} {d}?"),
    ("Inspectors logged fault number {c} on the {n} {d}.", "Which fault number did inspectors record for the {n} {d}?"),
    ("Replacement parts for the {n} {d} ship under order {c}.", "Under which order are spare parts for the {n} {d} sent?"),
    ("The firmware build running on the {n} {d} is {c}.", "Which firmware version does the {n} {d} run?"),
    ("Site crews reset the {n} {d} with override key {c}.", "What override key do crews use to reset the {n} {d}?"),
)
_FILLER = (
    "The {n} team inspected {k} {d} units during the {m} maintenance window.",
    "Operators reported stable readings across the {n} district after the {m} upgrade.",
    "A follow-up review of the {d} inventory is scheduled for {m}.",
    "Throughput at the {n} plant rose by {k} percent compared with the previous quarter.",
    "Documentation for the {d} replacement programme remains under consolidation.",
    "Engineers at {n} recommended additional measurements before the {m} shutdown.",
)
PAGE_TOP, PAGE_BOTTOM = 32.0, 262.0  # mm: an A4 page's body, clear of the running header and footer


@dataclass(frozen=True)
class Fact:
    file: Path
    sentence: str
    question: str  # asks for the fact in other words than the sentence
    answer: str  # the unique code
    page: int | None = None  # PDF
    section: tuple[str, ...] = ()  # DOCX and HTML heading path


@dataclass(frozen=True)
class FileInfo:
    title: str
    author: str
    created: date


@dataclass(frozen=True)
class ColumnPage:
    """The two-column PDF page: its truth, and each column's sentences in reading order."""

    file: Path
    page: int
    text: str
    left: tuple[str, ...]
    right: tuple[str, ...]


@dataclass(frozen=True)
class FileCorpus:
    files: tuple[Path, ...]
    truth: Mapping[Path, str]  # body text in reading order, boilerplate excluded (for CER)
    facts: tuple[Fact, ...]
    boilerplate: Mapping[Path, tuple[str, ...]]  # strings that must not reach the extracted text
    info: Mapping[Path, FileInfo]
    columns: ColumnPage


class _Inventor:
    """Made-up names, dates and sentences; facts are collected as they are made, and no fact's
    subject or code is used twice."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.facts: list[Fact] = []
        self.used: set[str] = set()

    def name(self, parts: int = 2) -> str:
        return "".join(self.rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()

    def info(self, title: str) -> FileInfo:
        day = date(2020 + self.rng.randrange(5), self.rng.randrange(1, 13), self.rng.randrange(1, 29))
        return FileInfo(title, f"{self.name()} {self.name()}", day)

    def fact(self, file: Path, page: int | None = None, section: tuple[str, ...] = ()) -> str:
        subject = code = ""
        while not subject or subject in self.used or code in self.used:
            subject = f"{self.name()} {self.rng.choice(_DEVICES)}"
            code = "".join(self.rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(2)) + f"-{self.rng.randrange(1000, 10000)}"
        self.used |= {subject, code}
        sentence, question = self.rng.choice(_FACTS)
        n, d = subject.split(" ")
        self.facts.append(Fact(file, sentence.format(n=n, d=d, c=code), question.format(n=n, d=d), code, page, section))
        return self.facts[-1].sentence

    def filler(self) -> str:
        return self.rng.choice(_FILLER).format(n=self.name(), d=self.rng.choice(_DEVICES),
                                               k=self.rng.randrange(2, 90), m=self.rng.choice(_MONTHS))

    def paragraph(self, sentences: int, fact: str | None = None) -> str:
        parts = [self.filler() for _ in range(sentences)]
        if fact is not None:
            parts.insert(self.rng.randrange(len(parts) + 1), fact)
        return " ".join(parts)


def _pdf_lines(pdf: FPDF, text: str, width: float) -> list[str]:
    """Greedy line breaking; a long lowercase word that does not fit is hyphenated, as typeset
    reports do (the truth keeps it whole, so the extractor must rejoin it)."""
    lines, current = [], ""
    for word in text.split():
        if pdf.get_string_width(f"{current} {word}".strip()) <= width:
            current = f"{current} {word}".strip()
            continue
        heads = [word[:i] for i in range(4, len(word) - 2)] if word.isalpha() and word.islower() else []
        head = next((h for h in reversed(heads) if pdf.get_string_width(f"{current} {h}-") <= width), "")
        lines.append(f"{current} {head}-".strip() if head else current)
        current = word[len(head):]
    return [*lines, current]


def _draw(pdf: FPDF, x: float, y: float, lines: list[str], width: float = 170) -> float:
    for line in lines:
        pdf.set_xy(x, y)
        pdf.cell(width, 5, line)
        y += 5
    return y


def _write_pdf(folder: Path, inv: _Inventor, index: int, outline: bool = False
               ) -> tuple[Path, str, FileInfo, tuple[str, ...], ColumnPage | None]:
    path, org, n_pages = folder / f"report-{index}.pdf", inv.name(3), 3 + index % 2
    info = inv.info(f"{org} Field Report {inv.rng.randrange(10, 99)}")
    boilerplate = (f"{org} Works - {info.title}", f"Confidential - {org} internal use only",
                   *(f"Page {p} of {n_pages}" for p in range(1, n_pages + 1)))
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    pdf.set_title(info.title)
    pdf.set_author(info.author)
    pdf.set_creation_date(datetime.combine(info.created, datetime.min.time(), timezone.utc))
    pages, columns = [], None
    for page in range(1, n_pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", size=8)  # running header and footer, on every page
        _draw(pdf, 20, 10, [boilerplate[0]])
        _draw(pdf, 20, 284, [boilerplate[1]], 110)
        _draw(pdf, 160, 284, [boilerplate[1 + page]], 30)
        heading = f"Field results for the {inv.name()} district" if page == 1 else f"Section {page}: {inv.name()} sites"
        pdf.set_font("Helvetica", "B", 14)
        if outline:  # a bookmark where the heading is drawn: the outline, not the type, gives the section
            pdf.set_y(PAGE_TOP + 1.5)
            pdf.start_section(heading)
        _draw(pdf, 20, PAGE_TOP + 1.5, [heading])
        pdf.set_font("Helvetica", size=10)
        blocks, y = [heading], PAGE_TOP + 12
        if index == 0 and page == 2:
            columns = _two_columns(pdf, inv, path, y, blocks, heading)
        else:  # the page's bold heading is its section (the file has no outline: indexes/extract/pdf_text.py)
            blocks += [inv.paragraph(2, inv.fact(path, page=page, section=(heading,)) if k in (0, 2) else None)
                       for k in range(8)]
            for text in blocks[1:]:
                y = _draw(pdf, 20, y, _pdf_lines(pdf, text, 168)) + 4
            assert y <= PAGE_BOTTOM, "eight paragraphs of three sentences fit a page"
        pages.append("\n\n".join(blocks))
    pdf.output(str(path))
    return path, "\n\n".join(pages), info, boilerplate, columns


def _two_columns(pdf: FPDF, inv: _Inventor, path: Path, y: float, blocks: list[str], heading: str) -> ColumnPage:
    """Two columns drawn interleaved (left line 1, right line 1, left line 2, ...), then a
    full-width closing paragraph: the content stream's order is not the reading order."""
    sides = [[inv.paragraph(2, inv.fact(path, page=2, section=(heading,))) for _ in range(3)] for _ in range(2)]
    rows = [[line for text in side for line in (*_pdf_lines(pdf, text, 78), "")] for side in sides]
    for r in range(max(map(len, rows))):
        for side, x in ((0, 20.0), (1, 110.0)):
            if r < len(rows[side]) and rows[side][r]:
                _draw(pdf, x, y + 5 * r, [rows[side][r]], 80)
    closing = inv.paragraph(3)
    _draw(pdf, 20, y + 5 * max(map(len, rows)) + 4, _pdf_lines(pdf, closing, 168))
    blocks += [*sides[0], *sides[1], closing]
    left, right = (tuple(s + "." for t in side for s in t.rstrip(".").split(". ")) for side in sides)
    return ColumnPage(path, 2, "\n\n".join(blocks), left, right)


def _write_docx(folder: Path, inv: _Inventor, index: int) -> tuple[Path, str, FileInfo, tuple[str, ...]]:
    path, document = folder / f"handbook-{index}.docx", docx.Document()
    info = inv.info(f"{inv.name(3)} Operations Handbook")
    props = document.core_properties
    props.title, props.author = info.title, info.author
    props.created = datetime.combine(info.created, datetime.min.time(), timezone.utc)
    props.modified = props.created + timedelta(days=inv.rng.randrange(1, 300))
    boilerplate = (f"{info.title} - internal draft", f"Printed copies of {inv.name()} documents are uncontrolled")
    section = document.sections[0]
    section.header.paragraphs[0].text, section.footer.paragraphs[0].text = boilerplate
    # A renamed heading style that only its outline level marks as level 2 (localized templates).
    renamed = document.styles.add_style("Kapitel Zwei", WD_STYLE_TYPE.PARAGRAPH)
    level = OxmlElement("w:outlineLvl")
    level.set(qn("w:val"), "1")
    renamed.element.get_or_add_pPr().append(level)
    intro = inv.paragraph(2)
    document.add_paragraph(info.title, style="Title")
    document.add_paragraph(intro)
    blocks = [info.title, intro]
    for chapter in (1, 2):
        h1 = f"{chapter}. {inv.name()} procedures"
        document.add_heading(h1, level=1)
        blocks.append(h1)
        for part in (1, 2):
            h2 = f"{chapter}.{part} {inv.name()} checks"
            document.add_paragraph(h2, style=renamed if index == 1 and part == 2 else "Heading 2")
            texts = [inv.paragraph(2, inv.fact(path, section=(info.title, h1, h2)) if k == part else None) for k in (1, 2)]
            for text in texts:
                document.add_paragraph(text)
            blocks += [h2, *texts]
        if chapter == 1:
            rows = [("Unit", "Count", "Status"), *((f"{inv.name()} {inv.rng.choice(_DEVICES)}",
                                                    str(inv.rng.randrange(1, 50)), "ok") for _ in range(3))]
            table = document.add_table(rows=len(rows), cols=3)
            for cells, row in zip(table.rows, rows, strict=True):
                for cell, value in zip(cells.cells, row, strict=True):
                    cell.text = value
            blocks.append("\n".join(" | ".join(f"{h}: {c}" for h, c in zip(rows[0], row, strict=True)) for row in rows[1:]))
    document.save(str(path))
    return path, "\n\n".join(blocks), info, boilerplate


def _site_chrome(inv: _Inventor) -> tuple[str, str, tuple[str, ...]]:
    """The site's nav, header, sidebar, cookie banner and footer (the same on every page)."""
    site = f"{inv.name(3)} Works"
    links = [f"{site} {word}" for word in ("home", "products", "careers", "contact")]
    sidebar = [f"Popular: {inv.name()} {inv.rng.choice(_DEVICES)} guide" for _ in range(3)]
    tagline, copyright_ = f"Engineering news from {site}", f"Copyright 2024 {site}. All rights reserved."
    cookie = f"{site} uses cookies to improve this site."
    top = (f'<a class="skip-link" href="#main">Skip to content</a><div id="cookie-banner">{cookie}</div>'
           f'<header class="site-header"><div class="brand">{site}</div><p>{tagline}</p></header><nav><ul>'
           + "".join(f'<li><a href="/{i}">{t}</a></li>' for i, t in enumerate(links)) + "</ul></nav>")
    bottom = ('<div class="sidebar"><ul>' + "".join(f'<li><a href="/s{i}">{t}</a></li>' for i, t in enumerate(sidebar))
              + f"</ul></div><footer><p>{copyright_}</p></footer>")
    return top, bottom, (*links, *sidebar, tagline, copyright_, cookie)


def _write_html(folder: Path, inv: _Inventor, index: int, chrome: tuple[str, str, tuple[str, ...]]
                ) -> tuple[Path, str, FileInfo]:
    path = folder / f"article-{index}.html"
    info = inv.info(f"How {inv.name()} keeps its {inv.rng.choice(_DEVICES)}s running")
    shown = f"{_MONTHS[info.created.month - 1]} {info.created.day}, {info.created.year}"
    title = html.escape(info.title)
    # In an article, <header> is the article's own (it holds the title); outside, the page banner.
    body = [f'<header><h1>{title}</h1><time datetime="{info.created.isoformat()}">{shown}</time></header>'
            if index % 3 != 2 else f"<h1>{title}</h1><p>{shown}</p>"]
    intro = inv.paragraph(2)
    first, rest = intro.split(" ", 1)
    body.append(f'<p><a href="/about">{first}</a>\n   {rest}</p>')  # a link in running text; source breaks collapse
    blocks = [info.title, shown, intro]
    for _chapter in range(2):
        h2 = f"{inv.name()} operations"
        body.append(f"<section><h2>{h2}</h2>")
        blocks.append(h2)
        for _part in range(2):
            h3 = f"{inv.name()} {inv.rng.choice(_DEVICES)} notes"
            first, rest = inv.paragraph(1, inv.fact(path, section=(info.title, h2, h3))).split(" ", 1)
            body.append(f"<h3>{h3}</h3><p><b>{first}</b>&nbsp;{rest}</p>")
            blocks += [h3, f"{first} {rest}"]
        items, note = [inv.filler() for _ in range(2)], inv.filler()
        body.append("<ul>" + "".join(f"<li>{i}</li>" for i in items) + f"</ul><div>{note}</div>"
                    '<div class="share-buttons"><a href="/x">Share this page</a></div></section>')
        blocks += [*items, note]
    rows = [("Unit", "Reading"), (f"{inv.name()} {inv.rng.choice(_DEVICES)}", str(inv.rng.randrange(10, 99)))]
    body.append("<table>" + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows) + "</table>"
                '<div class="related-posts"><h4>Related</h4><ul>' + "".join(f'<li><a href="/r{i}">{inv.name()} guide</a></li>'
                                                                            for i in range(3)) + "</ul></div>"
                '<p><a href="/prev">Previous article</a> | <a href="/next">Next article</a></p>')
    blocks += [" | ".join(f"{h}: {c}" for h, c in zip(rows[0], r, strict=True)) for r in rows[1:]]  # a row with its headers
    article = "<article>" + "".join(body) + "</article>"
    wrapped = (f"<main>{article}</main>", article, f'<div class="content">{"".join(body)}</div>')[index % 3]
    path.write_text(
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f'<meta name="author" content="{info.author}"><meta name="description" content="{inv.filler()}">'
        f'<meta property="article:published_time" content="{info.created.isoformat()}T09:30:00Z">'
        f'<link rel="canonical" href="https://example.org/articles/{index}"><style>p {{ color: #333 }}</style>'
        f"<script>var tracking = 'do not index';</script></head><body>{chrome[0]}{wrapped}{chrome[1]}</body></html>",
        encoding="utf-8")
    return path, "\n\n".join(blocks), info


def write_file_corpus(folder: Path, seed: int = 0, n_docs: int = 3, pdf_outline: bool = False) -> FileCorpus:
    """Write `n_docs` PDFs, DOCX files and HTML pages into `folder` and return their truth;
    `pdf_outline` gives each PDF an outline entry per page heading (the same files otherwise)."""
    assert n_docs >= 1, "the two-column page is in the first PDF"
    folder.mkdir(parents=True, exist_ok=True)
    inv = _Inventor(random.Random(seed))
    chrome = _site_chrome(inv)
    truth: dict[Path, str] = {}
    info: dict[Path, FileInfo] = {}
    boilerplate: dict[Path, tuple[str, ...]] = {}
    columns = None
    for index in range(n_docs):
        path, truth_, info_, boilerplate_, two = _write_pdf(folder, inv, index, pdf_outline)
        truth[path], info[path], boilerplate[path], columns = truth_, info_, boilerplate_, columns or two
        path, truth[path], info[path], boilerplate[path] = _write_docx(folder, inv, index)
        path, truth[path], info[path] = _write_html(folder, inv, index, chrome)
        boilerplate[path] = chrome[2]
    assert columns is not None
    return FileCorpus(tuple(truth), truth, tuple(inv.facts), boilerplate, info, columns)


def _md_heading(inv: _Inventor, level: int, name: str, style: int) -> tuple[str, str]:
    """(the Markdown of a heading, its name as read): ATX with or without a closing run, setext
    for levels 1 and 2, emphasis, inline code or a link around part of the name."""
    word, rest = name.split(" ", 1)
    shown = (name, f"**{word}** {rest}", f"`{word}` {rest}", f"[{word}](https://example.org/{word.lower()}) {rest}")[style % 4]
    if level <= 2 and style % 3 == 1 and not shown[0].isdigit():  # "2. Name" over a rule is a list item and a rule
        return f"{shown}\n{('=' if level == 1 else '-') * max(3, len(shown) // 2)}", name
    closing = f" {'#' * level}" if style % 2 else ""
    return f"{'#' * level} {shown}{closing}", name


def write_markdown_notes(folder: Path, seed: int = 0, n_notes: int = 3) -> tuple[tuple[Path, ...], tuple[Fact, ...]]:
    """Markdown notes as a team's wiki has them, each fact under a known heading path: front
    matter, text before the first heading, ATX and setext headings, closing `#`s, marks in
    heading names, a level skipped, a fenced shell sample whose `# comments` are no headings,
    and a `---` rule. Returns the files and their facts."""
    folder.mkdir(parents=True, exist_ok=True)
    inv = _Inventor(random.Random(10_000 + seed))
    files: list[Path] = []
    for index in range(n_notes):
        path = folder / f"note-{index}.md"
        title = f"{inv.name(3)} {inv.rng.choice(_DEVICES)} runbook"
        parts = [f"---\nauthor: {inv.name()}\n---", inv.paragraph(1)]  # text before any heading has no section
        top, shown_top = _md_heading(inv, 1, title, index)
        parts.append(top)
        parts.append(inv.paragraph(2, inv.fact(path, section=(shown_top,))))
        for chapter in range(2):
            h2_name = f"{chapter + 1}. {inv.name()} {inv.rng.choice(('checks', 'procedures', 'settings'))}"
            h2, h2_name = _md_heading(inv, 2, h2_name, index + chapter)
            parts += [h2, inv.paragraph(1)]
            if chapter == 0:
                parts.append("```sh\n# stop the unit first\nsystemctl stop unit\n## then drain it\n```")
            for part in range(2):
                deep = 4 if part == 0 and index % 2 else 3  # a level skipped: #### straight under ##
                h3_name = f"{inv.name()} {inv.rng.choice(_DEVICES)} notes"
                h3, h3_name = _md_heading(inv, deep, h3_name, index + part + 1)
                parts += [h3, inv.paragraph(2, inv.fact(path, section=(shown_top, h2_name, h3_name)))]
            if chapter == 0:
                parts += ["---", inv.paragraph(1)]  # a rule under a paragraph's blank line: no heading
        path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
        files.append(path)
    return tuple(files), tuple(f for f in inv.facts if f.file in files)


def without_heading_styles(path: Path) -> Path:
    """A copy of a Word file whose styles part defines no Title or HeadingN style (some writers
    leave them out): its headings are then known by their style ids alone."""
    out = path.with_name(path.stem + "-bare" + path.suffix)
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "word/styles.xml":
                text = data.decode("utf-8")
                text = re.sub(r'<w:style [^>]*w:styleId="(?:Title|Heading[1-9])"[^>]*>.*?</w:style>', "", text, flags=re.S)
                data = text.encode("utf-8")
            dst.writestr(item, data)
    return out


def write_bad_files(folder: Path) -> dict[str, str]:
    """Files that give no document, named by what they are: {filename: expected BadReason}."""
    folder.mkdir(parents=True, exist_ok=True)
    pdfs = {name: FPDF() for name in ("encrypted.pdf", "corrupt.pdf", "scan.pdf")}
    for name, pdf in pdfs.items():
        pdf.add_page()
        pdf.set_font("Helvetica", size=12)
        if name == "scan.pdf":
            pdf.set_fill_color(120, 120, 120)
            for row in range(12):
                pdf.rect(20, 20 + row * 20, 170, 8, style="F")  # drawn "lines of text": shapes, no text layer
        else:
            pdf.cell(100, 10, "Only readers with the password see this line.")
    pdfs["encrypted.pdf"].set_encryption(owner_password="owner-secret", user_password="reader-secret")
    for name in ("encrypted.pdf", "scan.pdf"):
        pdfs[name].output(str(folder / name))
    data = bytes(pdfs["corrupt.pdf"].output())
    (folder / "corrupt.pdf").write_bytes(data[:9] + bytes(b ^ 0x5A for b in data[9:len(data) // 2]))  # header kept
    (folder / "plain-text.docx").write_bytes(b"This was saved as text with a .docx name.\n")
    with zipfile.ZipFile(folder / "not-word.docx", "w") as archive:
        archive.writestr("notes.txt", "a zip archive, but not a Word document")
    (folder / "encrypted.docx").write_bytes(bytes.fromhex("D0CF11E0A1B11AE1") + bytes(504))
    docx.Document().save(str(folder / "empty.docx"))
    (folder / "nav-only.html").write_text(
        '<html><head><title>Site map</title></head><body><nav><a href="/">Home</a> <a href="/a">About</a></nav>'
        "<footer>Copyright 2024 Example Works</footer></body></html>", encoding="utf-8")
    return {"encrypted.pdf": "encrypted", "corrupt.pdf": "corrupt", "scan.pdf": "no_text",
            "plain-text.docx": "not_docx", "not-word.docx": "corrupt", "encrypted.docx": "encrypted",
            "empty.docx": "no_text", "nav-only.html": "no_body_text"}


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance in O(len(a) * len(b) / word size): each column of the DP table is
    a pair of bit vectors (vertical +1 / -1 deltas) held in one Python int (Hyyrö 2001)."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return len(a)
    peq: dict[str, int] = {}
    for i, char in enumerate(b):
        peq[char] = peq.get(char, 0) | (1 << i)
    full, top = (1 << len(b)) - 1, 1 << (len(b) - 1)
    pv, mv, score = full, 0, len(b)
    for char in a:
        eq = peq.get(char, 0)
        xv = eq | mv
        xh = ((((eq & pv) + pv) & full) ^ pv) | eq
        ph = (mv | ~(xh | pv)) & full
        mh = pv & xh
        score += 1 if ph & top else -1 if mh & top else 0
        ph = ((ph << 1) | 1) & full
        mh = (mh << 1) & full
        pv = (mh | ~(xv | ph)) & full
        mv = ph & xv
    return score


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate: edit distance over whitespace-normalised text / reference length."""
    ref, hyp = " ".join(reference.split()), " ".join(hypothesis.split())
    return edit_distance(ref, hyp) / max(1, len(ref))
