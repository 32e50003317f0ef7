"""An ingested folder is untrusted: links to secrets outside it, FIFOs, hostile names and
manifests that reach outside never put outside content in the index, never hang, and never
stop the whole ingest; each entry left out is listed in the ingest's report."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pytest

from indexes.catalog import Catalog
from indexes.corpus import load_documents
from indexes.files import FileReader
from indexes.snapshot_build import BuildOptions, build_snapshot
from indexes.snapshot_load import current_snapshot_path
from retrieval.errors import IngestError
from retrieval.types import check_doc_id

OUTSIDE_WORD = "Quendrilax"  # only in the outside folder's file


def _catalog_texts(index: Path) -> tuple[dict[str, str], list[str], list[str]]:
    """(document id -> text, every chunk's text, every user table's name) of the current snapshot."""
    cat = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    try:
        docs = {d.id: d.text for d, _ in cat.documents()}
        chunks = [r[0] for r in cat.cursor().execute("SELECT text FROM quarry.chunks").fetchall()]
        tables = list(cat.tables())
    finally:
        cat.close()
    return docs, chunks, tables


def _secrets() -> list[str]:
    """Distinctive strings of what the links point to: /etc/passwd's first line and this
    process's environment entries (what /proc/self/environ holds for the ingest)."""
    passwd = Path("/etc/passwd").read_text().splitlines()[0]
    environ = [e.decode("utf-8", "replace") for e in Path("/proc/self/environ").read_bytes().split(b"\0") if len(e) >= 12]
    return [passwd, OUTSIDE_WORD, *environ[:50]]


def _hostile_folder(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.md").write_text(f"# Leak\n\nThe {OUTSIDE_WORD} vault code is 7731.\n")
    (outside / "leak.csv").write_text(f"word,n\n{OUTSIDE_WORD},1\n")
    src = tmp_path / "corpus"
    src.mkdir()
    (src / "good.md").write_text("# Good\n\nThe Ferrow ferry leaves at noon.\n")
    (src / "passwd.txt").symlink_to("/etc/passwd")
    (src / "passwd.txt.meta.json").write_text(json.dumps({"acl": ["public"]}))
    (src / "environ.txt").symlink_to("/proc/self/environ")
    (src / "environ.txt.meta.json").write_text(json.dumps({"acl": ["public"]}))
    (src / "shared").symlink_to(outside)
    (src / "stats.csv").symlink_to(outside / "leak.csv")
    (src / "stats.acl.json").write_text(json.dumps({"acl": ["public"]}))
    (src / "quarry.manifest.json").write_text(json.dumps({"files": [{"match": "*", "acl": ["public"]}]}))
    os.mkfifo(src / "pipe.md")
    return src


def test_links_to_secrets_and_a_fifo_never_reach_the_index_and_are_listed(tmp_path, embedder):
    src = _hostile_folder(tmp_path)
    index = tmp_path / "index"
    manifest = build_snapshot([src], index, embedder)
    docs, chunks, tables = _catalog_texts(index)
    assert list(docs) == ["good"] and tables == []
    for secret in _secrets():
        assert not any(secret in t for t in [*docs.values(), *chunks]), secret[:20]
    skipped = {Path(s["path"]).name: s["reason"] for s in manifest["skipped_files"]}
    assert skipped == {"passwd.txt": "link", "environ.txt": "link", "shared": "link", "stats.csv": "link",
                       "pipe.md": "special_file"}
    assert all(s["message"] for s in manifest["skipped_files"])


def test_the_same_folder_skipping_bad_files_lists_the_same_entries(tmp_path, embedder):
    src = _hostile_folder(tmp_path)
    reader = FileReader(skip_bad=True)
    assert [d.doc.id for d in load_documents([src], reader=reader)] == ["good"]
    assert sorted(Path(p).name for p in reader.skipped) == ["environ.txt", "passwd.txt", "pipe.md", "shared", "stats.csv"]


def test_a_sidecar_or_manifest_that_is_a_link_stops_the_ingest(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"acl": ["public"]}))
    src = tmp_path / "corpus"
    src.mkdir()
    (src / "a.md").write_text("Body.\n")
    (src / "a.md.meta.json").symlink_to(elsewhere)  # its ACL cannot be known: the default must not apply silently
    with pytest.raises(IngestError, match="symbolic link") as err:
        load_documents([src], default_acl=("public",))
    assert err.value.path == str(src / "a.md.meta.json")
    (src / "a.md.meta.json").unlink()
    (src / "quarry.manifest.json").symlink_to(elsewhere)
    with pytest.raises(IngestError, match="symbolic link"):
        load_documents([src], default_acl=("public",))


@pytest.mark.parametrize("glob", ["/etc/*", "../*", "sub/../../x/*", "\\etc\\*"])
def test_a_manifest_glob_that_reaches_outside_its_folder_is_refused(tmp_path, glob):
    (tmp_path / "a.md").write_text("Body.\n")
    (tmp_path / "quarry.manifest.json").write_text(json.dumps({"files": [{"match": glob, "acl": ["public"]}]}))
    with pytest.raises(IngestError, match="stays inside it"):
        load_documents([tmp_path])


def test_a_kernel_folder_is_refused_as_a_source():
    with pytest.raises(IngestError, match="/proc, /sys and /dev"):
        load_documents([Path("/proc/self/environ")])


def test_a_file_named_on_the_command_line_may_be_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "notes.md").write_text("# Notes\n\nBody.\n")
    (tmp_path / "named.md").symlink_to(tmp_path / "real" / "notes.md")
    assert [d.doc.id for d in load_documents([tmp_path / "named.md"])] == ["notes"]


HOSTILE_NAMES = {
    "Q3 report.md": "Q3_report",
    "tab\there.md": "tab_here",
    "ctl\x07bell.md": "ctlbell",
    "bidi\u202etxt.md": "biditxt",
    "zero\u200bwidth.md": "zerowidth",
    "#hash.md": "_hash",
    "nai\u0308ve.md": "na\u00efve",
    "Saved page.html": "Saved_page.html",
}


def test_hostile_names_each_become_a_valid_id_or_a_listed_skip(tmp_path, embedder):
    src = tmp_path / "corpus"
    src.mkdir()
    for name in HOSTILE_NAMES:
        body = f"<html><body><p>Page {name!r} body.</p></body></html>" if name.endswith(".html") else f"Body of {name!r}.\n"
        (src / name).write_text(body)
    deep = src / ("d" * 200)
    deep.mkdir()
    (deep / ("f" * 100 + ".md")).write_text("A file whose id would be 301 characters.\n")
    (src / ("g" * 250 + ".md")).write_text("A 253-character name (no sidecar can exist beside it).\n")
    (src / "back\\slash.md").write_text("No id can be made of this name.\n")
    manifest = build_snapshot([src], tmp_path / "index", embedder, BuildOptions(default_acl=("public",)))
    docs, _, _ = _catalog_texts(tmp_path / "index")
    assert set(HOSTILE_NAMES.values()) <= set(docs) and "g" * 250 in docs
    assert len(docs) == len(HOSTILE_NAMES) + 2 and all(check_doc_id(i) == i for i in docs)
    long_id = next(i for i in docs if i.startswith("d" * 200))
    assert len(long_id) == 256 and "~" in long_id
    assert [(Path(s["path"]).name, s["reason"]) for s in manifest["skipped_files"]] == [("back\\slash.md", "bad_name")]


def test_two_names_that_become_one_id_are_the_duplicate_id_error(tmp_path):
    (tmp_path / "Q3 report.md").write_text("one\n")
    (tmp_path / "Q3_report.md").write_text("two\n")
    with pytest.raises(IngestError, match="duplicate document id 'Q3_report'"):
        load_documents([tmp_path])


def test_a_thousand_files_with_spaces_and_accents_load_whole(tmp_path):
    for i in range(1000):
        if i % 100 == 0:
            name, body = f"Saved page {i} été.html", f"<html><head><title>P{i}</title></head><body><p>Page {i}.</p></body></html>"
        elif i % 3 == 0:
            name, body = unicodedata.normalize("NFD", f"Résumé café {i}.md"), f"# Résumé {i}\n\nText {i}.\n"
        elif i % 3 == 1:
            name, body = f"Meeting notes {i} naïve.txt", f"Notes {i}.\n"
        else:
            name, body = f"Q{i} report – final.md", f"Report {i}.\n"
        folder = tmp_path / ("Team Docs" if i % 2 else "Archiv Öffentlich")
        folder.mkdir(exist_ok=True)
        (folder / name).write_text(body)
    reader = FileReader()
    loaded = load_documents([tmp_path], reader=reader)
    ids = [d.doc.id for d in loaded]
    assert len(ids) == 1000 and len(set(ids)) == 1000 and not reader.skipped
    assert all(check_doc_id(i) == i and unicodedata.normalize("NFC", i) == i for i in ids)
    assert "Team_Docs:Résumé_café_3" in ids and "Archiv_Öffentlich:Saved_page_0_été.html" in ids
