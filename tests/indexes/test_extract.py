"""The PDF, DOCX and HTML extractors on real generated files (benchmarks/file_corpus.py): facts
land in the region of their page or heading path, text is close to the ground truth, a
two-column page reads column by column, boilerplate and running headers are dropped, bad
files raise BadFile with their reason, and no input makes an extractor raise anything else."""

from __future__ import annotations

import io
import random
import re
import zipfile
from pathlib import Path
from typing import Callable

import docx
import pypdfium2 as pdfium  # type: ignore[import-untyped]
import pytest
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from fpdf import FPDF
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.file_corpus import FileCorpus, cer, edit_distance, write_bad_files, write_file_corpus
from indexes.corpus import MAX_TEXT_CHARS
from indexes.extract.docx_text import extract_docx
from indexes.extract.zip_bounds import MAX_UNZIPPED_BYTES
from indexes.extract.html_text import decode_html, extract_html
from indexes.extract.pdf_text import extract_pdf
from indexes.extract.record import BadFile, Extracted

EXTRACTORS: dict[str, Callable[[bytes], Extracted]] = {".pdf": extract_pdf, ".docx": extract_docx,
                                                       ".html": extract_html}
# Measured CER is 0.000 for every format on this corpus (seeds 0-4). The bound leaves room for
# a different PDFium build's glyph boxes while staying far below what a real reading error
# costs: one misplaced or lost 90-character line in a 6,000-character report is 0.015, and
# stream order on the two-column page is 0.51 to 0.58.
MAX_CER = 0.01


def normal(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> FileCorpus:
    return write_file_corpus(tmp_path_factory.mktemp("files"), seed=0, n_docs=3)


@pytest.fixture(scope="module")
def extracted(corpus: FileCorpus) -> dict[Path, Extracted]:
    return {path: EXTRACTORS[path.suffix](path.read_bytes()) for path in corpus.files}


def region_texts(doc: Extracted, page: int | None, section: tuple[str, ...]) -> list[str]:
    return [normal(doc.text[r.start:r.end]) for r in doc.regions
            if (page is not None and r.page == page) or (page is None and r.section == section)]


def test_every_fact_sits_in_the_region_of_its_page_or_heading_path(corpus, extracted):
    for fact in corpus.facts:
        texts = region_texts(extracted[fact.file], fact.page, fact.section)
        assert texts, f"{fact.file.name}: no region for page {fact.page} / section {fact.section}"
        assert any(fact.sentence in text for text in texts), f"{fact.file.name}: {fact.sentence!r} not in its region"
        assert fact.answer in fact.sentence and fact.answer not in fact.question


@pytest.mark.parametrize("suffix", [".pdf", ".docx", ".html"])
def test_extracted_text_is_close_to_the_ground_truth(corpus, extracted, suffix):
    files = [path for path in corpus.files if path.suffix == suffix]
    rates = {path.name: cer(corpus.truth[path], extracted[path].text) for path in files}
    assert max(rates.values()) < MAX_CER, rates


def test_two_column_page_reads_the_left_column_then_the_right(corpus, extracted):
    page = corpus.columns
    (text,) = region_texts(extracted[page.file], page.page, ())
    where = [text.find(sentence) for sentence in (*page.left, *page.right)]
    assert -1 not in where, "a sentence of the two-column page is split or missing"
    assert where == sorted(where), "the left column's sentences come first, each column top to bottom"
    assert cer(page.text, text) < MAX_CER


def test_stream_order_reads_the_two_column_page_wrong(corpus, extracted):
    page = corpus.columns
    pdf = pdfium.PdfDocument(page.file.read_bytes())
    try:
        pdf_page = pdf[page.page - 1]
        textpage = pdf_page.get_textpage()
        naive = textpage.get_text_range()
        textpage.close()
        pdf_page.close()
    finally:
        pdf.close()
    for line in corpus.boilerplate[page.file]:
        naive = naive.replace(line, "")  # judge the body only: the layout rule drops these too
    (layout,) = region_texts(extracted[page.file], page.page, ())
    assert cer(page.text, naive) > 0.3  # measured 0.51 to 0.58 over seeds 0-4, against 0.000 with the layout rule
    assert cer(page.text, layout) < MAX_CER


def test_no_boilerplate_reaches_the_extracted_text(corpus, extracted):
    for path in corpus.files:
        text = normal(extracted[path].text)
        leaked = [line for line in corpus.boilerplate[path] if normal(line) in text]
        assert not leaked, f"{path.name}: {leaked}"


def test_title_author_and_date_are_read_from_each_file(corpus, extracted):
    for path in corpus.files:
        info, doc = corpus.info[path], extracted[path]
        assert (doc.title, doc.date, doc.metadata.get("author")) == (info.title, info.created, info.author), path.name


def test_pdf_page_count_and_html_page_metadata_are_read(corpus, extracted):
    assert all(extracted[p].pages in (3, 4) for p in corpus.files if p.suffix == ".pdf")
    html = extracted[next(p for p in corpus.files if p.suffix == ".html")]
    assert html.metadata["language"] == "en" and html.metadata["url"].startswith("https://example.org/")
    assert html.metadata["description"]


def test_regions_are_ordered_disjoint_inside_the_text_and_cover_every_character(extracted):
    for path, doc in extracted.items():
        covered: set[int] = set()
        for before, region in zip((None, *doc.regions), doc.regions, strict=False):
            assert 0 <= region.start < region.end <= len(doc.text), path.name
            assert before is None or before.end <= region.start, path.name
            covered.update(range(region.start, region.end))
        blank = {i for i, char in enumerate(doc.text) if char.isspace()}
        assert set(range(len(doc.text))) - blank <= covered, path.name


def test_every_bad_file_raises_badfile_with_its_reason_and_a_message(tmp_path):
    expected = write_bad_files(tmp_path)
    for name, reason in expected.items():
        with pytest.raises(BadFile) as caught:
            EXTRACTORS[Path(name).suffix]((tmp_path / name).read_bytes())
        assert (caught.value.reason, bool(caught.value.message.strip())) == (reason, True), name
    assert "OCR" in _reason_of(extract_pdf, (tmp_path / "scan.pdf").read_bytes()).message


def _reason_of(extract: Callable[[bytes], Extracted], data: bytes) -> BadFile:
    with pytest.raises(BadFile) as caught:
        extract(data)
    return caught.value


@settings(max_examples=25)
@given(st.binary(max_size=3000), st.sampled_from([b"", b"%PDF-1.7\n", b"PK\x03\x04", b"<html><body>"]))
def test_extractors_raise_nothing_but_badfile_on_garbage(garbage, prefix):
    for extract in EXTRACTORS.values():
        try:
            assert isinstance(extract(prefix + garbage), Extracted)
        except BadFile as bad:
            assert bad.message


def test_extractors_raise_nothing_but_badfile_on_damaged_real_files(corpus):
    rng = random.Random(7)
    for path in corpus.files[:6]:
        data = bytearray(path.read_bytes())
        for _ in range(4):
            damaged = bytearray(data)
            for _ in range(20):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            for cut in (len(damaged), rng.randrange(len(damaged))):
                try:
                    EXTRACTORS[path.suffix](bytes(damaged[:cut]))
                except BadFile as bad:
                    assert bad.message


def _pdf(pages: list[list[tuple[float, str]]], header: str | None = None) -> bytes:
    """A Helvetica PDF: per page, (y in mm, text) lines at x = 20 mm, and an optional header."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    for lines in pages:
        pdf.add_page()
        if header:
            pdf.set_xy(20, 10)
            pdf.cell(170, 5, header)
        for y, text in lines:
            pdf.set_xy(20, y)
            pdf.cell(170, 5, text)
    return bytes(pdf.output())


def test_a_hyphenated_word_is_rejoined_only_when_both_halves_are_lowercase():
    lines = ["the crew finished the mainte-", "nance of the pumps", "then the Anti-", "Aircraft unit got code QX-",
             "4821 and a well-", "Known label"]
    text = extract_pdf(_pdf([[(40.0 + 5 * i, line) for i, line in enumerate(lines)]])).text
    assert "maintenance of" in text
    assert "Anti-\nAircraft" in text and "QX-\n4821" in text and "well-\nKnown" in text


def test_a_running_header_is_dropped_on_three_pages_but_kept_on_two():
    pages = [[(40.0, f"Body text of page {n} about pumps.")] for n in range(3)]
    assert "Quarterly pump review" not in extract_pdf(_pdf(pages, "Quarterly pump review 2024")).text
    assert extract_pdf(_pdf(pages[:2], "Quarterly pump review 2024")).text.count("Quarterly pump review") == 2


def test_docx_headings_known_by_outline_level_and_the_title_paragraph_fallback():
    document = docx.Document()
    document.core_properties.title = ""
    document.sections[0].header.paragraphs[0].text = "Company letterhead"
    style = document.styles.add_style("Kapitel", WD_STYLE_TYPE.PARAGRAPH)
    level = OxmlElement("w:outlineLvl")
    level.set(qn("w:val"), "0")
    style.element.get_or_add_pPr().append(level)
    document.add_paragraph("Pump manual", style="Title")
    document.add_paragraph("Einleitung", style=style)
    document.add_paragraph("Intro text.")
    document.add_heading("Details", level=2)
    document.add_paragraph("Detail text.")
    document.add_paragraph("Wartung", style=style)
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "Valve", "ok"
    buffer = io.BytesIO()
    document.save(buffer)
    doc = extract_docx(buffer.getvalue())
    assert doc.title == "Pump manual" and "letterhead" not in doc.text
    assert [r.section for r in doc.regions] == [("Pump manual",), ("Pump manual", "Einleitung"),
                                                 ("Pump manual", "Einleitung", "Details"), ("Pump manual", "Wartung")]
    assert doc.text.endswith("Wartung\n\nValve | ok")


def test_docx_that_inflates_past_the_limit_is_refused_before_it_is_read():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("word/document.xml", "w", force_zip64=True) as entry:
            block = bytes(1 << 22)
            for _ in range(MAX_UNZIPPED_BYTES // len(block) + 1):
                entry.write(block)
    assert _reason_of(extract_docx, buffer.getvalue()).reason == "too_large"


def test_html_text_over_the_limit_is_too_large():
    page = b"<html><body><p>" + b"pump " * (MAX_TEXT_CHARS // 5 + 10) + b"</p></body></html>"
    assert _reason_of(extract_html, page).reason == "too_large"


def test_html_is_decoded_by_bom_then_declared_charset_then_utf8_then_cp1252():
    assert decode_html("\ufeff<p>café</p>".encode("utf-8")) == "<p>café</p>"
    assert decode_html('<meta charset="windows-1252"><p>café</p>'.encode("cp1252")).endswith("café</p>")
    declared = '<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1"><p>€</p>'.encode("cp1252")
    assert decode_html(declared).endswith("€</p>")  # WHATWG: latin-1 labels mean windows-1252
    assert decode_html('<meta charset="utf-16"><p>café</p>'.encode("utf-8")).endswith("café</p>")
    assert decode_html("<p>café</p>".encode("cp1252")) == "<p>café</p>"
    assert decode_html(b"<p>\x81\x8d</p>").startswith("<p>")  # bytes cp1252 leaves undefined still decode


def test_html_keeps_pre_whitespace_and_drops_hidden_elements_and_link_lists():
    page = ("<html><head><meta property='og:title' content='Pump log'></head><body><div class='page has-sidebar'>"
            "<h1>Log</h1><pre>a  b\n  c</pre><p hidden>secret</p><p aria-hidden='true'>icon</p>"
            "<ul><li><a href='/1'>One link</a></li></ul><p>Body <a href='/x'>with</a> a link<br>inside.</p>"
            "<div role='navigation'>Jump</div><footer>Copyright</footer></div></body></html>")
    doc = extract_html(page.encode())
    assert doc.text == "Log\n\na  b\n  c\n\nBody with a link inside."
    assert doc.title == "Pump log"


def test_edit_distance_matches_the_textbook_dynamic_programme():
    def textbook(a: str, b: str) -> int:
        row = list(range(len(b) + 1))
        for i, x in enumerate(a, 1):
            previous, row[0] = row[0], i
            for j, y in enumerate(b, 1):
                previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
        return row[-1]

    rng = random.Random(3)
    for _ in range(300):
        a, b = ("".join(rng.choice("abc ") for _ in range(rng.randrange(40))) for _ in range(2))
        assert edit_distance(a, b) == textbook(a, b), (a, b)
    assert cer("the  pump\nruns", "the pump runs") == 0.0 and cer("abcd", "abxd") == 0.25


def test_fact_questions_and_answers_are_unique(corpus):
    answers = [fact.answer for fact in corpus.facts]
    assert len(answers) == len(set(answers)) and all(re.fullmatch(r"[A-Z]{2}-\d{4}", a) for a in answers)


def test_html_wrappers_named_like_boilerplate_keep_the_page_they_hold():
    page = (b"<html><body class='has-sidebar'><form id='aspnetForm'><div class='page-with-menu'><h1>Pumps</h1>"
            b"<p>The page body sits inside one form, as ASP.NET pages do.</p></div></form></body></html>")
    assert extract_html(page).text == "Pumps\n\nThe page body sits inside one form, as ASP.NET pages do."


def test_a_page_nested_past_any_real_one_is_refused_before_it_is_parsed():
    from indexes.extract.html_text import MAX_DEPTH, nesting_bound

    n = MAX_DEPTH + 10
    deep = ("<html><body>" + "<div>" * n + "text" + "</div>" * n + "<p>Body.</p></body></html>").encode()
    with pytest.raises(BadFile) as err:
        extract_html(deep)
    assert err.value.reason == "too_large" and "nested" in err.value.message
    sloppy = "<html><body>" + "<p>para<li>item<td>cell<br>" * 5000 + "</body></html>"
    assert nesting_bound(sloppy)[0] < 5  # elements a parser closes by itself are not depth
    assert extract_html(sloppy.encode()).text


def _rewritten(data: bytes, change: Callable[[str, bytes], bytes | None]) -> bytes:
    """The .docx with each part passed through `change` (None drops the part)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = change(info.filename, src.read(info))
            if body is not None:
                dst.writestr(info.filename, body)
    return out.getvalue()


def _manual() -> bytes:
    document = docx.Document()
    document.add_heading("Pump manual", level=0)
    document.add_heading("Seals", level=1)
    document.add_paragraph("Replace the seal every 2,000 hours.")
    document.add_heading("Checks", level=2)
    document.add_paragraph("Look for weeping at the gland.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def test_a_docx_without_core_properties_gets_no_made_up_title_or_date():
    def drop_core(name: str, body: bytes) -> bytes | None:
        if name == "docProps/core.xml":
            return None
        if name == "_rels/.rels":
            return re.sub(rb"<Relationship [^>]*core-properties[^>]*/>", b"", body)
        return body

    doc = extract_docx(_rewritten(_manual(), drop_core))
    assert doc.title == "Pump manual"  # the Title paragraph, not python-docx's "Word Document"
    assert doc.date is None and "modified" not in doc.metadata and "author" not in doc.metadata


def test_docx_headings_come_from_style_ids_the_styles_part_leaves_out():
    def drop_heading_styles(name: str, body: bytes) -> bytes:
        if name != "word/styles.xml":
            return body
        return re.sub(rb'<w:style [^>]*w:styleId="(?:Heading\d|Title)".*?</w:style>', b"", body, flags=re.DOTALL)

    stripped = _rewritten(_manual(), drop_heading_styles)
    assert b'w:styleId="Heading1"' not in zipfile.ZipFile(io.BytesIO(stripped)).read("word/styles.xml")
    doc = extract_docx(stripped)
    assert [r.section for r in doc.regions] == [("Pump manual",), ("Pump manual", "Seals"),
                                                 ("Pump manual", "Seals", "Checks")]


def test_pdf_passages_take_their_section_from_the_outline_cut_where_each_heading_starts():
    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    pdf.add_page()
    pdf.start_section("1 Scope", level=0)
    pdf.cell(0, 8, "1 Scope", new_x="LMARGIN", new_y="NEXT")
    pdf.cell(0, 8, "This manual covers the feed pumps.", new_x="LMARGIN", new_y="NEXT")
    pdf.start_section("1.1 Seals", level=1)
    pdf.cell(0, 8, "1.1 Seals", new_x="LMARGIN", new_y="NEXT")
    pdf.cell(0, 8, "Replace the gland seal every 2,000 hours.", new_x="LMARGIN", new_y="NEXT")
    pdf.add_page()
    pdf.cell(0, 8, "Record the seal change in the log.", new_x="LMARGIN", new_y="NEXT")
    pdf.start_section("2 Checks", level=0)
    pdf.cell(0, 8, "2 Checks", new_x="LMARGIN", new_y="NEXT")
    pdf.cell(0, 8, "Look for weeping at the gland every week.", new_x="LMARGIN", new_y="NEXT")
    doc = extract_pdf(bytes(pdf.output()))
    placed = [(r.page, r.section, doc.text[r.start:r.end].splitlines()[-1]) for r in doc.regions]
    assert placed == [(1, ("1 Scope",), "This manual covers the feed pumps."),
                      (1, ("1 Scope", "1.1 Seals"), "Replace the gland seal every 2,000 hours."),
                      (2, ("1 Scope", "1.1 Seals"), "Record the seal change in the log."),
                      (2, ("2 Checks",), "Look for weeping at the gland every week.")]


def test_a_pdf_without_an_outline_keeps_page_regions_without_sections():
    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    for n in range(2):
        pdf.add_page()
        pdf.cell(0, 8, f"Page {n + 1} text about pumps.", new_x="LMARGIN", new_y="NEXT")
    doc = extract_pdf(bytes(pdf.output()))
    assert [(r.page, r.section) for r in doc.regions] == [(1, ()), (2, ())]


@pytest.mark.parametrize("style", ["numbered-bold", "sized", "numbered-sized"])
def test_a_pdf_without_an_outline_takes_its_sections_from_its_heading_lines(style):
    """Three heading styles no outline describes: numbered bold headings at the body's size,
    unnumbered ones set larger (their level by size), numbered ones set larger. Each fact must
    come back inside a region with its heading path; a bold lead-in word, a numbered step and
    a short line of the body are no headings."""
    from indexes.extract.pdf_text import extract_pdf

    rng = random.Random(style)
    pdf = FPDF()
    pdf.set_auto_page_break(True, 15)
    pdf.add_page()
    facts: list[tuple[str, tuple[str, ...]]] = []
    words = ["valve", "intake", "crew", "bearing", "gasket", "sensor", "filter", "panel", "relay", "hatch"]

    def heading(number: str, title: str, level: int) -> str:
        text = f"{number} {title}" if style.startswith("numbered") else title
        size = 10 if style == "numbered-bold" else (16, 13, 11.5)[level - 1]
        pdf.set_font("Helvetica", "B" if style != "sized" or level < 3 else "", size)
        pdf.multi_cell(0, 7, text, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(1)
        return text

    def body(path: tuple[str, ...]) -> None:
        pdf.set_font("Helvetica", "", 10)
        for _ in range(2):
            fact = f"The {rng.choice(words)} of unit {rng.randrange(100, 999)} carries tag QX-{rng.randrange(1000, 9999)}."
            filler = " ".join(rng.choice(words) for _ in range(rng.randrange(12, 30)))
            pdf.multi_cell(0, 5, f"{fact} Then the {filler} were checked.", new_x="LMARGIN", new_y="NEXT")
            pdf.ln(2)
            facts.append((fact, path))
        pdf.set_font("Helvetica", "B", 10)
        pdf.write(5, "Note ")
        pdf.set_font("Helvetica", "", 10)
        pdf.multi_cell(0, 5, "the crew signs the sheet.", new_x="LMARGIN", new_y="NEXT")
        pdf.multi_cell(0, 5, "1. Close the hatch", new_x="LMARGIN", new_y="NEXT")
        pdf.ln(2)

    for a in range(1, 4):
        top = heading(f"{a}", f"{rng.choice(words).title()} checks", 1)
        body((top,))
        for b in range(1, 3):
            mid = heading(f"{a}.{b}", f"{rng.choice(words).title()} {rng.choice(words)} routine", 2)
            body((top, mid))
            if style != "numbered-bold" or b == 2:
                low = heading(f"{a}.{b}.1", f"Detail of {rng.choice(words)}", 3)
                body((top, mid, low))
    got = extract_pdf(bytes(pdf.output()))
    placed = 0
    for fact, path in facts:
        placed += any(fact in " ".join(got.text[r.start:r.end].split()) and r.section == path for r in got.regions)
    assert placed >= 0.95 * len(facts), (placed, len(facts), [r.section for r in got.regions][:12])
    assert not any("Note" in s or "Close the hatch" in s for r in got.regions for s in r.section)


@pytest.mark.parametrize("layout", ["three-columns", "sidebar", "spanning", "ragged"])
def test_multi_column_pages_read_column_by_column(layout):
    """Pages drawn line by line across their columns (benchmarks/column_layouts.py): three
    columns, a sidebar, columns around a full-width paragraph, a left column running on below a
    shorter right one. The text must be the reading order, and none of them a table."""
    from benchmarks.column_layouts import write_layout
    from indexes.extract.pdf_text import extract_pdf

    for seed in range(3):
        page = write_layout(layout, seed)
        got = extract_pdf(page.data)
        assert cer(" ".join(page.truth.split()), " ".join(got.text.split())) < 0.01, (layout, seed)
        assert got.tables == ()
