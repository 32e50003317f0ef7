"""PDF text in reading order, one region per page (pypdfium2).

A content stream's order is not the reading order (a two-column page may be drawn line by line
across both columns), so the text is rebuilt from character boxes: characters make words, and
a recursive XY-cut orders them (Nagy & Seth 1984, "Hierarchical representation of optically
scanned documents"): split a block on wide horizontal whitespace bands; within a band, group
consecutive lines that share a vertical gutter and read such a group column by column. Running
headers and footers (a line in the top or bottom band whose text, digits masked, recurs on
half the pages or more) are dropped, so they do not repeat in every chunk. Sections come from
the outline, or, in a file without one, from its heading lines (`_heading_marks`); tables on
a page are found from its word boxes and rules (indexes/extract/pdf_tables.py).
"""

from __future__ import annotations

import ctypes
import re
import threading
from dataclasses import dataclass, replace
from datetime import date
from itertools import pairwise
from statistics import median

import pypdfium2 as pdfium  # type: ignore[import-untyped]
import pypdfium2.raw as pdfium_c  # type: ignore[import-untyped]

from indexes.extract.grids import MAX_FILE_TABLES, Grid, render
from indexes.extract.pdf_tables import MAX_RULES, Rule, find_tables, vertical_rules
from indexes.extract.record import MAX_TEXT_CHARS, BadFile, Extracted
from retrieval.types import Region

# PDFium is not thread-safe, not even across documents (pypdfium2's docs): one call at a time.
_PDFIUM = threading.Lock()
# PDFium marks a line-end hyphen as 0x02; ligatures are spelled out so that search finds "file".
_CHAR_MAP = {0x02: "-", 0xFFFE: "-", 0xAD: "-", 0xFB00: "ff", 0xFB01: "fi", 0xFB02: "fl", 0xFB03: "ffi", 0xFB04: "ffl",
             0xFB05: "st", 0xFB06: "st"}
BAND = 0.12  # top and bottom share of the page where running headers and footers live
WIDE_BAND = 2.0  # a horizontal whitespace band this many line heights tall separates blocks
GUTTER = 1.2  # a vertical gutter is at least this many line heights wide
COLUMN_SHARE = 0.15  # each side of a gutter spans this share of the block (a sidebar's third, not a label beside a value)
_WORD_SPLIT_LOWER = re.compile(r"(?<![^\W\d_])([^\W\d_]+)-$")
_WORD_START = re.compile(r"[^\W\d_]+")
MAX_PAGES = 20_000  # a file past this is no document to search (and each page costs PDFium memory)
MAX_OUTLINE = 10_000  # outline entries read (a book has a few hundred)
MAX_OUTLINE_DEPTH = 8
MAX_HEADING_CHARS = 200
MAX_HEADING_WORDS = 14  # a line of more words is text, whatever its face
HEADING_SIZE = 1.15  # a line this many times the body's font size, or bold, may be a heading
SAME_SIZE = 0.1  # heading sizes this close (a share of the larger) are one level
_SECTION_NUMBER = re.compile(r"(\d{1,3}(?:\.\d{1,3}){0,5})\.?\s+\S")
_PDF_DATE = re.compile(r"(?:D:)?\s*(\d{4})(\d{2})?(\d{2})?")
FONT_NAME_BYTES = 128
OCR_PAGE_S = 120.0  # one page's OCR at most (the extraction's own budget ends it sooner)
_BOLD_NAME = re.compile(r"bold|black|heavy|semibold|demi", re.IGNORECASE)


@dataclass
class _Box:
    """A word or line: text and its box in points, top-down (top < bottom)."""

    text: str
    x0: float
    top: float
    x1: float
    bottom: float
    grid: Grid | None = None  # a table found on the page (indexes/extract/pdf_tables.py), read as its rendering
    size: float = 0.0  # font size of its first character (points)
    bold: bool = False  # its first character's font is bold (by weight or by name)

    @property
    def height(self) -> float:
        return self.bottom - self.top


def extract_pdf(data: bytes, max_chars: int = MAX_TEXT_CHARS, ocr: bool = False) -> Extracted:
    """The text of a PDF in reading order, one region per page that has text, and its info
    dictionary's metadata. Raises BadFile for encrypted, unreadable, text-less or oversized files."""
    with _PDFIUM:
        try:
            return _extract(data, max_chars, ocr)
        except BadFile:
            raise
        except Exception as error:  # PDFium on hostile input: any failure is the file's
            raise BadFile("corrupt", f"PDFium could not read the file: {type(error).__name__}: {error}") from error


def _extract(data: bytes, max_chars: int, ocr: bool) -> Extracted:
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as error:
        if error.err_code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY):
            raise BadFile("encrypted", "the PDF is password-protected: save a copy without the password") from error
        raise BadFile("corrupt", f"not a readable PDF ({error})") from error
    try:
        pages: list[list[_Box]] = []
        total = read_by_ocr = 0
        heights: list[float] = []
        if len(pdf) > MAX_PAGES:
            raise BadFile("too_large", f"{len(pdf)} pages, over {MAX_PAGES}")
        for index in range(len(pdf)):
            lines, height, scanned = _page_lines(pdf, index, max_chars - total, ocr)
            read_by_ocr += scanned
            pages.append(lines)
            heights.append(height)
            total += sum(len(line.text) + 1 for line in lines)
            if total > max_chars:
                raise BadFile("too_large", f"the text passes {max_chars} characters by page {index + 1}")
        info = pdf.get_metadata_dict(skip_empty=True)
        outline = _outline(pdf)
    finally:
        pdf.close()
    running = _running_lines(pages, heights)
    kept_pages = [[line for line in lines if not (_in_band(line, height) and _key(line.text) in running)]
                  for lines, height in zip(pages, heights, strict=True)]
    marks = outline or _heading_marks(kept_pages)
    texts: list[str] = []
    regions: list[Region] = []
    offset = 0
    path: tuple[str, ...] = ()
    tables: list[Grid] = []
    for number, kept in enumerate(kept_pages, start=1):
        parts, path = _sections(kept, marks.get(number - 1, []), path)
        for section, part in parts:
            for line in part:
                if line.grid is not None and len(tables) < MAX_FILE_TABLES:
                    tables.append(replace(line.grid, number=len(tables) + 1, page=number, section=section))
            text = _join_lines(part)
            if not text:
                continue
            if texts:
                offset += 2
            regions.append(Region(offset, offset + len(text), page=number, section=section))
            texts.append(text)
            offset += len(text)
    if not texts:
        raise BadFile("no_text", f"no text layer on any of its {len(pages)} pages" + (
            " and OCR read no word" if ocr else " (a scan? ingest with --ocr to read it, or OCR it first)"))
    joined = "\n\n".join(texts)
    if len(joined) > max_chars:
        raise BadFile("too_large", f"the text has {len(joined)} characters, over {max_chars}")
    metadata = {key.lower(): info[name].strip() for name, key in
                (("Author", "author"), ("Subject", "subject"), ("Keywords", "keywords")) if info.get(name, "").strip()}
    modified = _pdf_date(info.get("ModDate", ""))
    if modified:
        metadata["modified"] = modified.isoformat()
    if read_by_ocr:
        metadata["ocr_pages"] = str(read_by_ocr)  # pages whose text is OCR's reading of their image
    return Extracted(text=joined, regions=tuple(regions), title=info.get("Title", "").strip() or None,
                     date=_pdf_date(info.get("CreationDate", "")), metadata=metadata, pages=len(pages),
                     tables=tuple(tables))


def _outline(pdf: pdfium.PdfDocument) -> dict[int, list[tuple[str, tuple[str, ...]]]]:
    """The outline (bookmarks), by the page each entry points to: (its title, its heading path),
    in outline order. Bounded (MAX_OUTLINE entries, MAX_OUTLINE_DEPTH levels; pypdfium2 stops
    at a circular reference); an entry without a page is skipped, and a path is the titles of
    the entries above it."""
    out: dict[int, list[tuple[str, tuple[str, ...]]]] = {}
    stack: list[str] = []
    for n, mark in enumerate(pdf.get_toc(max_depth=MAX_OUTLINE_DEPTH)):
        if n >= MAX_OUTLINE:
            break
        title = " ".join((mark.get_title() or "").split())[:MAX_HEADING_CHARS]
        del stack[mark.level:]
        stack += [""] * (mark.level - len(stack))
        stack.append(title)
        dest = mark.get_dest()
        page = dest.get_index() if dest is not None else None
        if title and page is not None:
            out.setdefault(page, []).append((title, tuple(t for t in stack if t)))
    return out


def _heading_marks(pages: list[list[_Box]]) -> dict[int, list[tuple[str, tuple[str, ...]]]]:
    """Headings of a PDF without an outline, by page, as `_outline` gives them: short lines
    set larger than the body text (HEADING_SIZE times its most common size, by characters) or
    in bold at the body's size or more, that read as a title (a letter or a section number
    first, no sentence end). A numbered heading's level is its number's depth ("4.2" is 2);
    another's is the rank of its size among the headings' sizes (`_style_ranks`)."""
    sizes: dict[float, int] = {}
    for lines in pages:
        for line in lines:
            if line.grid is None and line.size > 0:
                sizes[round(line.size * 2) / 2] = sizes.get(round(line.size * 2) / 2, 0) + len(line.text)
    if not sizes:
        return {}
    body = max(sizes, key=lambda k: sizes[k])
    found: list[tuple[int, str, int | None, tuple[float, bool]]] = []
    for number, lines in enumerate(pages):
        for line in lines:
            text = " ".join(line.text.split())
            if line.grid is not None or not _titled(text):
                continue
            if not (line.size >= HEADING_SIZE * body or (line.bold and line.size >= 0.95 * body)):
                continue
            numbered = _SECTION_NUMBER.match(text)
            depth = numbered.group(1).count(".") + 1 if numbered else None
            found.append((number, text, depth, (line.size, line.bold)))
    ranks = _style_ranks([style for *_, style in found])
    out: dict[int, list[tuple[str, tuple[str, ...]]]] = {}
    stack: list[tuple[int, str]] = []
    for number, text, depth, style in found:
        level = depth if depth is not None else ranks[style]
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text))
        out.setdefault(number, []).append((text, tuple(t for _, t in stack)))
    return out


def _style_ranks(styles: list[tuple[float, bool]]) -> dict[tuple[float, bool], int]:
    """Heading levels by style: larger first, bold before regular at one size; sizes within
    SAME_SIZE of a larger one share its level (a scan's sizes are estimates)."""
    ranks: dict[tuple[float, bool], int] = {}
    level, anchor = 0, None
    for size, bold in sorted(set(styles), key=lambda st: (-st[0], not st[1])):
        if anchor is None or size < anchor[0] * (1 - SAME_SIZE) or bold != anchor[1]:
            level, anchor = level + 1, (size, bold)
        ranks[(size, bold)] = level
    return ranks


def _titled(text: str) -> bool:
    """Does a line read as a heading's title: short, a letter or a section number first, a
    letter in it, no sentence or clause end?"""
    return (bool(text) and len(text) <= MAX_HEADING_CHARS and len(text.split()) <= MAX_HEADING_WORDS
            and text[0].isalnum() and text[-1] not in ".,;:" and any(ch.isalpha() for ch in text))


def _sections(lines: list[_Box], marks: list[tuple[str, tuple[str, ...]]], path: tuple[str, ...]
              ) -> tuple[list[tuple[tuple[str, ...], list[_Box]]], tuple[str, ...]]:
    """A page's lines cut where its outline entries start, and the section in force after the
    page. An entry starts at the line that begins with its title (searched after the previous
    cut), else where the previous cut is (the top of the page for the first). `path` is the
    section in force from the pages before."""
    parts: list[tuple[tuple[str, ...], list[_Box]]] = []
    start = 0
    for title, section in marks:
        want = _plain(title)
        at = next((i for i in range(start, len(lines)) if _plain(lines[i].text).startswith(want)), start)
        parts.append((path, lines[start:at]))
        start, path = at, section
    parts.append((path, lines[start:]))
    return [(section, part) for section, part in parts if part], path


def _plain(text: str) -> str:
    return " ".join(text.split()).lower()


def _page_lines(pdf: pdfium.PdfDocument, index: int, max_chars: int, ocr: bool = False) -> tuple[list[_Box], float, bool]:
    """One page's lines in reading order, its height, and whether OCR read it (a page with no
    text layer, when `ocr`; its PDFium page and text page are closed on return: they hold
    native memory); a page of more than `max_chars` characters is refused before they are read."""
    page = pdf.get_page(index)
    try:
        _, bottom, _, top = page.get_bbox()  # the visible box: its top is y = 0 for the layout rule
        height = top - bottom
        textpage = page.get_textpage()
        try:
            if textpage.count_chars() > max_chars:
                raise BadFile("too_large", f"page {index + 1} alone has {textpage.count_chars()} characters, more than "
                                           "the text may hold")
            words = _words(textpage, top)
        finally:
            textpage.close()
        scanned = ocr and not words
        if scanned:
            words = _ocr_words(page)
        rules = _rules(page, top) if words else []
    finally:
        page.close()
    if not words:
        return [], height, scanned
    line_height = max(1.0, median(w.height for w in words))  # 1 pt: fonts without a height
    return _order(_with_tables(words, line_height, rules), line_height), height, scanned


def _ocr_words(page: pdfium.PdfPage) -> list[_Box]:
    """The words OCR reads on the page's image (indexes/extract/ocr.py), each with the font size
    its box and letters suggest (`font_size`), which ranks heading lines as a text layer's would."""
    from indexes.extract.ocr import OCR_DPI, OcrUnavailable, pgm, read_words

    scale = OCR_DPI / 72
    bitmap = page.render(scale=scale, grayscale=True)
    try:
        pixels = bitmap.to_numpy()
        image = pgm(pixels.reshape(pixels.shape[0], -1)[:, : bitmap.width].tobytes(), bitmap.width, bitmap.height)
    finally:
        bitmap.close()
    try:
        found = read_words(image, scale, OCR_PAGE_S)
    except OcrUnavailable as e:
        raise BadFile("no_text", f"a page has no text layer and {e}") from None
    return [_Box(w.text, w.x0, w.top, w.x1, w.bottom, size=w.size) for w in found]


def _rules(page: pdfium.PdfPage, page_top: float) -> list[Rule]:
    """The page's vertical rules and drawn cell sides, from its first MAX_RULES path objects."""
    bounds = []
    for n, obj in enumerate(page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_PATH,))):
        if n >= MAX_RULES:
            break
        bounds.append(obj.get_bounds())
    return vertical_rules(bounds, page_top)


def _with_tables(words: list[_Box], line_height: float, rules: list[Rule]) -> list[_Box]:
    """The page's words with each table's words replaced by one box that reads as the table's
    rendering (one row per line with its headers) and carries its grid."""
    found = find_tables(words, line_height, rules)
    if not found:
        return words
    used = {i for table in found for i in table.words}
    boxes = [w for i, w in enumerate(words) if i not in used]
    return boxes + [_Box("\n".join(render(t.grid)), t.x0, t.top, t.x1, t.bottom, t.grid) for t in found]


def _words(textpage: pdfium.PdfTextPage, page_top: float) -> list[_Box]:
    """Characters to words: a word ends at whitespace, at a horizontal gap wider than a fifth
    of the glyph height, or where the text jumps to another line or back to the left (the
    characters of a ligature share one box, so they are no jump). A word's characters are
    gathered in a list and joined once: one endless word costs linear time."""
    words: list[_Box] = []
    parts: list[list[str]] = []
    current: _Box | None = None
    last_x0 = 0.0
    rect = pdfium_c.FS_RECTF()
    font = ctypes.create_string_buffer(FONT_NAME_BYTES)
    for i in range(textpage.count_chars()):
        code = pdfium_c.FPDFText_GetUnicode(textpage, i)
        char = _CHAR_MAP.get(code) or (chr(code) if 0x20 <= code < 0xD800 or 0xE000 <= code <= 0x10FFFF else "")
        if not char or char.isspace() or not pdfium_c.FPDFText_GetLooseCharBox(textpage, i, rect):
            current = None
            continue
        x0, x1, top, bottom = rect.left, rect.right, page_top - rect.top, page_top - rect.bottom
        if current is not None and (x0 - current.x1 > 0.2 * current.height or x0 < last_x0 - 0.1 * current.height
                                    or abs((top + bottom) - (current.top + current.bottom)) > current.height):
            current = None
        if current is None:
            current = _Box("", x0, top, x1, bottom, size=pdfium_c.FPDFText_GetFontSize(textpage, i),
                           bold=_bold(textpage, i, font))
            words.append(current)
            parts.append([char])
        else:
            parts[-1].append(char)
            current.x1, current.top, current.bottom = max(current.x1, x1), min(current.top, top), max(current.bottom, bottom)
        last_x0 = x0
    for word, chars in zip(words, parts, strict=True):
        word.text = "".join(chars)
    return words


def _bold(textpage: pdfium.PdfTextPage, i: int, name: ctypes.Array[ctypes.c_char]) -> bool:
    """Is character `i` set in a bold face: a weight of 600 or more, or a font named so (the
    standard fonts carry no weight: "Helvetica-Bold")."""
    if pdfium_c.FPDFText_GetFontWeight(textpage, i) >= 600:
        return True
    flags = ctypes.c_int()
    size = pdfium_c.FPDFText_GetFontInfo(textpage, i, name, len(name), ctypes.byref(flags))
    return 0 < size <= len(name) and _BOLD_NAME.search(name.value.decode("latin-1")) is not None


def _order(words: list[_Box], line_height: float) -> list[_Box]:
    """Recursive XY-cut: blocks split by wide horizontal bands, top to bottom; in each block,
    runs of lines that share a vertical gutter are read left column first, then right."""
    lines: list[_Box] = []
    for block in _continued(_bands(words, WIDE_BAND * line_height), line_height):
        groups: list[list[_Box]] = []
        for stripe in _bands(block, 0.0):
            if groups and _gutter(groups[-1] + stripe, line_height):
                groups[-1] += stripe
            else:
                groups.append(stripe)
        for group in groups:
            gutter = _gutter(group, line_height)
            if gutter is None:
                lines.append(_line(group))
            else:
                lines += _order([w for w in group if w.x1 <= gutter], line_height)
                lines += _order([w for w in group if w.x1 > gutter], line_height)
    return lines


def _continued(blocks: list[list[_Box]], line_height: float) -> list[list[_Box]]:
    """Blocks joined to the block of columns above them when they continue its columns: every
    word on one side of its gutter, and either words on both sides (a paragraph break that
    happens to line up across the columns is no end of them) or two lines or more within its
    left column (the left column runs on below a shorter right one). A full-width line, or a
    single short one (a caption), ends the columns."""
    out: list[list[_Box]] = []
    for block in blocks:
        gutter = _gutter(out[-1], line_height) if out else None
        if gutter is not None and all(w.x1 <= gutter or w.x0 >= gutter for w in block):
            left, right = any(w.x1 <= gutter for w in block), any(w.x0 >= gutter for w in block)
            start = min(w.x0 for w in out[-1])
            if (left and right) or (left and len(_bands(block, 0.0)) >= 2
                                    and all(w.x0 >= start - line_height for w in block)):
                out[-1] = out[-1] + block
                continue
        out.append(block)
    return out


def _bands(words: list[_Box], min_gap: float) -> list[list[_Box]]:
    """Split at horizontal whitespace bands taller than `min_gap` (0: every line gap), top to
    bottom. Boxes count by their middle half, so touching lines still separate."""
    spans = sorted(words, key=lambda w: w.top + w.height / 4)
    bands: list[list[_Box]] = []
    reach = float("-inf")
    for word in spans:
        top, bottom = word.top + word.height / 4, word.bottom - word.height / 4
        if not bands or top - reach > min_gap:
            bands.append([])
        bands[-1].append(word)
        reach = max(reach, bottom)
    return bands


def _gutter(words: list[_Box], line_height: float) -> float | None:
    """The middle of the widest vertical gap that runs the whole height of `words`, is at least
    GUTTER line heights wide, and leaves a column of COLUMN_SHARE of the width on each side."""
    spans = sorted((w.x0, w.x1) for w in words)
    left, right = spans[0][0], max(x1 for _, x1 in spans)
    best, best_width = None, GUTTER * line_height
    reach = spans[0][1]
    for x0, x1 in spans[1:]:
        gap = x0 - reach
        if gap >= best_width and min(reach - left, right - x0) >= COLUMN_SHARE * (right - left):
            best, best_width = (reach + x0) / 2, gap
        reach = max(reach, x1)
    return best


def _line(words: list[_Box]) -> _Box:
    if len(words) == 1 and words[0].grid is not None:
        return words[0]  # a table: its own lines already
    words = sorted(words, key=lambda w: w.x0)
    return _Box(" ".join(w.text for w in words), min(w.x0 for w in words), min(w.top for w in words),
                max(w.x1 for w in words), max(w.bottom for w in words), size=min(w.size for w in words),
                bold=all(w.bold for w in words))


def _join_lines(lines: list[_Box]) -> str:
    """Lines joined by "\\n", paragraphs (a gap clearly above the page's line spacing, a jump
    back up or sideways to another column) by "\\n\\n"; a word hyphenated at a line end is
    rejoined when both halves are lowercase letters."""
    if not lines:
        return ""
    gaps = [b.top - a.bottom for a, b in pairwise(lines) if b.top >= a.bottom and b.x0 < a.x1 and a.x0 < b.x1]
    usual = median(gaps) if gaps else 0.0
    parts = [lines[0].text]
    for prev, line in pairwise(lines):
        new_column = line.top < prev.bottom - prev.height / 2 or line.x0 >= prev.x1 or line.x1 <= prev.x0
        if new_column or line.top - prev.bottom > usual + 0.6 * min(prev.height, line.height):
            parts += ["\n\n", line.text]
            continue
        head, tail = _WORD_SPLIT_LOWER.search(prev.text), _WORD_START.match(line.text)
        if head and head.group(1).islower() and tail and tail.group().islower():
            parts[-1] = parts[-1][:-1]
            parts.append(line.text)
        else:
            parts += ["\n", line.text]
    return "".join(parts)


def _running_lines(pages: list[list[_Box]], heights: list[float]) -> set[str]:
    """Keys of band lines that recur on at least half the pages of a document of 3 or more."""
    if len(pages) < 3:
        return set()
    counts: dict[str, int] = {}
    for lines, height in zip(pages, heights, strict=True):
        for key in {_key(line.text) for line in lines if _in_band(line, height)}:
            counts[key] = counts.get(key, 0) + 1
    return {key for key, count in counts.items() if count >= 2 and 2 * count >= len(pages)}


def _in_band(line: _Box, page_height: float) -> bool:
    return line.bottom <= BAND * page_height or line.top >= (1 - BAND) * page_height


def _key(text: str) -> str:
    return re.sub(r"\d+", "#", " ".join(text.split())).lower()


def _pdf_date(value: str) -> date | None:
    """A PDF date (`D:YYYYMMDDHHmmSS+hh'mm'`), leniently: month and day default to 1, and a
    value that is no date gives None."""
    match = _PDF_DATE.match(value)
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2) or 1), int(match.group(3) or 1))
    except ValueError:
        return None
