"""A mixed folder as a team has it (PDFs, Word files, saved web pages, Markdown and JSONL) goes
through `build_snapshot` with the real model: each fact is found on its page or under its
heading (a Markdown note's too), boilerplate never becomes a passage, ACLs from manifests and sidecars hold (the
no-leak differential), and a bad file stops the ingest or is skipped and listed."""

from __future__ import annotations

import json
import shutil
from datetime import date
from pathlib import Path

import pytest

from benchmarks.file_corpus import write_bad_files, write_file_corpus, write_markdown_notes
from indexes.catalog import Catalog
from indexes.snapshot_build import BuildOptions, build_snapshot
from indexes.snapshot_load import current_snapshot_path
from retrieval.errors import IngestError
from retrieval.search import search
from retrieval.types import NO_FILTERS, Principal
from routes.service.view import open_view

PRINCIPALS = {"pat": (), "fin": ("finance",), "hal": ("hr",), "root": ("admin", "finance", "hr")}
MANIFEST = {"files": [
    {"match": "open/*", "acl": ["public"], "metadata": {"tier": "open"}},
    {"match": "ledger/*", "acl": ["group:finance"], "metadata": {"tier": "ledger"}},
    {"match": "ledger/*.html", "metadata": {"kind": "page"}},
]}


def _write_mixed(folder: Path) -> dict:
    open_corpus = write_file_corpus(folder / "open", seed=11, n_docs=2)
    _, notes = write_markdown_notes(folder / "open", seed=11, n_notes=2)
    ledger = write_file_corpus(folder / "ledger", seed=12, n_docs=1)
    (folder / "quarry.manifest.json").write_text(json.dumps(MANIFEST))
    html = next(p for p in ledger.files if p.suffix == ".html")
    html.with_name(html.name + ".meta.json").write_text(json.dumps({"acl": ["group:hr"], "title": "Staff page"}))
    (folder / "notes").mkdir()
    (folder / "notes" / "handover.md").write_text(
        "---\ntitle: Handover\nacl: [public]\n---\n# Handover\n\nThe night shift hands the Orlim gate keys to the day lead.\n")
    (folder / "notes" / "extra.jsonl").write_text(json.dumps(
        {"id": "memo-1", "text": "The Peskar annex closes at nine on Fridays.", "title": "Annex hours"}) + "\n")
    return {"open": open_corpus, "ledger": ledger, "sidecar": html, "notes": notes}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("mixed")
    written = _write_mixed(root / "corpus")
    index = root / "index"
    manifest = build_snapshot([root / "corpus"], index, embedder, BuildOptions(markdown_sections=True))
    engine = open_view(index, embedder, today=date(2026, 12, 1))
    yield {"root": root, "index": index, "engine": engine, "manifest": manifest, **written}
    engine.close()


def _catalog(index: Path) -> Catalog:
    return Catalog(current_snapshot_path(index) / "catalog.duckdb")


def _search(mixed, route: str, query: str, principal: Principal, k: int) -> list:
    engine = mixed["engine"]
    return search(engine.retrievers, route, query, principal, k, NO_FILTERS, engine.limits)


def _place(hit) -> tuple:
    return (hit.page, hit.section)


def test_every_fact_comes_back_on_its_page_or_under_its_heading(mixed):
    root = Principal("root", PRINCIPALS["root"])
    facts = [*mixed["open"].facts, *mixed["ledger"].facts, *mixed["notes"]]
    assert len(facts) >= 30
    misplaced = []
    for fact in facts:
        hits = _search(mixed, "hybrid", fact.question, root, 8)
        holding = [h for h in hits if fact.answer in h.text]
        assert holding, (fact.question, [h.chunk_id for h in hits])
        want = (fact.page, fact.section)
        if _place(holding[0]) != want:
            misplaced.append((fact.question, _place(holding[0]), want))
    assert not misplaced


def test_the_loop_returns_the_passage_with_its_place(mixed):
    """Through the loop, answer or gap, the context it returns holds the fact's passage named
    by its page or heading path (whether the grader finds it sufficient is the grader's
    business, measured elsewhere)."""
    pat = Principal("pat", PRINCIPALS["pat"])
    for fact in [*mixed["open"].facts, *mixed["notes"]]:
        result = mixed["engine"].query(fact.question, pat)
        holding = [h for h in result.context if fact.answer in h.text]
        assert holding, (fact.question, result.status, [h.chunk_id for h in result.context])
        assert _place(holding[0]) == (fact.page, fact.section), fact.question


def test_boilerplate_never_becomes_a_passage(mixed):
    cat = _catalog(mixed["index"])
    try:
        texts = [r[0] for r in cat.cursor().execute("SELECT text FROM quarry.chunks").fetchall()]
    finally:
        cat.close()
    root = Principal("root", PRINCIPALS["root"])
    for corpus in (mixed["open"], mixed["ledger"]):
        for path, strings in corpus.boilerplate.items():
            for s in strings:
                assert not any(s in t for t in texts), (path.name, s)
                for hit in _search(mixed, "bm25", s, root, 3):
                    assert s not in hit.text


def test_file_metadata_manifests_and_sidecars_give_fields_and_acls(mixed):
    cat = _catalog(mixed["index"])
    try:
        docs = {d.id: d for d, _ in cat.documents()}
    finally:
        cat.close()
    for corpus, acl, tier in ((mixed["open"], ("public",), "open"), (mixed["ledger"], ("group:finance",), "ledger")):
        for path in corpus.files:
            doc = docs[f"{path.parent.name}:{path.name}"]  # the path below the source folder, with its extension
            info = corpus.info[path]
            assert doc.metadata["tier"] == tier
            if path == mixed["sidecar"]:
                assert doc.acl == ("group:hr",) and doc.title == "Staff page" and doc.metadata["kind"] == "page"
                continue
            assert doc.acl == acl and doc.title == info.title
            assert doc.metadata["author"] == info.author and doc.date == info.created
            assert doc.regions and all(r.page or r.section for r in doc.regions)
    assert docs["notes:handover"].acl == ("public",)  # front matter
    assert docs["memo-1"].acl == ("group:admin",)  # nothing said: the ingest default
    assert not docs["memo-1"].regions


def _reduced_folder(mixed, principal: Principal, dest: Path) -> None:
    """The mixed folder with only the files whose document `principal` may read (with the
    manifest and their sidecars, so the copies keep their ACLs)."""
    cat = _catalog(mixed["index"])
    try:
        readable = {origin.rpartition(":")[0] for d, origin in cat.documents() if principal.can_read(d.acl)}
    finally:
        cat.close()
    src = mixed["root"] / "corpus"
    for path in src.rglob("*"):
        if path.is_file() and (str(path) in readable or path.name == "quarry.manifest.json"
                               or (path.name.endswith(".meta.json") and str(path)[: -len(".meta.json")] in readable)):
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def _outcome(result) -> tuple:
    return (result.status, result.gap.reason if result.gap else None, [(h.doc_id, h.page, h.section) for h in result.context])


def test_no_principal_can_tell_a_forbidden_file_is_there(mixed, embedder, tmp_path):
    questions = [f.question for f in (*mixed["open"].facts, *mixed["ledger"].facts)]
    cat = _catalog(mixed["index"])
    try:
        acls = {d.id: d.acl for d, _ in cat.documents()}
    finally:
        cat.close()
    for pid, groups in PRINCIPALS.items():
        principal = Principal(pid, groups)
        folder = tmp_path / pid / "corpus"
        _reduced_folder(mixed, principal, folder)
        index = tmp_path / pid / "index"
        build_snapshot([folder], index, embedder, BuildOptions(reuse_from=mixed["index"], markdown_sections=True))
        alone = open_view(index, embedder, today=date(2026, 12, 1))
        try:
            for q in questions:
                full = mixed["engine"].query(q, principal)
                assert _outcome(full) == _outcome(alone.query(q, principal)), (pid, q)
                seen = {h.doc_id for a in full.attempts for h in a.hits}
                assert all(principal.can_read(acls[d]) for d in seen), (pid, q)
        finally:
            alone.close()


def _good_folder(folder: Path) -> None:
    write_file_corpus(folder, seed=5, n_docs=1)


def test_each_bad_file_stops_the_ingest_naming_it_and_publishes_nothing(tmp_path, embedder):
    bad = tmp_path / "bad"
    expected = write_bad_files(bad)
    for name, reason in expected.items():
        folder = tmp_path / f"case-{name}"
        _good_folder(folder)
        shutil.copy2(bad / name, folder / name)
        index = tmp_path / f"index-{name}"
        with pytest.raises(IngestError) as err:
            build_snapshot([folder], index, embedder)
        assert err.value.path == str(folder / name)
        assert f"{reason}:" in err.value.message and "Traceback" not in err.value.message
        assert not (index / "CURRENT").exists()


def test_skip_mode_ingests_the_rest_and_lists_every_bad_file(tmp_path, embedder):
    folder = tmp_path / "corpus"
    _good_folder(folder)
    expected = write_bad_files(folder / "bad")
    manifest = build_snapshot([folder], tmp_path / "index", embedder, BuildOptions(skip_bad_files=True))
    skipped = {Path(s["path"]).name: s["reason"] for s in manifest["skipped_files"]}
    assert skipped == expected
    assert manifest["counts"]["documents"] == 3
    assert all(s["message"] for s in manifest["skipped_files"])


def test_a_sidecar_without_its_file_stops_the_ingest(tmp_path, embedder):
    folder = tmp_path / "corpus"
    _good_folder(folder)
    (folder / "renamed.pdf.meta.json").write_text(json.dumps({"acl": ["group:hr"]}))
    with pytest.raises(IngestError, match="sidecar without its file") as err:
        build_snapshot([folder], tmp_path / "index", embedder)
    assert err.value.path.endswith("renamed.pdf.meta.json")


def test_a_field_in_both_front_matter_and_sidecar_is_refused(tmp_path, embedder):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.md").write_text("---\nacl: [public]\n---\nThe Ulver pier opens at six.\n")
    (folder / "a.md.meta.json").write_text(json.dumps({"acl": ["group:hr"]}))
    with pytest.raises(IngestError, match="both in the front matter and in the sidecar"):
        build_snapshot([folder], tmp_path / "index", embedder)


@pytest.mark.parametrize("manifest, message", [
    ({"files": [{"match": "*", "acl": ["everyone"]}]}, "everyone"),
    ({"files": [{"match": "*", "owner": "x"}]}, "unknown fields"),
    ({"files": [{"acl": ["public"]}]}, "match"),
    ({"rules": []}, "manifest must be"),
])
def test_a_bad_manifest_stops_the_ingest(tmp_path, embedder, manifest, message):
    folder = tmp_path / "corpus"
    _good_folder(folder)
    (folder / "quarry.manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IngestError, match=message):
        build_snapshot([folder], tmp_path / "index", embedder)
    assert not (tmp_path / "index" / "CURRENT").exists()
