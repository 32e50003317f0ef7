"""DOCX body text in document order, with regions by heading path (python-docx).

Paragraphs and tables are read in the body's order (python-docx's `paragraphs` and `tables`
lists would separate them). A heading is known by its style name ("Heading 1".."Heading 9",
"Title") or by an outline level on the paragraph or its style chain, so renamed or localized
heading styles still count. Page headers and footers are separate parts and are left out as
boilerplate.
"""

from __future__ import annotations

import io
import itertools
import re
import zipfile
from typing import Any, Iterator

import docx
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.oxml.ns import qn

from indexes.extract.record import MAX_TEXT_CHARS, BadFile, Extracted
from indexes.extract.zip_bounds import check_archive
from indexes.extract.grids import grid_of, render
from indexes.extract.sections import Block, assemble

OLE_MAGIC = bytes.fromhex("D0CF11E0A1B11AE1")  # an encrypted OOXML file is an OLE compound file
MAX_BLOCKS = 200_000  # paragraphs and tables of one body (a 2,000-page book holds fewer)
_HEADING_NAME = re.compile(r"heading\s*([1-9])", re.IGNORECASE)
_BODY_LEVEL = 9  # w:outlineLvl 9 is body text; 0..8 are heading levels 1..9
# Runs of a paragraph, tracked insertions and hyperlinks included; text boxes are separate blocks
# of a drawing (and repeat in their fallback copy), deleted text has no w:t to read.
_RUNS = ".//w:r[not(ancestor::w:txbxContent)]"


def extract_docx(data: bytes, max_chars: int = MAX_TEXT_CHARS) -> Extracted:
    """A Word document's body text, heading-path regions and core properties. Raises BadFile
    for a file that is not a zip, an encrypted or non-Word file, a zip bomb or no text."""
    if data[:8] == OLE_MAGIC:
        raise BadFile("encrypted", "an OLE compound file: a password-protected Office file (or a legacy .doc); "
                                   "save it as an unprotected .docx")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except Exception as error:  # zipfile raises several types on garbage; all mean "not a zip"
        raise BadFile("not_docx", f"not a zip archive, so not a .docx ({error})") from error
    check_archive(infos)
    try:
        document = docx.Document(io.BytesIO(data))
        levels = _style_levels(document)
        if len(document.element.body) > MAX_BLOCKS:  # counted in C before any is read
            raise BadFile("too_large", f"the body holds {len(document.element.body)} paragraphs and tables, over "
                                       f"{MAX_BLOCKS}")
        blocks = list(itertools.islice(_blocks(document.element.body, levels), MAX_BLOCKS + 1))
        if len(blocks) > MAX_BLOCKS:  # content controls open into more
            raise BadFile("too_large", f"the body holds more than {MAX_BLOCKS} paragraphs and tables")
        core = _core_properties(document)
    except BadFile:
        raise
    except Exception as error:  # python-docx on a zip that is no Word document: any failure is the file's
        raise BadFile("corrupt", f"not a readable Word document: {type(error).__name__}: {error}") from error
    got = assemble(blocks)
    text, regions, tables = got.text, got.regions, got.tables
    if not text:
        raise BadFile("no_text", "the document body has no text (page headers and footers are not read)")
    if len(text) > max_chars:
        raise BadFile("too_large", f"the text has {len(text)} characters, over {max_chars}")
    title = _clean(core["title"]) or next((_clean(b.text) for b in blocks if b.level == 0 and b.text), None)
    metadata = {name: _clean(core[name]) for name in ("author", "subject", "keywords", "category") if _clean(core[name])}
    if core["modified"] is not None:
        metadata["modified"] = core["modified"].date().isoformat()
    created = core["created"].date() if core["created"] is not None else None
    return Extracted(text=text, regions=regions, title=title, date=created, metadata=metadata, tables=tables)


_CORE = ("title", "author", "subject", "keywords", "category", "created", "modified")


def _core_properties(document: Any) -> dict[str, Any]:
    """The file's own core properties, all None when it has none: python-docx then makes up
    defaults (title "Word Document", modified now) that would pass for the file's."""
    try:
        document.part.package.part_related_by(RT.CORE_PROPERTIES)
    except KeyError:
        return dict.fromkeys(_CORE)
    props = document.core_properties
    return {name: getattr(props, name) for name in _CORE}


def _clean(value: Any) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""


def _blocks(container: Any, levels: dict[str, int]) -> Iterator[Block]:
    """The body's paragraphs and tables in order; content controls and custom XML are opened."""
    for child in container.iterchildren():
        if child.tag == qn("w:p"):
            yield Block(_paragraph_text(child).strip(), _paragraph_level(child, levels))
        elif child.tag == qn("w:tbl"):
            yield _table_block(child)
        elif child.tag == qn("w:sdt"):
            for content in child.iterchildren(qn("w:sdtContent")):
                yield from _blocks(content, levels)
        elif child.tag == qn("w:customXml"):
            yield from _blocks(child, levels)


def _table_block(tbl: Any) -> Block:
    """A table as a grid (indexes/extract/grids.py) read in its rendering, or, when it is no
    grid (one column, one row), its rows with cells joined " | "."""
    cells: list[list[str]] = []
    above: list[str] = []
    for tr in tbl.iterchildren(qn("w:tr")):
        row: list[str] = []
        for tc in tr.iterchildren(qn("w:tc")):
            props = tc.find(qn("w:tcPr"))
            span, merged = 1, False
            if props is not None:
                grid_span = props.find(qn("w:gridSpan"))
                v_merge = props.find(qn("w:vMerge"))
                try:
                    span = max(1, min(int(grid_span.get(qn("w:val"), "1")), 64)) if grid_span is not None else 1
                except ValueError:
                    span = 1
                merged = v_merge is not None and v_merge.get(qn("w:val"), "continue") == "continue"
            text = above[len(row)] if merged and len(row) < len(above) else _cell_text(tc)
            row += [text] * span
        cells.append(row)
        above = row
    first = next(tbl.iterchildren(qn("w:tr")), None)
    marked = first is not None and first.find(f"{qn('w:trPr')}/{qn('w:tblHeader')}") is not None
    grid = grid_of(cells, header_marked=marked)
    if grid is not None:
        return Block("\n".join(render(grid)), grid=grid)
    rows = [" | ".join(cell for cell in row if cell) for row in cells]
    return Block("\n".join(row for row in rows if row))


def _paragraph_text(p: Any) -> str:
    return "".join(run.text for run in p.xpath(_RUNS))


def _cell_text(tc: Any) -> str:
    """A cell's paragraphs (nested tables' too) on one line."""
    return " ".join(" ".join(_paragraph_text(p).split()) for p in tc.xpath(".//w:p[not(ancestor::w:txbxContent)]")
                    ).strip()


def _outline_level(element: Any) -> int | None:
    """`w:pPr/w:outlineLvl` of a paragraph or style, as a heading level 1..9 (None: none set,
    _BODY_LEVEL + 1: explicitly body text)."""
    found = element.find(f"{qn('w:pPr')}/{qn('w:outlineLvl')}")
    if found is None:
        return None
    try:
        return min(int(found.get(qn("w:val"), _BODY_LEVEL)), _BODY_LEVEL) + 1
    except ValueError:
        return None


def _paragraph_level(p: Any, levels: dict[str, int]) -> int | None:
    own = _outline_level(p)
    if own is not None:
        return own if own <= _BODY_LEVEL else None
    style = p.find(f"{qn('w:pPr')}/{qn('w:pStyle')}")
    if style is None:
        return None
    style_id = style.get(qn("w:val"), "")
    return levels[style_id] if style_id in levels else _level_by_id(style_id)


def _level_by_id(style_id: str) -> int | None:
    """A heading level read from a style id the styles part does not define ("Heading2",
    "Title"): some generators write the paragraphs' style ids and leave the styles out."""
    if style_id.lower() == "title":
        return 0
    match = _HEADING_NAME.fullmatch(style_id)
    return int(match.group(1)) if match else None


def _style_levels(document: Any) -> dict[str, int]:
    """Heading level by paragraph style id: by name ("Title" 0, "Heading N" N), else by the
    outline level of the style or the styles it is based on."""
    levels: dict[str, int] = {}
    for style in document.styles:
        name = (style.name or "").strip()
        match = _HEADING_NAME.fullmatch(name)
        level = 0 if name.lower() == "title" else int(match.group(1)) if match else None
        base, depth = style, 0
        while level is None and base is not None and depth < 10:  # based-on chains can loop
            level = _outline_level(base.element)
            base, depth = getattr(base, "base_style", None), depth + 1
        if level is not None and level <= _BODY_LEVEL and style.style_id:
            levels[style.style_id] = level
    return levels
