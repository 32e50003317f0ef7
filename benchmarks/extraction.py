"""Files: how well the PDF, DOCX and HTML extractors read, how fast, and what extraction costs
against chunking and embedding the same text.

    .venv/bin/python benchmarks/extraction.py [--seeds 5] [--docs 4] [--repeats 5] [--embed-repeats 2]

Quality, on generated files with ground truth (benchmarks/file_corpus.py, seeds 0..seeds-1,
`--docs` PDFs, DOCX files and HTML pages each): character error rate per format (mean and max
over files); the two-column page's CER and the share of its sentences read whole, with the
layout rule against PDFium's stream order (`get_text_range`, the known boilerplate lines
removed so only the order differs); the share of facts whose sentence lies inside a region of
the expected page and heading path (and of Markdown notes read as an ingest reads them,
`write_markdown_notes`: ATX and setext headings, marks in names, fenced samples; of the same
PDFs with an outline; of the same Word files without heading style definitions); and how many
boilerplate strings reach the text (should be 0).
Tables (benchmarks/table_files.py, one file per layout and seed: a ruled PDF, an unruled PDF, a
Word and an HTML table): tables found, headers read, the share of cells read into their row and
column, and columns given the type their cells hold; and tables found in the prose corpus's
PDFs, which hold none. Column layouts (benchmarks/column_layouts.py: three columns, a
sidebar, columns around a full-width paragraph, a ragged end): each page's CER against its
reading order, with the layout rule and in stream order. Scans (`--scans`, `--scan-dpi`): generated PDFs rendered to page
images and read back by OCR (Tesseract): CER against their ground truth, facts on their page,
and seconds per page.

Throughput, on this machine, single thread: each format's files extracted from bytes in memory
(no disk reads), best and median of `--repeats` passes, as PDF pages, files and characters
per second; then the same text chunked (`chunk_documents`) and embedded under its title, as an
ingest does, by the real offline model (the embedder `quarry serve` builds here, best of
`--embed-repeats`), so extraction is stated as a share of extraction + chunking + embedding.
Real PDFs found under `--real-pdf-dir` (default /usr/share/doc; nothing is downloaded) are
timed the same way, named with their page counts. Writes benchmarks/results/extraction.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pypdfium2 as pdfium  # type: ignore[import-untyped]

from benchmarks.common import machine, make_embedder, write_json
from benchmarks.file_corpus import Fact, FileCorpus, cer, without_heading_styles, write_file_corpus, write_markdown_notes
from benchmarks.column_layouts import LAYOUTS as COLUMN_LAYOUTS, write_layout
from benchmarks.table_files import LAYOUTS, write_table_files
from indexes.chunking import chunk_documents
from indexes.corpus import load_documents
from indexes.extract.record import BadFile, Extracted
from indexes.files import FILE_SUFFIXES, FileKind, FileReader, extract
from indexes.snapshot_build import index_text
from indexes.extract.grids import typed_cells
from retrieval.types import Document

KINDS: tuple[FileKind, ...] = ("pdf", "docx", "html")


@dataclass(frozen=True)
class Source:
    """One file as the benchmark holds it: its bytes, read once, and its extraction."""

    path: Path
    kind: FileKind
    data: bytes
    got: Extracted


def normal(text: str) -> str:
    return " ".join(text.split())


def best_and_median(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Seconds of `fn()`: the best and the median of `repeats` runs."""
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return min(runs), statistics.median(runs)


# Quality ---------------------------------------------------------------------------------


def cer_by_kind(corpora: Sequence[FileCorpus], sources: dict[Path, Source]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        rates = [cer(c.truth[p], sources[p].got.text) for c in corpora for p in c.files if sources[p].kind == kind]
        out[kind] = {"files": len(rates), "mean": round(statistics.mean(rates), 4), "max": round(max(rates), 4)}
    return out


def stream_order_text(path: Path, page: int | None = None) -> str:
    """PDFium's text in content-stream order: one page, or every page joined by blank lines."""
    pdf = pdfium.PdfDocument(path.read_bytes())
    try:
        texts = []
        for index in range(len(pdf)) if page is None else (page - 1,):
            pdf_page = pdf[index]
            textpage = pdf_page.get_textpage()
            texts.append(textpage.get_text_range())
            textpage.close()
            pdf_page.close()
    finally:
        pdf.close()
    return "\n\n".join(texts)


def without(text: str, lines: Sequence[str]) -> str:
    for line in lines:
        text = text.replace(line, "")
    return text


def two_column(corpora: Sequence[FileCorpus], sources: dict[Path, Source]) -> dict[str, Any]:
    """The two-column page of each seed: CER and the share of its sentences read whole, with
    the layout rule and in stream order (running header and footer removed from the latter)."""
    rows: list[dict[str, float]] = []
    for c in corpora:
        page, got = c.columns, sources[c.columns.file].got
        layout = "\n\n".join(got.text[r.start:r.end] for r in got.regions if r.page == page.page)
        naive = without(stream_order_text(page.file, page.page), c.boilerplate[page.file])
        sentences = [normal(s) for s in (*page.left, *page.right)]
        rows.append({"cer_layout": cer(page.text, layout), "cer_stream": cer(page.text, naive),
                     "whole_layout": sum(s in normal(layout) for s in sentences) / len(sentences),
                     "whole_stream": sum(s in normal(naive) for s in sentences) / len(sentences)})
    summary = {key: round(statistics.mean(r[key] for r in rows), 4) for key in rows[0]}
    summary["cer_stream_min"] = round(min(r["cer_stream"] for r in rows), 4)
    summary["cer_stream_max"] = round(max(r["cer_stream"] for r in rows), 4)
    per_seed = [{"seed": seed, "page": c.columns.page, **{k: round(v, 4) for k, v in r.items()}}
                for seed, (c, r) in enumerate(zip(corpora, rows, strict=True))]
    return {"pages": len(rows), **summary, "per_seed": per_seed}


def stream_order_whole_pdfs(corpora: Sequence[FileCorpus], sources: dict[Path, Source]) -> dict[str, float]:
    """Context for the layout rule: stream-order CER over whole PDFs, boilerplate removed."""
    rates = [cer(c.truth[p], without(stream_order_text(p), c.boilerplate[p]))
             for c in corpora for p in c.files if sources[p].kind == "pdf"]
    return {"files": len(rates), "mean": round(statistics.mean(rates), 4), "max": round(max(rates), 4)}


def _in_expected_region(fact: Fact, got: Extracted) -> bool:
    sentence = normal(fact.sentence)
    return any(sentence in normal(got.text[r.start:r.end]) for r in got.regions
               if (fact.page is None or r.page == fact.page) and r.section == fact.section)


def facts_placed(corpora: Sequence[FileCorpus], sources: dict[Path, Source]) -> dict[str, dict[str, Any]]:
    """Per format: facts, how many sentences are in the text at all, and how many lie inside a
    region with the fact's page (PDF) and heading path (a PDF's from its heading lines)."""
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        facts = [f for c in corpora for f in c.facts if sources[f.file].kind == kind]
        found = sum(normal(f.sentence) in normal(sources[f.file].got.text) for f in facts)
        placed = sum(_in_expected_region(f, sources[f.file].got) for f in facts)
        out[kind] = {"facts": len(facts), "found": found, "placed": placed, "placed_share": round(placed / len(facts), 4)}
    return out


def section_variants(folder: Path, corpora: Sequence[FileCorpus], seeds: int, docs: int) -> dict[str, dict[str, Any]]:
    """Facts placed under their heading path in two more kinds of file: the same PDFs with an
    outline entry per page heading (sections from the outline), and the same Word files with
    no Title or HeadingN style in their styles part (headings by style id alone)."""
    outlined = [write_file_corpus(folder / f"outline-{seed}", seed, docs, pdf_outline=True) for seed in range(seeds)]
    out: dict[str, dict[str, Any]] = {}
    for name, groups, kind in (("pdf_with_outline", outlined, "pdf"), ("docx_without_heading_styles", corpora, "docx")):
        facts = placed = 0
        for c in groups:
            for path in (p for p in c.files if FILE_SUFFIXES[p.suffix] == kind):
                read = path if kind == "pdf" else without_heading_styles(path)
                got = extract(read.read_bytes(), kind)
                for fact in (f for f in c.facts if f.file == path):
                    facts += 1
                    placed += _in_expected_region(fact, got)
        out[name] = {"facts": facts, "placed": placed, "placed_share": round(placed / facts, 4)}
    return out


def markdown_placed(folder: Path, seeds: int, notes: int) -> dict[str, Any]:
    """Markdown notes (benchmarks/file_corpus.py `write_markdown_notes`) read as an ingest reads
    them: the share of facts whose sentence lies inside a region with the fact's heading path."""
    facts = placed = 0
    for seed in range(seeds):
        where = folder / f"markdown-{seed}"
        _, written = write_markdown_notes(where, seed, notes)
        docs = {ld.doc.id: ld.doc for ld in load_documents([where], reader=FileReader(markdown_sections=True))}
        for fact in written:
            doc = docs[fact.file.stem]
            facts += 1
            placed += any(normal(fact.sentence) in normal(doc.text[r.start:r.end]) and r.section == fact.section
                          for r in doc.regions)
    return {"facts": facts, "placed": placed, "placed_share": round(placed / facts, 4)}


def boilerplate_leaks(corpora: Sequence[FileCorpus], sources: dict[Path, Source]) -> dict[str, Any]:
    checked, leaked = 0, []
    for c in corpora:
        for path in c.files:
            text = normal(sources[path].got.text)
            for line in c.boilerplate[path]:
                checked += 1
                if normal(line) in text:
                    leaked.append(f"{path.parent.name}/{path.name}: {line}")
    return {"strings_checked": checked, "found": len(leaked), "leaked": leaked}


# Throughput --------------------------------------------------------------------------------


def extraction_speed(group: Sequence[Source], repeats: int) -> dict[str, Any]:
    """Single-thread extraction of every file of one format from bytes, `repeats` passes."""
    best, median = best_and_median(lambda: [extract(s.data, s.kind) for s in group], repeats)
    pages = sum(s.got.pages or 0 for s in group)
    chars = sum(len(s.got.text) for s in group)
    out = {"files": len(group), "chars": chars, "best_s": round(best, 4), "median_s": round(median, 4),
           "files_per_s": round(len(group) / best, 1), "chars_per_s": round(chars / best)}
    if pages:
        out |= {"pages": pages, "pages_per_s": round(pages / best, 1), "pages_per_s_median": round(pages / median, 1)}
    return out


def documents(group: Sequence[Source]) -> list[Document]:
    """The extracted files as the documents an ingest would chunk (id, title, text, regions)."""
    return [Document(id=f"{s.path.parent.name}:{s.path.name}", text=s.got.text, title=s.got.title, regions=s.got.regions)
            for s in group]


def ingest_speed(group: Sequence[Source], embedder: Any, extract_s: float, repeats: int) -> dict[str, Any]:
    """Chunking and embedding one format's extracted text (each chunk under its document's
    title, as the ingest embeds it); extraction's share of the three together."""
    docs = documents(group)
    chunk_s, _ = best_and_median(lambda: chunk_documents(docs), repeats)
    chunks = chunk_documents(docs)
    by_id = {d.id: d for d in docs}
    texts = [index_text(by_id[c.doc_id], c) for c in chunks]
    embed_s, embed_median = best_and_median(lambda: embedder.encode(texts), repeats)
    pages = sum(s.got.pages or 0 for s in group)
    total = extract_s + chunk_s + embed_s
    out = {"chunks": len(chunks), "chunk_s": round(chunk_s, 4), "embed_s": round(embed_s, 3),
           "embed_median_s": round(embed_median, 3), "chunks_per_s": round(len(chunks) / embed_s, 1),
           "files_per_s": round(len(group) / embed_s, 2), "extraction_share": round(extract_s / total, 4)}
    if pages:
        out["pages_per_s"] = round(pages / embed_s, 2)
    return out


def real_pdfs(folder: Path, limit: int) -> list[tuple[Path, bytes, Extracted]]:
    """Up to `limit` readable PDFs under `folder` (none: an empty list, nothing reported)."""
    found = []
    for path in sorted(folder.rglob("*.pdf")) if folder.is_dir() else []:
        try:
            data = path.read_bytes()
            found.append((path, data, extract(data, "pdf")))
        except (OSError, BadFile):
            continue
        if len(found) == limit:
            break
    return found


def real_pdf_speed(found: Sequence[tuple[Path, bytes, Extracted]], embedder: Any, repeats: int,
                   embed_repeats: int) -> list[dict[str, Any]]:
    out = []
    for path, data, got in found:
        source = Source(path, "pdf", data, got)
        speed = extraction_speed([source], repeats)
        ingest = ingest_speed([source], embedder, speed["best_s"], embed_repeats)
        out.append({"path": str(path), "pages": got.pages, "chars": len(got.text), "best_s": speed["best_s"],
                    "pages_per_s": speed["pages_per_s"], "chars_per_s": speed["chars_per_s"],
                    "chunks": ingest["chunks"], "embed_s": ingest["embed_s"],
                    "extraction_share": ingest["extraction_share"]})
    return out


# Report ------------------------------------------------------------------------------------


def column_orders(seeds: int) -> dict[str, Any]:
    """Per multi-column layout (benchmarks/column_layouts.py, seeds 0..seeds-1): CER of the
    page's text against its reading order and the share of its sentences read whole, with the
    layout rule and in PDFium's stream order."""
    out: dict[str, Any] = {}
    for layout in COLUMN_LAYOUTS:
        rows = []
        for seed in range(seeds):
            page = write_layout(layout, seed)
            got = extract(page.data, "pdf").text
            with pdfium.PdfDocument(page.data) as pdf:
                textpage = pdf[0].get_textpage()
                stream = textpage.get_text_range()
                textpage.close()
            truth = normal(page.truth)
            rows.append({"cer_layout": cer(truth, normal(got)), "cer_stream": cer(truth, normal(stream)),
                         "whole_layout": sum(normal(x) in normal(got) for x in page.sentences) / len(page.sentences),
                         "whole_stream": sum(normal(x) in normal(stream) for x in page.sentences) / len(page.sentences)})
        out[layout] = {"pages": seeds, **{k: round(statistics.mean(r[k] for r in rows), 4) for k in rows[0]},
                       "cer_layout_max": round(max(r["cer_layout"] for r in rows), 4)}
    return out


def table_cells(folder: Path, seeds: int) -> dict[str, Any]:
    """Per layout: tables found (exactly one grid where the file has one table), headers read,
    cells read into their place (header cells included), and columns typed as their cells."""
    out: dict[str, Any] = {}
    files = [f for seed in range(seeds) for f in write_table_files(folder, seed)]
    for layout in LAYOUTS:
        found = headers = cells = cells_right = columns = columns_right = 0
        mine = [f for f in files if f.layout == layout]
        for f in mine:
            kind = FILE_SUFFIXES[f.path.suffix]
            got = extract(f.path.read_bytes(), kind).tables
            truth = (f.header, *f.rows)
            cells += sum(len(r) for r in truth)
            columns += len(f.header) - 1
            if len(got) != 1:
                continue
            found += 1
            grid = got[0]
            headers += grid.header == f.header
            read = (grid.header, *grid.rows)
            cells_right += sum(1 for r, row in enumerate(truth) for c, value in enumerate(row)
                               if r < len(read) and c < len(read[r]) and read[r][c] == value)
            if grid.header == f.header and len(grid.rows) == len(f.rows):
                for c in range(1, len(f.header)):
                    columns_right += typed_cells([row[c] for row in grid.rows])[0] == f.types[c]
        out[layout] = {"files": len(mine), "tables_found": found, "headers_read": headers, "cells": cells,
                       "cells_right": cells_right, "cell_accuracy": round(cells_right / cells, 4) if cells else None,
                       "typed_columns": columns, "typed_right": columns_right}
    return out


def scanned(data: bytes, dpi: int) -> bytes:
    """A PDF's pages as grey images at `dpi`, each placed whole on a page: a scan, no text layer."""
    import io

    from fpdf import FPDF

    source, out = pdfium.PdfDocument(data), FPDF()
    try:
        for page in source:
            width, height = page.get_size()
            image = page.render(scale=dpi / 72, grayscale=True).to_pil()
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            out.add_page(format=(width * 25.4 / 72, height * 25.4 / 72))
            out.image(buffer, x=0, y=0, w=width * 25.4 / 72, h=height * 25.4 / 72)
    finally:
        source.close()
    return bytes(out.output())


def ocr_scans(corpora: Sequence[FileCorpus], files: int, dpi: int) -> dict[str, Any]:
    """The first `files` generated PDFs scanned at `dpi` and read back by OCR: CER against
    their ground truth (running header and footer lines removed from both, as from a text
    layer), facts on their page, and pages per second (one thread)."""
    from indexes.extract.ocr import available

    if not available():
        return {"skipped": "tesseract is not installed"}
    pdfs = [p for c in corpora for p in c.files if p.suffix == ".pdf"][:files]
    rates, pages, seconds, facts, placed = [], 0, 0.0, 0, 0
    for path in pdfs:
        corpus = next(c for c in corpora if path in c.files)
        scan = scanned(path.read_bytes(), dpi)
        t0 = time.perf_counter()
        got = extract(scan, "pdf", ocr=True)
        seconds += time.perf_counter() - t0
        pages += got.pages or 0
        rates.append(cer(normal(corpus.truth[path]), normal(got.text)))
        mine = [f for f in corpus.facts if f.file == path]
        facts += len(mine)
        placed += sum(any(normal(f.sentence) in normal(got.text[r.start:r.end]) for r in got.regions if r.page == f.page)
                      for f in mine)
    return {"files": len(pdfs), "pages": pages, "dpi": dpi, "cer_mean": round(statistics.mean(rates), 4),
            "cer_max": round(max(rates), 4), "facts": facts, "facts_on_their_page": placed,
            "pages_per_s": round(pages / seconds, 3), "seconds_per_page": round(seconds / pages, 2)}


def false_tables(sources: dict[Path, Source]) -> dict[str, int]:
    """Tables found in the prose corpus's PDFs, which hold none (its DOCX and HTML files hold one each)."""
    pdfs = [s for s in sources.values() if s.kind == "pdf"]
    return {"pdf_files": len(pdfs), "pdf_pages": sum(s.got.pages or 0 for s in pdfs),
            "tables_found": sum(len(s.got.tables) for s in pdfs)}


def print_report(result: dict[str, Any]) -> None:
    q, t = result["quality"], result["throughput"]
    corpus = result["corpus"]
    print(f"corpus: seeds {corpus['seeds']}, {corpus['files']['pdf']} PDFs ({corpus['pdf_pages']} pages), "
          f"{corpus['files']['docx']} DOCX, {corpus['files']['html']} HTML")
    print("\nformat   CER mean   CER max   facts placed     extract files/s  pages/s   chars/s     "
          "embed chunks/s  pages/s  extraction share")
    for kind in KINDS:
        c, f, e, i = q["cer"][kind], q["facts"][kind], t["extraction"][kind], t["ingest"][kind]
        pages = f"{e['pages_per_s']:>8}" if "pages_per_s" in e else f"{'':>8}"
        embed_pages = f"{i['pages_per_s']:>8}" if "pages_per_s" in i else f"{'':>8}"
        print(f"{kind:<6} {c['mean']:>10.4f} {c['max']:>9.4f}   {f['placed']:>4}/{f['facts']:<4} "
              f"{e['files_per_s']:>20} {pages} {e['chars_per_s']:>10}   {i['chunks_per_s']:>14} {embed_pages}"
              f"   {i['extraction_share']:>8.1%}")
    md = q["markdown_sections"]
    print(f"markdown notes: facts under their heading path {md['placed']}/{md['facts']}")
    for name, v in q["section_variants"].items():
        print(f"{name.replace('_', ' ')}: facts under their heading path {v['placed']}/{v['facts']}")
    col = q["two_column"]
    print(f"\ntwo-column page ({col['pages']} seeds): CER {col['cer_layout']:.4f} with the layout rule, "
          f"{col['cer_stream']:.4f} in stream order ({col['cer_stream_min']:.3f}-{col['cer_stream_max']:.3f}); "
          f"sentences read whole {col['whole_layout']:.0%} vs {col['whole_stream']:.0%}")
    whole = q["stream_order_whole_pdfs"]
    print(f"stream order over whole PDFs (boilerplate removed): CER mean {whole['mean']:.4f}, max {whole['max']:.4f}")
    b = q["boilerplate"]
    print(f"boilerplate strings in extracted text: {b['found']} of {b['strings_checked']} checked")
    print("\nlayout        tables found  headers  cells right        columns typed right")
    for layout, r in q["tables"].items():
        print(f"{layout:<13} {r['tables_found']:>5}/{r['files']:<6} {r['headers_read']:>4}/{r['files']:<3} "
              f"{r['cells_right']:>5}/{r['cells']:<5} ({r['cell_accuracy']:.4f})  {r['typed_right']:>4}/{r['typed_columns']}")
    print("\ncolumn layout   CER with the layout rule (max)   stream order   sentences whole: layout / stream")
    for layout, r in q["column_layouts"].items():
        print(f"{layout:<15} {r['cer_layout']:.4f} ({r['cer_layout_max']:.4f})               {r['cer_stream']:.4f}         "
              f"{r['whole_layout']:.0%} / {r['whole_stream']:.0%}")
    o = q["ocr"]
    if "skipped" in o:
        print(f"\nOCR: skipped ({o['skipped']})")
    else:
        print(f"\nOCR of {o['files']} scanned PDFs ({o['pages']} pages at {o['dpi']} dpi): CER mean {o['cer_mean']:.4f}, "
              f"max {o['cer_max']:.4f}; facts on their page {o['facts_on_their_page']}/{o['facts']}; "
              f"{o['pages_per_s']} pages/s ({o['seconds_per_page']} s a page)")
    ft = q["false_tables"]
    print(f"tables found in the prose corpus's PDFs (none there): {ft['tables_found']} in {ft['pdf_files']} files, "
          f"{ft['pdf_pages']} pages")
    for r in t["real_pdfs"]:
        print(f"real PDF {r['path']} ({r['pages']} pages, {r['chars']} chars): {r['pages_per_s']} pages/s, "
              f"{r['chars_per_s']} chars/s; {r['chunks']} chunks embedded in {r['embed_s']} s, "
              f"extraction {r['extraction_share']:.1%} of the three")
    print(f"load average (1 min) during the run: {', '.join(f'{x:.2f}' for x in result['machine']['loadavg_1m'])}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5, help="corpora generated (seeds 0..N-1); each has one two-column page")
    ap.add_argument("--docs", type=int, default=4, help="PDFs, DOCX files and HTML pages per seed (a PDF has 3-4 pages)")
    ap.add_argument("--repeats", type=int, default=5, help="extraction passes timed (best and median reported)")
    ap.add_argument("--embed-repeats", type=int, default=2, help="chunking and embedding passes timed (best reported)")
    ap.add_argument("--real-pdf-dir", type=Path, default=Path("/usr/share/doc"), help="where to look for real PDFs")
    ap.add_argument("--real-pdfs", type=int, default=2, help="at most this many real PDFs timed")
    ap.add_argument("--scans", type=int, default=3, help="generated PDFs scanned to images and read by OCR (0: none)")
    ap.add_argument("--scan-dpi", type=int, default=200, help="resolution of the generated scans")
    args = ap.parse_args()
    load = [os.getloadavg()[0]]

    with tempfile.TemporaryDirectory() as tmp:
        corpora = [write_file_corpus(Path(tmp) / f"seed-{seed}", seed, args.docs) for seed in range(args.seeds)]
        sources = {}
        for c in corpora:
            for path in c.files:
                data = path.read_bytes()
                kind = FILE_SUFFIXES[path.suffix]
                sources[path] = Source(path, kind, data, extract(data, kind))
        quality = {"cer": cer_by_kind(corpora, sources), "two_column": two_column(corpora, sources),
                   "stream_order_whole_pdfs": stream_order_whole_pdfs(corpora, sources),
                   "facts": facts_placed(corpora, sources),
                   "markdown_sections": markdown_placed(Path(tmp), args.seeds, args.docs),
                   "section_variants": section_variants(Path(tmp), corpora, args.seeds, args.docs),
                   "boilerplate": boilerplate_leaks(corpora, sources),
                   "tables": table_cells(Path(tmp), args.seeds), "false_tables": false_tables(sources),
                   "ocr": ocr_scans(corpora, args.scans, args.scan_dpi), "column_layouts": column_orders(args.seeds)}
    groups = {kind: [s for s in sources.values() if s.kind == kind] for kind in KINDS}
    load.append(os.getloadavg()[0])

    speed = {kind: extraction_speed(groups[kind], args.repeats) for kind in KINDS}
    load.append(os.getloadavg()[0])
    embedder = make_embedder()
    embedder.encode(["warm-up: the model loads and runs once before it is timed"] * 8)
    ingest = {kind: ingest_speed(groups[kind], embedder, speed[kind]["best_s"], args.embed_repeats) for kind in KINDS}
    load.append(os.getloadavg()[0])
    real = real_pdf_speed(real_pdfs(args.real_pdf_dir, args.real_pdfs), embedder, args.repeats, args.embed_repeats)
    load.append(os.getloadavg()[0])

    import torch

    result = {
        "command": "benchmarks/extraction.py " + " ".join(sys.argv[1:]),
        "corpus": {"seeds": args.seeds, "docs_per_seed": args.docs, "files": {k: len(g) for k, g in groups.items()},
                   "pdf_pages": sum(s.got.pages or 0 for s in groups["pdf"])},
        "quality": quality,
        "throughput": {"repeats": args.repeats, "embed_repeats": args.embed_repeats, "extraction": speed,
                       "ingest": ingest, "real_pdfs": real},
        "machine": {**machine(), "torch_threads": torch.get_num_threads(), "embedder": embedder.model_id,
                    "loadavg_1m": [round(x, 2) for x in load]},
    }
    print_report(result)
    write_json("extraction", result)


if __name__ == "__main__":
    main()
