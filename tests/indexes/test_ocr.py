"""Scanned PDFs: pages with no text layer are read by OCR (Tesseract, installed by `make test`
from Debian's packages; the tests skip, saying so, where it is absent) when the ingest asks for
it, and refused as `no_text` when it does not. The scans are made here: a text PDF is rendered
by PDFium to page images, which become a PDF of images only, as a scanner writes."""

from __future__ import annotations

import io
import shutil

import pypdfium2 as pdfium  # type: ignore[import-untyped]
import pytest
from fpdf import FPDF

from benchmarks.file_corpus import cer
from indexes.extract.pdf_text import extract_pdf
from indexes.extract.record import BadFile

pytestmark = pytest.mark.skipif(shutil.which("tesseract") is None,
                                reason="tesseract (Debian's tesseract-ocr) is not installed: `make test` installs it as root")

PAGES = [
    ("Boiler room checks", ["The Curvan boiler was given service tag BX-4471 after its spring inspection.",
                            "Pressure relief valves are tested every three months by the site engineer."]),
    ("Pump station log", ["Pump P-12 ran for 1,240 hours before its bearings were replaced.",
                          "The intake screen at Nerval was cleared of debris on 14 March 2025."]),
]


def _text_pdf() -> bytes:
    pdf = FPDF()
    for heading, paragraphs in PAGES:
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 16)
        pdf.multi_cell(0, 9, heading, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(3)
        pdf.set_font("Helvetica", "", 12)
        for text in paragraphs:
            pdf.multi_cell(0, 7, text, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(3)
        if heading == "Pump station log":
            for row in (("Pump", "Hours", "Bearings"), ("P-12", "1,240", "replaced"), ("P-14", "860", "checked"),
                        ("P-15", "2,015", "replaced")):
                for width, cell in zip((40, 30, 40), row, strict=True):
                    pdf.cell(width, 8, cell, border=1)
                pdf.ln(8)
    return bytes(pdf.output())


def _scanned(data: bytes, dpi: int = 200) -> bytes:
    """Each page as a grey image at `dpi`, placed whole on an A4 page: no text layer."""
    source = pdfium.PdfDocument(data)
    out = FPDF()
    try:
        for page in source:
            image = page.render(scale=dpi / 72, grayscale=True).to_pil()
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            out.add_page()
            out.image(buffer, x=0, y=0, w=210, h=297)
    finally:
        source.close()
    return bytes(out.output())


def test_a_scan_is_refused_without_ocr_and_read_with_it_page_by_page():
    original = _text_pdf()
    scan = _scanned(original)
    with pytest.raises(BadFile) as refused:
        extract_pdf(scan)
    assert refused.value.reason == "no_text" and "--ocr" in refused.value.message
    truth = extract_pdf(original)
    got = extract_pdf(scan, ocr=True)
    assert got.metadata["ocr_pages"] == "2" and got.pages == 2
    rate = cer(" ".join(truth.text.split()), " ".join(got.text.split()))
    assert rate < 0.05, (rate, got.text)
    for page, (heading, paragraphs) in enumerate(PAGES, start=1):
        text = " ".join(got.text[r.start:r.end] for r in got.regions if r.page == page)
        assert heading in text and all(p.split(" after")[0][:30] in " ".join(text.split()) for p in paragraphs)
        assert any(r.section == (heading,) for r in got.regions if r.page == page)  # the scan's heading line
    table = [g for g in got.tables if g.page == 2]
    assert table and table[0].header == ("Pump", "Hours", "Bearings") and ("P-14", "860", "checked") in table[0].rows


def test_an_ingest_with_ocr_serves_the_scans_words_and_one_without_lists_it_as_bad(tmp_path, embedder):
    """Through the ingest's own extraction worker (indexes/extract/sandbox.py): the scan's
    facts are found on their page; without OCR the same folder's scan is a skipped bad file."""
    from indexes.snapshot_build import BuildOptions, build_snapshot
    from retrieval.search import search
    from retrieval.types import Filters, Principal
    from routes.service.view import open_view

    src = tmp_path / "src"
    src.mkdir()
    (src / "boiler_log.pdf").write_bytes(_scanned(_text_pdf()))
    (src / "note.md").write_text("---\nacl: [public]\n---\n# Note\nThe depot opens at six.\n")
    (src / "boiler_log.pdf.meta.json").write_text('{"acl": ["public"]}')
    plain = build_snapshot([src], tmp_path / "plain", embedder, BuildOptions(skip_bad_files=True))
    assert [(s["path"].rsplit("/", 1)[-1], s["reason"]) for s in plain["skipped_files"]] == [("boiler_log.pdf", "no_text")]
    read = build_snapshot([src], tmp_path / "ocr", embedder, BuildOptions(ocr=True))
    assert read["counts"]["documents"] == 2 and read["counts"]["tables"] == 1  # the scan's ruled table too
    view = open_view(tmp_path / "ocr", embedder, plugins=False)
    try:
        hits = search(view.retrievers, "bm25", "service tag BX-4471", Principal("ann"), 3, Filters(), view.limits)
        assert hits and hits[0].doc_id == "boiler_log.pdf" and hits[0].page == 1 and "BX-4471" in hits[0].text
    finally:
        view.close()
