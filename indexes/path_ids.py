"""A file's default document id, made from its path below the source folder.

The id is the relative path with ':' between folders (an id is one URL segment: no '/'),
without the extension for Markdown and text files and with it for PDF, DOCX and HTML files
(`q3.pdf` and `q3.docx` are two documents). Real file names are not all valid ids, so the
path is made into one; a name that already gives a valid id in NFKC form keeps that id:

1. NFKC normalisation: macOS stores names decomposed (NFD), Linux as they were typed
   (usually composed), so one folder gives one set of ids on both;
2. each run of whitespace becomes one `_` (`Q3 report.pdf` -> `Q3_report.pdf`);
3. control, bidi, zero-width and other format characters, private-use and unassigned code
   points are dropped: in an id they hide or reorder what people and agents are shown;
4. a leading `#` becomes `_` (it would read as a URL fragment);
5. an id longer than MAX_DOC_ID_CHARS is cut, and `~` plus ID_HASH_CHARS hex digits of the
   SHA-256 of the whole id (stable: a rebuild gives the same id) end it, before a kept
   extension.

The result still goes through `check_doc_id`, the one id rule of every write path; a name it
refuses (one holding `\\`, say) makes the file a listed skip, not a stop of the ingest. Two
names that become one id are the ingest's duplicate-id error, naming both files.
"""

from __future__ import annotations

import hashlib
import unicodedata
from pathlib import PurePath

from retrieval.types import MAX_DOC_ID_CHARS

ID_HASH_CHARS = 10
_DROPPED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})  # after whitespace, which becomes '_'


def path_id(rel: PurePath, keep_suffix: bool) -> str:
    """The id of the file at `rel` below its source folder (not yet checked by check_doc_id)."""
    suffix = _clean(rel.suffix) if keep_suffix else ""
    base = _clean(":".join(rel.with_suffix("").parts))
    if base.startswith("#"):
        base = "_" + base[1:]
    whole = base + suffix
    if len(whole) <= MAX_DOC_ID_CHARS:
        return whole
    tag = "~" + hashlib.sha256(whole.encode("utf-8")).hexdigest()[:ID_HASH_CHARS]
    return base[: MAX_DOC_ID_CHARS - len(tag) - len(suffix)] + tag + suffix


def _clean(text: str) -> str:
    out: list[str] = []
    space = False
    for c in unicodedata.normalize("NFKC", text):
        if c.isspace():
            space = True
        elif unicodedata.category(c) not in _DROPPED:
            if space:
                out.append("_")
                space = False
            out.append(c)
    if space:
        out.append("_")
    return "".join(out)
