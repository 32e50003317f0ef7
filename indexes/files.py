"""PDF, DOCX and HTML files as documents: extraction, the metadata people attach to them, and
what a bad file does to an ingest.

Files carry no front matter, so their ACL and metadata come from beside them:

- a sidecar `<file>.meta.json` (`{"id", "title", "source", "date", "metadata", "acl"}`, each
  optional) says it for one file;
- a folder manifest `quarry.manifest.json` (`{"files": [{"match": GLOB, "acl", "source",
  "date", "metadata"}, ...]}`) says it for the files below its folder that a glob matches
  (fnmatch on the path relative to the manifest's folder, `*` crossing folders). Entries
  apply in order and manifests from the outermost folder in; a later one overrides an
  earlier one's fields and adds to its metadata.

The file's own metadata (PDF info, DOCX core properties, HTML `<title>` and meta) is the
weakest; manifests override it and a sidecar overrides both. A Markdown file's front matter
overrides manifests; a field both its front matter and its sidecar set is an error (two
statements of one fact, neither visibly the one in force). A file nothing gives an ACL gets
the ingest default (admins only unless said otherwise). JSONL lines carry their own fields.

Sidecars and manifests are read like every source file (indexes/source_files.py): a regular
file inside the folder, never through a link. One that is a link or a FIFO stops the ingest
(the ACL it states cannot be known, and a file must not fall back to the default). A
manifest's `match` cannot reach outside its folder: an absolute glob or a `..` segment is
refused.

A bad file (encrypted, corrupt, a scan without a text layer, a DOCX that is not one, HTML
without body text) stops the ingest by default, naming the file and the reason, like a
malformed JSONL line: nothing is published. With `skip_bad` it is left out and listed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

from indexes.extract.grids import FoundGrids
from indexes.extract.record import MAX_TEXT_CHARS, BadFile, Extracted
from indexes.extract.sandbox import Budget, ExtractorPool
from indexes.source_files import FileTooLarge, list_folder, read_regular
from indexes.stated_date import with_stated_date
from retrieval.errors import IngestError

FileKind = Literal["pdf", "docx", "html"]
FILE_SUFFIXES: dict[str, FileKind] = {".pdf": "pdf", ".docx": "docx", ".html": "html", ".htm": "html"}
CONTENT_TYPES: dict[str, FileKind] = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "text/html": "html",
    "application/xhtml+xml": "html",
}
SIDECAR_SUFFIX = ".meta.json"
MANIFEST_NAME = "quarry.manifest.json"
SIDECAR_FIELDS = frozenset({"id", "title", "source", "date", "metadata", "acl"})
MANIFEST_FIELDS = frozenset({"match", "source", "date", "metadata", "acl"})
MAX_META_BYTES = 1 << 20  # a sidecar or manifest is configuration, not content
MAX_FILE_BYTES = 256 * 1024 * 1024  # a PDF, DOCX or HTML file is read whole to extract it: larger is too_large
CACHE_CHARS = 64_000_000  # extracted text kept between an ingest's passes (beyond it, files are read again)


def extract(data: bytes, kind: FileKind, max_chars: int = MAX_TEXT_CHARS, ocr: bool = False) -> Extracted:
    """The text, regions and metadata of one file's bytes; raises BadFile for a file that
    gives no document, or whose bytes are another kind than it is declared as (the same code
    serves an ingest and a live PUT, inside an extraction worker: indexes/extract/sandbox.py).
    `ocr`: a PDF page without a text layer is read by OCR (indexes/extract/ocr.py)."""
    check_kind(data, kind)
    if kind == "pdf":
        from indexes.extract.pdf_text import extract_pdf

        return extract_pdf(data, max_chars, ocr)
    if kind == "docx":
        from indexes.extract.docx_text import extract_docx

        return extract_docx(data, max_chars)
    from indexes.extract.html_text import extract_html

    return extract_html(data, max_chars)


PDF_MAGIC = b"%PDF-"
ZIP_MAGIC = b"PK\x03\x04"
OLE_MAGIC = bytes.fromhex("D0CF11E0A1B11AE1")  # an encrypted OOXML file, or a legacy Office file
_TEXT_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")


def sniffed(data: bytes) -> str:
    """What the bytes are, by their signature: pdf (`%PDF-` in the first KiB, as readers
    allow), zip, ole, binary (NUL bytes in the first 8 KiB of a file without a UTF-16/32
    byte order mark) or text."""
    if PDF_MAGIC in data[:1024]:
        return "pdf"
    if data.startswith(ZIP_MAGIC):
        return "zip"
    if data.startswith(OLE_MAGIC):
        return "ole"
    if b"\x00" in data[:8192] and not data.startswith(_TEXT_BOMS):
        return "binary"
    return "text"


def check_kind(data: bytes, kind: FileKind) -> None:
    """Refuse bytes that are not the declared kind (a PDF or a Word file sent as HTML would be
    stored and served as its raw bytes)."""
    found = sniffed(data)
    if kind == "pdf" and found != "pdf":
        raise BadFile("mismatched_type", f"declared a PDF, but the bytes are {_KIND_NAMES[found]} (no %PDF- header)")
    if kind == "docx" and found not in ("zip", "ole"):
        raise BadFile("not_docx", f"declared a .docx, but the bytes are {_KIND_NAMES[found]}, not a zip archive")
    if kind == "html" and found != "text":
        raise BadFile("mismatched_type", f"declared HTML, but the bytes are {_KIND_NAMES[found]}: send such a file "
                                         "under its own type")


_KIND_NAMES = {"pdf": "a PDF", "zip": "a zip archive (a .docx?)", "ole": "an OLE compound file (an Office file)",
               "binary": "binary data", "text": "text"}


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason, "message": self.message}


@dataclass
class FileReader:
    """One ingest's reading of its files: each extracted once (an ingest reads its sources in
    two passes; extracted text is kept up to CACHE_CHARS), manifests parsed once, and bad
    files either stopping the ingest or collected in `skipped`."""

    skip_bad: bool = False
    strict_fields: bool = False  # a Markdown front matter's keys outside the document fields stop the ingest (else: metadata)
    ocr: bool = False  # a PDF page without a text layer is read by OCR (indexes/extract/ocr.py)
    markdown_sections: bool = False  # a Markdown file's headings make its regions (indexes/markdown_sections.py)
    extract_timeout_s: float | None = None  # one file's extraction at most in its own pool (None: the sandbox's default)
    skipped: dict[str, Skipped] = field(default_factory=dict)
    file_dates: dict[Path, str] = field(default_factory=dict)  # files dated by their own metadata only (`file_record`)
    pool: ExtractorPool | None = None  # where files are extracted (default: one worker of its own, made on first use)
    roots: set[Path] = field(default_factory=set)  # the source folders: below them, files are read following no link
    grids: dict[str, FoundGrids] = field(default_factory=dict)  # tables found inside the files read (indexes/tables.py)
    _cache: dict[tuple[str, int, int], Extracted] = field(default_factory=dict, repr=False)
    _cached_chars: int = field(default=0, repr=False)
    _manifests: dict[Path, list[dict[str, Any]]] = field(default_factory=dict, repr=False)
    _sidecars: dict[Path, dict[str, Any]] = field(default_factory=dict, repr=False)
    _made_pool: bool = field(default=False, repr=False)

    def extract(self, path: Path) -> Extracted | None:
        """The file's extraction, or None when it is bad and skipped; raises IngestError naming
        the file when it is bad and the ingest stops on bad files."""
        if str(path) in self.skipped:
            return None  # a bad file is extracted once too, not again in the next pass
        try:
            st = path.stat()
            key = (str(path), st.st_size, st.st_mtime_ns)
            got = self._cache.get(key)
            if got is None:
                got = self._pool().extract(self._bytes(path), FILE_SUFFIXES[path.suffix.lower()])
                if self._cached_chars + len(got.text) <= CACHE_CHARS:
                    self._cache[key] = got
                    self._cached_chars += len(got.text)
            return got
        except OSError as e:
            raise IngestError(f"cannot read file: {e.strerror}", str(path)) from None
        except BadFile as e:
            if not self.skip_bad:
                raise IngestError(f"{e.reason}: {e.message} (--skip-bad-files leaves such files out and lists them)",
                                  str(path)) from None
            self.skipped[str(path)] = Skipped(str(path), e.reason, e.message)
            return None

    def _pool(self) -> ExtractorPool:
        if self.pool is None:
            budget = Budget() if self.extract_timeout_s is None else replace(Budget(), seconds=self.extract_timeout_s)
            self.pool, self._made_pool = ExtractorPool(workers=1, per_owner=1, budget=budget, ocr=self.ocr), True
        return self.pool

    def close(self) -> None:
        """Stop the extraction worker this reader made (one it was given stays its owner's)."""
        if self.pool is not None and self._made_pool:
            self.pool.close()

    def _bytes(self, path: Path) -> bytes:
        """The file's bytes, opened beneath its source folder without following a link (one
        swapped in after the folder was listed is refused), at most MAX_FILE_BYTES of them."""
        root = max((r for r in self.roots if r in path.parents), key=lambda r: len(r.parts), default=None)
        try:
            return read_regular(path, MAX_FILE_BYTES, root)
        except FileTooLarge as e:
            raise BadFile("too_large", str(e.strerror)) from None

    def overrides(self, path: Path, root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """(what the folder manifests say of `path`, what its sidecar says), each a record of
        document fields; metadata of later statements is merged over earlier ones."""
        merged: dict[str, Any] = {}
        folder = path.parent
        chain = [folder, *folder.parents]
        for d in reversed(chain[: len(path.relative_to(root).parts)]):  # root first, the file's folder last
            for entry in self._manifest(d, root):
                if fnmatch.fnmatchcase(path.relative_to(d).as_posix(), entry["match"]):
                    merged = merge_fields(merged, {k: v for k, v in entry.items() if k != "match"})
        sidecar = self._sidecars.get(path)
        if sidecar is None:
            sidecar = self._sidecars[path] = read_sidecar(path, root)
        return merged, sidecar

    def _manifest(self, folder: Path, root: Path) -> list[dict[str, Any]]:
        got = self._manifests.get(folder)
        if got is None:
            got = self._manifests[folder] = read_manifest(folder / MANIFEST_NAME, root)
        return got


DateSource = Literal["given", "stated", "file"]
# The first day each format existed: a file's own date before it is a tool's placeholder.
FORMAT_SINCE: dict[FileKind, date] = {"pdf": date(1993, 6, 15), "docx": date(2006, 11, 6), "html": date(1991, 8, 6)}
SAME_DATE_FILES = 3  # this many files of one folder, all with one metadata date, and no other: a stamp, not dates


def file_record(fields: dict[str, Any], overrides: Sequence[dict[str, Any]], text: str,
                headings: Sequence[str] = ()) -> tuple[dict[str, Any], DateSource | None]:
    """A file's document fields and where its date came from. The file's own fields first,
    each of `overrides` (folder manifests, then its sidecar; a PUT's query) over them. The
    date, in this order: one the overrides give (`given`); else the file's own metadata
    (`file`: PDF CreationDate, DOCX created, HTML meta or `<time>`), which an ingest reports
    when it looks like a tool's stamp (`date_warnings`); else the day the page states at its
    top (`stated`, indexes/stated_date.py)."""
    own = fields.get("date")
    record = {k: v for k, v in fields.items() if k != "date"}
    for over in overrides:
        record = merge_fields(record, over)
    if record.get("date") not in (None, ""):
        return record, "given"
    if own not in (None, ""):
        return {**record, "date": own}, "file"
    stated = with_stated_date(record, text, headings)
    return (stated, "stated") if stated.get("date") not in (None, "") else (record, None)


def date_warnings(file_dates: dict[Path, str], today: date) -> list[dict[str, Any]]:
    """The file metadata dates not to trust silently (each file's date came from its own
    metadata, `file_dates`): one date on every such file of a folder (at least
    SAME_DATE_FILES of them), a date before its format existed, or after `today`."""
    out: list[dict[str, Any]] = []
    folders: dict[Path, list[Path]] = {}
    for path in sorted(file_dates):
        folders.setdefault(path.parent, []).append(path)
    for folder, paths in folders.items():
        days = {file_dates[p] for p in paths}
        if len(paths) >= SAME_DATE_FILES and len(days) == 1:
            out.append({"reason": "same_date", "date": next(iter(days)), "files": [str(p) for p in paths],
                        "message": f"all {len(paths)} files of {folder} dated by their own metadata carry {next(iter(days))}: "
                                   "a tool's stamp, not their dates? Set dates in a manifest or sidecars"})
    for path in sorted(file_dates):
        day = date.fromisoformat(file_dates[path][:10])
        kind = FILE_SUFFIXES.get(path.suffix.lower())
        if kind is not None and day < FORMAT_SINCE[kind]:
            out.append({"reason": "before_format", "date": file_dates[path], "files": [str(path)],
                        "message": f"{path}'s own metadata dates it {day}, before its format existed"})
        elif day > today:
            out.append({"reason": "future", "date": file_dates[path], "files": [str(path)],
                        "message": f"{path}'s own metadata dates it {day}, after today"})
    return out


def merge_fields(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = {**base, **over}
    if isinstance(base.get("metadata"), dict) and isinstance(over.get("metadata"), dict):
        out["metadata"] = {**base["metadata"], **over["metadata"]}
    return out


def _read_json(path: Path, root: Path | None) -> Any:
    try:
        raw = read_regular(path, MAX_META_BYTES, root)
    except FileTooLarge:
        raise IngestError(f"larger than {MAX_META_BYTES} bytes", str(path)) from None
    except OSError as e:
        raise IngestError(f"cannot read file: {e.strerror}", str(path)) from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise IngestError(f"not UTF-8 text ({e.reason} at byte {e.start})", str(path)) from None
    except json.JSONDecodeError as e:
        raise IngestError(f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}", str(path), e.lineno) from None


def read_sidecar(path: Path, root: Path | None = None) -> dict[str, Any]:
    """The sidecar of `path` (empty when it has none; a name too long to have one has none);
    unknown fields are refused. Read beneath `root` without following links."""
    side = path.with_name(path.name + SIDECAR_SUFFIX)
    if not os.path.lexists(side):
        return {}
    record = _read_json(side, root)
    if not isinstance(record, dict):
        raise IngestError("a sidecar must be a JSON object of document fields", str(side))
    unknown = set(record) - SIDECAR_FIELDS
    if unknown:
        raise IngestError(f"unknown fields {sorted(unknown)}; allowed: {sorted(SIDECAR_FIELDS)}", str(side))
    return record


def read_manifest(path: Path, root: Path | None = None) -> list[dict[str, Any]]:
    """A folder manifest's entries (none when the folder has no manifest), checked for shape;
    the fields' values are checked with the document they apply to. Read beneath `root`
    without following links."""
    if not os.path.lexists(path):
        return []
    record = _read_json(path, root)
    if not isinstance(record, dict) or set(record) != {"files"} or not isinstance(record["files"], list):
        raise IngestError('a manifest must be {"files": [{"match": GLOB, ...}, ...]}', str(path))
    entries = []
    for n, entry in enumerate(record["files"], start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("match"), str) or not entry["match"].strip():
            raise IngestError(f"entry {n} must be an object with a non-empty string 'match' (a glob)", str(path))
        if entry["match"].startswith(("/", "\\")) or ".." in entry["match"].replace("\\", "/").split("/"):
            raise IngestError(f"entry {n}: 'match' is relative to the manifest's folder and stays inside it "
                              "(no leading '/', no '..')", str(path))
        unknown = set(entry) - MANIFEST_FIELDS
        if unknown:
            raise IngestError(f"entry {n}: unknown fields {sorted(unknown)}; allowed: {sorted(MANIFEST_FIELDS)}", str(path))
        if "metadata" in entry and not isinstance(entry["metadata"], dict):
            raise IngestError(f"entry {n}: metadata must be an object", str(path))
        entries.append(entry)
    return entries


def orphan_sidecars(files: Iterable[Path]) -> list[Path]:
    """The sidecars among a folder's `files` whose file is missing: a renamed file would
    otherwise lose its ACL silently (a file that is there but never read, a link say, is not
    missing: it is listed as skipped)."""
    return sorted(p for p in files
                  if p.name.endswith(SIDECAR_SUFFIX) and not _is_entry(p.with_name(p.name[: -len(SIDECAR_SUFFIX)])))


def _is_entry(path: Path) -> bool:
    """A file of any kind but a folder, not followed if a link."""
    try:
        return not stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def config_files(folder: Path) -> list[Path]:
    """The sidecars and manifests under `folder`: an ingest notices one changed between passes."""
    return [p for p in list_folder(folder).files if p.name == MANIFEST_NAME or p.name.endswith(SIDECAR_SUFFIX)]
