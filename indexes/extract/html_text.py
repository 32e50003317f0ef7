"""The main text of an HTML page, with regions by heading path (selectolax's lexbor parser).

Generic main-content extraction, with no rules fitted to one site: drop what is never content
(scripts, forms, embedded frames), the page's landmarks that are not its content (nav,
banner, contentinfo, complementary: by element, ARIA role, or the web's common class and id
names), hidden elements; read from `<main>`, else the single `<article>`, else `<body>`; and
drop blocks that are mostly link text (jusText's link density: Pomikálek 2011, "Removing
boilerplate and duplicate content from web corpora"), such as menus and related-post lists.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from selectolax.lexbor import LexborHTMLParser, LexborNode

from indexes.extract.record import MAX_TEXT_CHARS, BadFile, Extracted
from indexes.extract.grids import grid_of, render
from indexes.extract.sections import Block, assemble

_NEVER_CONTENT = {"script", "style", "noscript", "template", "svg", "iframe", "button", "select", "nav", "aside"}
_LANDMARK_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search"}
_BOILERPLATE_NAMES = {
    "nav", "navbar", "navigation", "menu", "breadcrumb", "breadcrumbs", "footer", "sidebar", "cookie", "cookies",
    "banner", "share", "sharing", "social", "related", "advert", "advertisement", "ad", "ads", "sponsored",
    "skip-link", "skiplink", "pagination", "pager", "newsletter", "popup", "modal",
}
_PROTECTED = {"html", "body", "main", "article"}
# header and footer are the page's banner and contentinfo only outside these (HTML-ARIA).
_SCOPING = {"article", "aside", "main", "nav", "section"}
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details", "dialog", "div",
    "dl", "dt", "fieldset", "figcaption", "figure", "footer", "header", "hr", "legend", "li", "main", "ol", "p",
    "section", "summary", "table", "tbody", "tfoot", "thead", "ul", "html",
}
LINK_DENSITY = 0.5  # a block whose link text is over this share of its text is navigation
_DATE_KEYS = {"article:published_time", "date", "dc.date", "dc.date.issued"}
_META_KEYS = {"author": "author", "description": "description", "keywords": "keywords"}
_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
# WHATWG Encoding: these labels mean a superset, which is what such pages really hold.
_LABELS = {"iso-8859-1": "cp1252", "latin1": "cp1252", "latin-1": "cp1252", "ascii": "cp1252", "us-ascii": "cp1252",
           "gb2312": "gb18030", "gbk": "gb18030", "shift_jis": "cp932", "euc-kr": "cp949", "tis-620": "cp874"}
_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def extract_html(data: bytes, max_chars: int = MAX_TEXT_CHARS) -> Extracted:
    """A page's main text (blocks separated by blank lines), heading-path regions and its
    metadata. Raises BadFile when nothing is left after the boilerplate is removed, or when
    the page nests deeper than MAX_DEPTH."""
    text_in = decode_html(data)
    depth, tags = nesting_bound(text_in)
    if tags > MAX_TAGS:
        raise BadFile("too_large", f"about {tags} tags, over {MAX_TAGS} (no page needs that many)")
    if depth > MAX_DEPTH:
        raise BadFile("too_large", f"elements nested about {depth} deep, over {MAX_DEPTH} (no page needs that; "
                                   "parsing it would take time that grows with the square of the depth)")
    tree = LexborHTMLParser(text_in)
    metadata = _metadata(tree)
    _drop_boilerplate(tree)
    root = tree.css_first("main") or tree.css_first("[role=main]")
    if root is None:
        articles = tree.css("article")
        root = articles[0] if len(articles) == 1 else tree.body
    blocks = _blocks(root) if root is not None else []
    if not blocks and tree.body is not None and (root is None or root.mem_id != tree.body.mem_id):
        blocks = _blocks(tree.body)  # a <main> with nothing readable in it: the page's layout fooled the rule
    got = assemble(blocks)
    text, regions = got.text, got.regions
    if not text:
        raise BadFile("no_body_text", "no body text once navigation, headers, footers and link lists are removed")
    if len(text) > max_chars:
        raise BadFile("too_large", f"the text has {len(text)} characters, over {max_chars}")
    title = metadata.pop("title", None) or next((b.text for b in blocks if b.level == 1), None)
    published = metadata.pop("date", None)
    if published is None and root is not None:
        stamp = root.css_first("time[datetime]")
        published = _iso_date(stamp.attributes.get("datetime") or "") if stamp is not None else None
    return Extracted(text=text, regions=regions, title=title,
                     date=date.fromisoformat(published) if published else None, metadata=metadata, tables=got.tables)


# Lexbor's tree building slows with the square of the open elements' depth (30,000 nested divs:
# 2.2 s; 60,000: 8.7 s), and a 1 MiB body holds 90,000. Browsers cap the DOM's depth at a few
# hundred (Blink: 512); real pages stay under a hundred.
MAX_DEPTH = 4096
MAX_TAGS = 250_000  # a 1 MiB page of real markup holds a few tens of thousands
# A tag's attributes stop at the next `<` as well as at `>`: a run of unclosed `<a` is then
# scanned once, not once per `<` to the end of the page.
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:-]*)[^<>]*?(/?)>")
_FOREIGN = {"svg", "math"}
# Elements a parser closes by itself (a new <p>, <li>, <td> ends the open one) or that hold
# nothing: counting them would take a sloppy page for a deep one.
_SELF_CLOSING = {
    "p", "li", "td", "th", "tr", "dt", "dd", "option", "optgroup", "rb", "rt", "rp", "tbody", "thead", "tfoot",
    "colgroup", "caption", "head", "body", "html", "area", "base", "br", "col", "embed", "hr", "img", "input",
    "link", "meta", "source", "track", "wbr", "param", "keygen", "frame",
}


def nesting_bound(html: str) -> tuple[int, int]:
    """An upper bound of the page's element depth, and its number of tags, in one linear pass
    over its tags (elements a parser closes by itself left out). A trailing `/` closes an
    element only inside `<svg>` or `<math>`: HTML ignores it, so `<div/>` opens a div."""
    depth = deepest = tags = foreign = 0
    for closing, name, empty in _TAG.findall(html):
        tags += 1
        lower = name.lower()
        if lower in _FOREIGN:
            foreign = max(foreign - 1, 0) if closing else foreign + (not empty)
        if (empty and (foreign or lower in _FOREIGN)) or lower in _SELF_CLOSING:
            continue
        depth = max(depth - 1, 0) if closing else depth + 1
        deepest = max(deepest, depth)
    return deepest, tags


def decode_html(data: bytes) -> str:
    """Bytes to text as a browser would, never failing: a BOM, else a `<meta>` charset in the
    first 2 KB, else UTF-8, else windows-1252 (WHATWG: latin-1 and ASCII labels mean it too)."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(codec, errors="replace")
    declared = _CHARSET.search(data[:2048])
    if declared:
        name = declared.group(1).decode("ascii").lower()
        name = _LABELS.get(name, name)
        if not name.startswith(("utf-16", "utf-32", "utf16", "utf32")):  # no BOM: the label is wrong
            try:
                return data.decode(name, errors="replace")
            except Exception:  # an unknown label, or a Python codec that is no text encoding (zlib, hex)
                pass
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _metadata(tree: LexborHTMLParser) -> dict[str, str]:
    """title, date (ISO), author, description, keywords, language, url: each only when present."""
    found: dict[str, str] = {}
    head = tree.head
    title = head.css_first("title") if head is not None else None
    if title is not None and _collapse(title.text()):
        found["title"] = _collapse(title.text())
    for meta in tree.css("meta"):
        attrs = meta.attributes
        key = (attrs.get("name") or attrs.get("property") or "").strip().lower()
        content = _collapse(attrs.get("content") or "")
        if not content:
            continue
        if key == "og:title":
            found.setdefault("title", content)
        elif key in _DATE_KEYS and _iso_date(content):
            found.setdefault("date", _iso_date(content) or "")
        elif key in _META_KEYS:
            found.setdefault(_META_KEYS[key], content)
    html_node = tree.css_first("html")
    if html_node is not None and _collapse(html_node.attributes.get("lang") or ""):
        found["language"] = _collapse(html_node.attributes.get("lang") or "")
    for link in tree.css("link[rel][href]"):
        if "canonical" in (link.attributes.get("rel") or "").lower().split() and (link.attributes.get("href") or "").strip():
            found["url"] = (link.attributes.get("href") or "").strip()
            break
    return found


def _drop_boilerplate(tree: LexborHTMLParser) -> None:
    """Remove never-content elements, landmarks, hidden elements and boilerplate-named ones.
    One pass down the body (a removed node's subtree is not visited: removing frees it) over
    text sizes counted in one pass up, so a deeply nested page costs linear time."""
    if tree.body is None:
        return
    nodes: list[tuple[Any, int]] = []  # (node, parent's index), parents first
    stack: list[tuple[Any, int]] = [(tree.body, -1)]
    while stack:
        node, parent = stack.pop()
        nodes.append((node, parent))
        if node.is_element_node:
            stack += [(child, len(nodes) - 1) for child in node.iter(include_text=True)]
    size, holds_main = [0] * len(nodes), [False] * len(nodes)
    for i in range(len(nodes) - 1, 0, -1):
        node, parent = nodes[i]
        if node.is_text_node:
            size[i] = len(node.text_content or "")
        elif node.tag in ("script", "style", "template", "noscript"):
            size[i] = 0
        holds_main[i] |= node.tag in ("main", "article") or (node.attributes.get("role") or "") == "main"
        size[parent] += size[i]
        holds_main[parent] |= holds_main[i]
    gone, scoped = [False] * len(nodes), [False] * len(nodes)
    for i, (node, parent) in enumerate(nodes[1:], start=1):
        gone[i] = gone[parent]
        if gone[i] or not node.is_element_node:
            continue
        scoped[i] = scoped[parent] or node.tag in _SCOPING
        # A wrapper that holds the page (`<div class="has-sidebar">`, an ASP.NET page's one form) stays.
        wrapper = holds_main[i] or size[i] > size[0] / 2
        if _boilerplate(node, node.tag or "", scoped[parent], wrapper):
            gone[i] = True
            node.decompose()


def _boilerplate(node: LexborNode, tag: str, scoped: bool, wrapper: bool) -> bool:
    if tag in _NEVER_CONTENT or (tag == "form" and not wrapper):
        return True
    if tag in ("header", "footer") and not scoped:  # the page's banner and contentinfo (HTML-ARIA)
        return True
    attrs = node.attributes
    if ((attrs.get("role") or "").strip().lower() in _LANDMARK_ROLES or "hidden" in attrs
            or (attrs.get("aria-hidden") or "").strip().lower() == "true" or _HIDDEN_STYLE.search(attrs.get("style") or "")):
        return True
    if tag in _PROTECTED or wrapper:
        return False
    tokens = f"{attrs.get('class') or ''} {attrs.get('id') or ''}".lower().split()
    return any(token in _BOILERPLATE_NAMES or any(part in _BOILERPLATE_NAMES for part in re.split(r"[-_]", token))
               for token in tokens)


def _blocks(root: LexborNode) -> list[Block]:
    """Blocks in document order: headings, paragraphs, list items, `pre` (whitespace kept),
    table rows (cells joined " | ") and text directly inside containers; inline whitespace
    collapsed. Iterative, so a deeply nested page cannot exhaust the stack."""
    blocks: list[Block] = []
    buffer: list[str] = []
    linked: list[str] = []

    def flush() -> None:
        text = _collapse("".join(buffer))
        if text and _dense(text, _collapse("".join(linked))) <= LINK_DENSITY:
            blocks.append(Block(text))
        buffer.clear()
        linked.clear()

    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, in_link = stack.pop()
        if node is None:
            flush()
        elif node.is_text_node:
            buffer.append(node.text_content or "")
            if in_link:
                linked.append(node.text_content or "")
        elif node.is_element_node:
            tag = node.tag or ""
            if tag in _HEADINGS or tag in ("pre", "tr"):
                flush()
                blocks += _special(node, tag)
            elif tag == "table" and (table := _table_block(node)) is not None:
                flush()
                blocks.append(table)
            elif tag == "br":
                buffer.append(" ")
            elif tag in _BLOCKS:
                flush()
                stack.append((None, False))
                stack += [(child, in_link) for child in reversed(list(node.iter(include_text=True)))]
            else:
                link = in_link or tag == "a"
                stack += [(child, link) for child in reversed(list(node.iter(include_text=True)))]
    flush()
    return blocks


def _special(node: LexborNode, tag: str) -> list[Block]:
    """A heading, a `pre` block or a table row as one block (a link-dense row is dropped)."""
    if tag in _HEADINGS:
        return [Block(_collapse(node.text()), _HEADINGS[tag])]
    if tag == "pre":
        return [Block(node.text().strip("\n"))]
    cells = [_collapse(cell.text()) for cell in node.iter() if cell.tag in ("td", "th")]
    row = " | ".join(cell for cell in cells if cell)
    links = _collapse(" ".join(a.text() for a in node.css("a")))
    return [Block(row)] if row and _dense(row, links) <= LINK_DENSITY else []


def _table_block(table: LexborNode) -> Block | None:
    """A data table as a grid read in its rendering (indexes/extract/grids.py); None for a
    table that is no grid or mostly links (a layout or navigation table, read row by row).
    Rows of a nested table belong to it, not to this one; a cell spanning columns repeats."""
    rows: list[list[str]] = []
    header_rows = 0
    for tr in table.css("tr"):
        owner = tr.parent
        while owner is not None and owner.tag != "table":
            owner = owner.parent
        if owner is None or owner.mem_id != table.mem_id:
            continue
        row: list[str] = []
        heads = True
        for cell in tr.iter():
            if cell.tag not in ("td", "th"):
                continue
            heads = heads and (cell.tag == "th" or (cell.parent is not None and cell.parent.parent is not None
                                                    and cell.parent.parent.tag == "thead"))
            try:
                span = max(1, min(int((cell.attributes.get("colspan") or "1").strip()), 64))
            except ValueError:
                span = 1
            row += [_collapse(cell.text())] * span
        if row:
            header_rows += heads and len(rows) == header_rows
            rows.append(row)
    grid = grid_of(rows, header_marked=header_rows >= 1)
    if grid is None:
        return None
    text = "\n".join(render(grid))
    links = _collapse(" ".join(a.text() for a in table.css("a")))
    return Block(text, grid=grid) if text and _dense(text, links) <= LINK_DENSITY else None


def _dense(text: str, link_text: str) -> float:
    """The share of a block's non-space characters that sit inside links (both texts collapsed)."""
    chars = len(text) - text.count(" ")
    return (len(link_text) - link_text.count(" ")) / chars if chars else 0.0


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _iso_date(value: str) -> str | None:
    match = _ISO_DATE.search(value)
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3))).isoformat()
    except ValueError:
        return None
