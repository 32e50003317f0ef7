"""Load documents from JSONL, Markdown/text, PDF, DOCX and HTML files, validating as strictly
as an API would.

Every problem names its file and line; nothing is half-loaded. Accepted fields: `id` (or
BEIR's `_id`), `text`, `title`, `source`, `date` (ISO 8601), `metadata` (flat object), `acl`.
A document without `acl` gets the ingest default, which fails closed (admins only).
Defaults: `source` is the JSONL file's stem, or a file's folder name; a Markdown document's
`id` is its path relative to the source folder, folders joined by ':', without extension
(a PDF, DOCX or HTML file's keeps its extension: `q3.pdf` and `q3.docx` are two documents);
its `title` is the first `# heading` when the front matter has none, and its `date`, when
nothing gives it one, the full day its title or first lines state (indexes/stated_date.py).
Files' metadata, sidecars and folder manifests: indexes/files.py.

A folder's contents are untrusted: nothing outside it is read (links are not followed, FIFOs
and devices never opened, each listed as skipped: indexes/source_files.py), front matter is
parsed with bounds (indexes/front_matter.py), and every real file name becomes a valid id or
a listed skip, never a stop of the ingest (indexes/path_ids.py).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from datetime import date, datetime
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from indexes.extract.grids import FoundGrids
from indexes.extract.record import MAX_TEXT_CHARS
from indexes.files import FileReader, Skipped, file_record, merge_fields, orphan_sidecars
from indexes.markdown_sections import markdown_regions
from indexes.front_matter import EXCERPT_CHARS, excerpt, first_heading, split_front_matter
from indexes.path_ids import path_id
from indexes.stated_date import headings_of, with_stated_date
from indexes.source_files import FileTooLarge, check_source, list_folder, open_regular, read_regular, shown
from retrieval.errors import IngestError, InvalidRequest
from retrieval.types import Document, check_acl, check_doc_id

ADMIN_ONLY: tuple[str, ...] = ("group:admin",)
DOC_SUFFIXES = {".jsonl": "jsonl", ".md": "markdown", ".markdown": "markdown", ".txt": "text",
                ".pdf": "file", ".docx": "file", ".html": "file", ".htm": "file"}
TABLE_SUFFIXES = {".csv", ".parquet", ".xlsx"}
FIELDS = {"id", "_id", "text", "title", "source", "date", "metadata", "acl"}
MAX_TEXT_BYTES = 4 * MAX_TEXT_CHARS  # a Markdown or text file past it holds more characters than a document may
MAX_JSONL_LINE_BYTES = 32 * 1024 * 1024  # one JSONL document: its text JSON-escaped, and its fields
MAX_LISTED = 50  # bad files an ingest's error lists by name (it counts them all)
_LOGGED_ID_RE = re.compile(r"[^\s#][^\s]{0,255}")  # the id rule before check_doc_id, for changes logged then


@dataclass(frozen=True)
class LoadedDocument:
    doc: Document
    origin: str  # "path:line", kept in the catalog so an author can find the source


def discover(sources: Sequence[Path], skipped: dict[str, Skipped] | None = None
             ) -> tuple[list[tuple[Path, Path]], list[Path]]:
    """Split sources into (document files with their root, table files); walk folders sorted,
    following no link inside them. The entries never read (links, FIFOs, devices, names that
    are not UTF-8) go into `skipped` when it is given (an ingest lists them)."""
    docs: list[tuple[Path, Path]] = []
    tables: list[Path] = []
    for src in sources:
        check_source(src)
        if src.is_dir():
            listing = list_folder(src)
            orphans = orphan_sidecars(listing.files)
            if orphans:
                raise IngestError("a sidecar without its file (renamed or removed?): its ACL would apply to nothing",
                                  str(orphans[0]))
            if skipped is not None:
                for r in listing.refused:
                    skipped[str(r.path)] = Skipped(shown(r.path), r.reason, r.message)
            for p in listing.files:
                if p.suffix.lower() in DOC_SUFFIXES:
                    docs.append((p, src))
                elif p.suffix.lower() in TABLE_SUFFIXES:
                    tables.append(p)
        elif src.is_file():
            if src.is_symlink():  # named on the command line: the person ingesting chose what it points to
                src = Path(os.path.realpath(src))
                check_source(src)
            if src.suffix.lower() in DOC_SUFFIXES:
                docs.append((src, src.parent))
            elif src.suffix.lower() in TABLE_SUFFIXES:
                tables.append(src)
            else:
                raise IngestError(f"unsupported file type {src.suffix!r}", str(src))
        elif src.exists():
            raise IngestError("not a regular file or folder (a FIFO, socket or device is never read)", shown(src))
        else:
            raise IngestError("no such file or folder", str(src))
    return docs, tables


# Asked before a file is read: its documents when they are known not to have changed (a sync's
# check, indexes/sync_state.py), else None.
Unchanged = Callable[[Path, Path], "Sequence[LoadedDocument] | None"]


def load_documents(sources: Sequence[Path], default_acl: Sequence[str] = ADMIN_ONLY,
                   reader: FileReader | None = None, unchanged: Unchanged | None = None) -> list[LoadedDocument]:
    """All documents under `sources`, in a stable order; raises IngestError on the first problem."""
    return list(iter_documents(sources, default_acl, reader, unchanged))


def iter_documents(sources: Sequence[Path], default_acl: Sequence[str] = ADMIN_ONLY,
                   reader: FileReader | None = None, unchanged: Unchanged | None = None) -> Iterator[LoadedDocument]:
    """The same documents one at a time, holding only the ids seen (for duplicates): an ingest
    reads its sources in passes rather than keeping the corpus in memory. `reader` reads PDF,
    DOCX and HTML files (pass one reader to every pass: it extracts each file once) and says
    what a bad one does (stop, the default, or skip and list); `unchanged(path, root)` may
    give a file's documents without it being read."""
    reader = reader if reader is not None else FileReader()
    files, _ = discover(sources, reader.skipped)
    reader.roots.update(root for _, root in files)
    seen: dict[str, int] = {}  # id -> where it was first seen: file number << 32 | line
    problems: list[IngestError] = []  # one per file: the rest of the folder is still read, and all are reported
    for number, (path, root) in enumerate(files):
        try:
            known = unchanged(path, root) if unchanged is not None else None
            for loaded in known if known is not None else _load_file(path, root, tuple(default_acl), reader):
                path_s, _, line = loaded.origin.rpartition(":")
                first = seen.get(loaded.doc.id)
                if first is not None:
                    where = f"{files[first >> 32][0]}:{first & 0xFFFFFFFF}"
                    raise IngestError(f"duplicate document id {loaded.doc.id!r} (first at {where})", path_s, int(line))
                seen[loaded.doc.id] = number << 32 | int(line)
                yield loaded
        except IngestError as e:
            problems.append(e)
    if problems:
        raise every_problem(problems)


def every_problem(problems: Sequence[IngestError]) -> IngestError:
    """One error for the bad files of one read: the first as it is when it is the only one,
    else all of them, one per line (the first MAX_LISTED), so a folder is fixed in one round."""
    if len(problems) == 1:
        return problems[0]
    listed = "\n".join(f"  {p.message}" for p in problems[:MAX_LISTED])
    more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    return IngestError(f"{len(problems)} files cannot be ingested (nothing was published):\n{listed}{more}")


def _read(path: Path, root: Path) -> str:
    try:
        return read_regular(path, MAX_TEXT_BYTES, root).decode("utf-8")
    except UnicodeDecodeError as e:
        raise IngestError(f"not UTF-8 text ({e.reason} at byte {e.start})", str(path)) from None
    except FileTooLarge as e:
        raise IngestError(f"{e.strerror}: a document holds at most {MAX_TEXT_CHARS:,} characters", str(path)) from None
    except OSError as e:
        raise IngestError(f"cannot read file: {e.strerror}", str(path)) from None


def _load_file(path: Path, root: Path, default_acl: tuple[str, ...], reader: FileReader) -> Iterator[LoadedDocument]:
    kind = DOC_SUFFIXES[path.suffix.lower()]
    if kind == "jsonl":
        yield from _load_jsonl(path, root, default_acl)
        return
    if kind == "file":
        loaded = _load_extracted(path, root, default_acl, reader)
    else:
        loaded = _load_markdown(path, root, _read(path, root), default_acl, reader)
    if loaded is not None:
        yield loaded


def _path_id(path: Path, root: Path, keep_suffix: bool, reader: FileReader | None) -> str | None:
    """A file's default id, from its path below the source folder (indexes/path_ids.py); None
    when no valid id can be made of its name: the file is then listed in `reader.skipped`."""
    doc_id = path_id(path.relative_to(root), keep_suffix)
    try:
        return check_doc_id(doc_id)
    except InvalidRequest as e:
        if reader is None:
            raise IngestError(e.message, str(path), 1) from None
        reader.skipped[str(path)] = Skipped(shown(path), "bad_name", f"no valid document id can be made of its name: {e.message}")
        return None


def _load_extracted(path: Path, root: Path, default_acl: tuple[str, ...], reader: FileReader) -> LoadedDocument | None:
    """A PDF, DOCX or HTML file as one document with its regions (None: a bad file skipped).
    Its own metadata is the weakest statement: folder manifests, then its sidecar, override it."""
    manifest, sidecar = reader.overrides(path, root)
    doc_id = sidecar["id"] if "id" in sidecar else _path_id(path, root, keep_suffix=True, reader=reader)
    if doc_id is None:
        return None
    got = reader.extract(path)
    if got is None:
        return None
    record, source = file_record({"id": doc_id, **got.fields()}, [manifest, sidecar], got.text, headings_of(got.regions))
    if source == "file":
        reader.file_dates[path] = str(record["date"])
    record["text"] = got.text
    try:
        doc = make_document(record, default_source=path.parent.name, default_acl=default_acl)
    except InvalidRequest as e:
        raise IngestError(_clamped(e.message), str(path)) from None
    if got.tables:
        reader.grids[str(path)] = FoundGrids(path, doc.id, doc.title, doc.acl, got.tables)
    return LoadedDocument(replace(doc, regions=got.regions), f"{path}:1")


def _load_jsonl(path: Path, root: Path, default_acl: tuple[str, ...]) -> Iterator[LoadedDocument]:
    """One document per line, read line by line (a corpus file is never held whole, nor a
    line past MAX_JSONL_LINE_BYTES). Lines end at \\n (or \\r\\n), as JSON Lines says: a JSON
    string may hold U+2028 and other separators raw."""
    try:
        with open_regular(path, root) as f:
            n = 0
            while raw := f.readline(MAX_JSONL_LINE_BYTES + 1):
                n += 1
                if len(raw) > MAX_JSONL_LINE_BYTES:
                    raise IngestError(f"line longer than {MAX_JSONL_LINE_BYTES:,} bytes", str(path), n)
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise IngestError(f"not UTF-8 text ({e.reason} at byte {e.start} of the line)", str(path), n) from None
                if line.strip():
                    yield _jsonl_document(path, n, line, default_acl)
    except OSError as e:
        raise IngestError(f"cannot read file: {e.strerror}", str(path)) from None


def _jsonl_document(path: Path, n: int, line: str, default_acl: tuple[str, ...]) -> LoadedDocument:
    text = line.rstrip("\r\n")  # parsed with its line break, an error at the end is placed on a line 2, column 1
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        where = (f"at the end of the line (column {e.pos + 1}): a closing '}}', ']' or '\"' may be missing"
                 if e.pos >= len(text.rstrip()) else f"at column {e.pos + 1}")
        raise IngestError(f"malformed JSON: {e.msg} {where}", str(path), n) from None
    if not isinstance(record, dict):
        raise IngestError("each line must be a JSON object", str(path), n)
    try:
        doc = make_document(record, default_source=path.stem, default_acl=default_acl)
    except InvalidRequest as e:
        raise IngestError(_clamped(e.message), str(path), n) from None
    return LoadedDocument(doc, f"{path}:{n}")


def _load_markdown(path: Path, root: Path, text: str, default_acl: tuple[str, ...],
                   reader: FileReader | None = None) -> LoadedDocument | None:
    """A Markdown or text file as one document (None: its name makes no id, or it is empty and
    skipped, and it is listed); with the reader's `markdown_sections`, a Markdown file's headings
    make its regions (indexes/markdown_sections.py)."""
    meta, body = split_front_matter(text, str(path))
    if not body.strip():
        _empty_file(path, reader)  # raises unless the file is skipped
        return None
    record = _front_matter_fields(meta, str(path), reader is not None and reader.strict_fields)
    if reader is not None:  # folder manifests and a sidecar fill in what the front matter does not say
        manifest, sidecar = reader.overrides(path, root)
        both = sorted(set(sidecar) & set(meta))
        if both:
            raise IngestError(f"{', '.join(both)} set both in the front matter and in the sidecar; keep one", str(path), 1)
        record = merge_fields(merge_fields(manifest, sidecar), record)
    if "id" not in record:
        doc_id = _path_id(path, root, keep_suffix=False, reader=reader)
        if doc_id is None:
            return None
        record["id"] = doc_id
    if "title" not in record:
        record["title"] = first_heading(body)
    sections = reader is not None and reader.markdown_sections and DOC_SUFFIXES[path.suffix.lower()] == "markdown"
    regions = markdown_regions(body) if sections else ()
    record = with_stated_date(record, body)
    record["text"] = body
    try:
        doc = make_document(record, default_source=path.parent.name, default_acl=default_acl)
    except InvalidRequest as e:
        raise IngestError(_clamped(e.message), str(path), 1) from None
    return LoadedDocument(replace(doc, regions=regions), f"{path}:1")


def _empty_file(path: Path, reader: FileReader | None) -> None:
    """A Markdown or text file with no text (after its front matter): a bad file, left out
    and listed with `skip_bad`, else an error that says so."""
    if reader is not None and reader.skip_bad:
        reader.skipped[str(path)] = Skipped(shown(path), "empty", "the file holds no text after its front matter")
        return None
    raise IngestError("empty: the file holds no text after its front matter "
                      "(--skip-bad-files leaves such files out and lists them)", str(path), 1)


def _front_matter_fields(meta: dict[str, Any], where: str, strict: bool) -> dict[str, Any]:
    """A front matter's document fields, its other keys moved into `metadata` (a team's notes
    carry `reported_by`, `site`, `tags`...): a date becomes its ISO text, a list of plain
    values their comma-separated text; a nested value, or a key also set in `metadata`, is an
    error naming it. `strict` refuses any key outside the fields, as a JSONL line does."""
    extra = {str(k): v for k, v in meta.items() if k not in FIELDS}
    if not extra:
        return dict(meta)
    if strict:
        raise IngestError(f"unknown front-matter fields {sorted(extra)}; allowed: {sorted(FIELDS - {'_id'})} "
                          "(without strict fields they go to metadata)", where, 1)
    record = {k: v for k, v in meta.items() if k in FIELDS}
    metadata = record.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        return record  # make_document names the bad metadata
    merged = dict(metadata or {})
    for key, value in extra.items():
        if key in merged:
            raise IngestError(f"{key!r} set both as a front-matter field and in its metadata; keep one", where, 1)
        merged[key] = _metadata_value(key, value, where)
    record["metadata"] = merged
    return record


def _metadata_value(key: str, value: Any, where: str) -> str | int | float | bool | None:
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool, date)) for v in value):
        return ", ".join(v.isoformat() if isinstance(v, date) else str(v) for v in value)
    raise IngestError(f"front-matter field {key!r} holds a {type(value).__name__} of mappings or lists; metadata holds "
                      "strings, numbers, booleans or lists of them", where, 1)


def make_document(record: dict[str, Any], default_source: str | None, default_acl: tuple[str, ...],
                  logged: bool = False) -> Document:
    """Validate one raw record into a Document; raises InvalidRequest naming the field. The id
    and ACL rules are retrieval/types.py's (`check_doc_id`, `check_acl`), the same for every
    write path; `logged` reads a change the write-ahead log already holds, by the rules it was
    accepted under (a log written before a rule was added must still open)."""
    unknown = set(record) - FIELDS
    if unknown:
        raise InvalidRequest(f"unknown fields {sorted(unknown)}; allowed: {sorted(FIELDS - {'_id'})}")
    doc_id = record.get("id", record.get("_id"))
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not logged:
        doc_id = check_doc_id(doc_id)
    elif not isinstance(doc_id, str) or not _LOGGED_ID_RE.fullmatch(doc_id):
        raise InvalidRequest(f"id must be a non-empty string without spaces or '#', got {doc_id!r}")
    text = record.get("text")
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest(f"document {doc_id!r} has no text")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidRequest(f"document {doc_id!r} text exceeds {MAX_TEXT_CHARS} characters")
    title = record.get("title")
    if title is not None and not isinstance(title, str):
        raise InvalidRequest(f"title of {doc_id!r} must be a string")
    source = record.get("source", default_source)
    if source is not None and (not isinstance(source, str) or not source.strip()):
        raise InvalidRequest(f"source of {doc_id!r} must be a non-empty string")
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict) or any(
        not isinstance(k, str) or not (v is None or isinstance(v, (str, int, float, bool))) for k, v in metadata.items()
    ):
        raise InvalidRequest(f"metadata of {doc_id!r} must be a flat object of strings, numbers or booleans")
    acl = record.get("acl")
    return Document(
        id=doc_id,
        text=text,
        title=title.strip() if isinstance(title, str) and title.strip() else None,
        source=source,
        date=parse_date(record.get("date"), doc_id),
        metadata=metadata,
        acl=check_acl(acl, keywords=not logged) if acl is not None else default_acl,
    )


def parse_date(value: Any, doc_id: str = "?") -> date | None:
    """ISO 8601 date or date-time (the date part is kept); None stays None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            try:
                return datetime.fromisoformat(value).date()
            except ValueError:
                pass
    raise InvalidRequest(f"date of {doc_id!r} is not an ISO 8601 date: {excerpt(repr(value))}")


def _clamped(message: str) -> str:
    """A validation message that quotes a value (an ACL list, say) cut to its start and end:
    a value read from a file may be megabytes, and a message is read by a person."""
    if len(message) <= 2 * EXCERPT_CHARS + 100:
        return message
    cut = len(message) - 2 * EXCERPT_CHARS
    return f"{message[:EXCERPT_CHARS]} ... ({cut:,} characters cut) ... {message[-EXCERPT_CHARS:]}"
