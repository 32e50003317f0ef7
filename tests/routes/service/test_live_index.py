"""A live index (writes on top of a base snapshot, compactions) ranks exactly like a full
rebuild of its final corpus, on every route, for every principal."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import indexes.dense_index as dense_module
from indexes.corpus import make_document
from indexes.live import Delete, Put, SetAcl
from indexes.snapshot_build import BuildOptions, build_snapshot
from retrieval.errors import Conflict, NotFound
from retrieval.search import search
from retrieval.types import Filters, Principal
from routes.service.view import IndexView, open_view
from routes.service.generations import Generations
from routes.service.writes import Writer

# Made-up words, so neither the embedder nor BM25 has seen the corpus before.
VOCAB = ("valdrin", "quorset", "mebbrick", "tolvane", "sprindle", "harrowgate", "cindral", "obsk", "felmarch",
         "pellucid", "gristle", "ambervale", "norrick", "zephyrine", "kestrel", "lumen", "drossel", "wickerby",
         "thornquist", "yarrow", "bellwether", "cobalt", "marrow", "quillon", "sedgefield", "tamsin", "ulverton",
         "vessmoor", "wrenfold", "jaspar", "the", "of", "and", "reports", "pump", "valve", "budget", "review")
ACLS = (["public"], ["group:alpha"], ["group:beta"], ["uma"], ["group:alpha", "group:beta"])
PRINCIPALS = (Principal("uma", ("alpha",)), Principal("vic", ("beta",)), Principal("wes"), Principal("root", ("alpha", "beta")))
ROUTES = ("exact", "bm25", "dense", "hybrid")


def _record(rng: random.Random, doc_id: str) -> dict:
    words = rng.choices(VOCAB, k=rng.randint(12, 40))
    return {"id": doc_id, "title": " ".join(rng.choices(VOCAB[:30], k=2)).title(), "text": " ".join(words) + ".",
            "source": rng.choice(["ops", "finance"]), "date": f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
            "acl": rng.choice(ACLS)}


def _doc(record: dict):
    return make_document(record, None, ("group:admin",))


def _queries(rng: random.Random) -> list[str]:
    out = [" ".join(rng.sample(VOCAB[:30], 2)) for _ in range(5)]
    return out + [f'"{VOCAB[3]}"', VOCAB[7], "pump valve review"]


def _rankings(engine: IndexView, queries: list[str]) -> dict:
    """Per principal, query and route: (chunk ids in order, scores); and the loop's outcome."""
    out: dict = {}
    for p in PRINCIPALS:
        for q in queries:
            for route in ROUTES:
                hits = search(engine.retrievers, route, q, p, 8, Filters(), engine.limits)
                out[(p.id, q, route)] = ([h.chunk_id for h in hits], [round(h.score, 4) for h in hits])
            result = engine.query(f"What does {q} say?", p, deadline_ms=30_000)
            out[(p.id, q, "loop")] = (result.status, [h.chunk_id for h in result.context])
    return out


def _index(tmp: Path, corpus: dict[str, dict], embedder, graph_from: int | None = None) -> Path:
    """A base snapshot of `corpus` in tmp/ix."""
    src = tmp / "base.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in corpus.values()))
    build_snapshot([src], tmp / "ix", embedder, BuildOptions(dense_graph_from=graph_from))
    return tmp / "ix"


def _rebuild(tmp: Path, corpus: dict[str, dict], embedder, graph_from: int | None = None) -> IndexView:
    src = tmp / "final"
    src.mkdir(exist_ok=True)
    (src / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus.values()))
    index = tmp / f"rebuild-{len(list(tmp.glob('rebuild-*')))}"
    build_snapshot([src / "docs.jsonl"], index, embedder, BuildOptions(reuse_embeddings=False, dense_graph_from=graph_from))
    return open_view(index, embedder, plugins=False)


def _compare(live: dict, rebuilt: dict) -> None:
    assert live.keys() == rebuilt.keys()
    for key in live:
        if key[2] == "loop":
            assert live[key] == rebuilt[key], key
            continue
        (ids_a, scores_a), (ids_b, scores_b) = live[key], rebuilt[key]
        assert ids_a == ids_b, (key, ids_a, ids_b, scores_a, scores_b)
        assert scores_a == pytest.approx(scores_b, abs=2e-3), key


@pytest.mark.parametrize(("seed", "graph_from"), [(3, None), (11, None), (3, 1)])
def test_random_writes_and_compactions_rank_like_a_full_rebuild(tmp_path, embedder, seed, graph_from, monkeypatch):
    """With `graph_from` 1 every index has a dense graph per access class of more than 2
    chunks: a live view scans the graphs its writes made stale, a compaction builds new ones."""
    monkeypatch.setattr(dense_module, "EXACT_BELOW", 2)
    rng = random.Random(seed)
    corpus = {f"d{i:02d}": _record(rng, f"d{i:02d}") for i in range(24)}
    index = _index(tmp_path, corpus, embedder, graph_from)
    generations = Generations(open_view(index, embedder, plugins=False), owned=True)
    writer = Writer(index, generations)
    queries = _queries(rng)
    fresh = 100
    try:
        for step in range(14):
            kind = rng.choice(["put", "put", "replace", "delete", "acl", "batch", "compact"] if step != 6 else ["compact"])
            if kind == "compact":
                assert writer.compact(embedder)["status"] in ("compacted", "unchanged")
                writer.rebase(lambda: open_view(index, embedder, plugins=False))
                continue
            if kind == "put":
                fresh += 1
                corpus[f"d{fresh}"] = _record(rng, f"d{fresh}")
                changes = [Put(_doc(corpus[f"d{fresh}"]), "test")]
            elif kind == "replace":
                doc_id = rng.choice(sorted(corpus))
                corpus[doc_id] = _record(rng, doc_id)
                changes = [Put(_doc(corpus[doc_id]), "test")]
            elif kind == "delete":
                doc_id = rng.choice(sorted(corpus))
                del corpus[doc_id]
                changes = [Delete(doc_id)]
            elif kind == "acl":
                doc_id = rng.choice(sorted(corpus))
                corpus[doc_id]["acl"] = rng.choice(ACLS)
                changes = [SetAcl(doc_id, tuple(corpus[doc_id]["acl"]))]
            else:
                a, b = rng.sample(sorted(corpus), 2)
                fresh += 1
                corpus[f"d{fresh}"] = _record(rng, f"d{fresh}")
                corpus[a] = _record(rng, a)
                del corpus[b]
                changes = [Put(_doc(corpus[f"d{fresh}"]), "test"), Put(_doc(corpus[a]), "test"), Delete(b)]
            out = writer.write(changes, None)
            assert out["status"] == "applied"
            if step in (4, 9, 13):
                rebuilt = _rebuild(tmp_path, corpus, embedder, graph_from)
                try:
                    with generations.lease() as served:
                        _compare(_rankings(served.engine, queries), _rankings(rebuilt, queries))
                        assert served.engine.snapshot.manifest["counts"]["documents"] == len(corpus)
                finally:
                    rebuilt.close()
    finally:
        writer.close()
        generations.close()
    # A restart replays the log onto the last base: the same corpus again.
    reopened = open_view(index, embedder, plugins=False)
    rebuilt = _rebuild(tmp_path, corpus, embedder, graph_from)
    try:
        _compare(_rankings(reopened, queries), _rankings(rebuilt, queries))
        dense = reopened.snapshot.dense
        assert (getattr(dense, "parts", [dense])[0].graphs > 0) == (graph_from is not None)  # the compactions kept them
    finally:
        reopened.close()
        rebuilt.close()


@pytest.mark.parametrize("whole", [True, False])
def test_a_compaction_keeps_the_whole_dense_graph_setting_of_the_build(tmp_path, embedder, monkeypatch, whole):
    monkeypatch.setattr(dense_module, "EXACT_BELOW", 2)
    rng = random.Random(7)
    corpus = {f"d{i:02d}": {**_record(rng, f"d{i:02d}"), "acl": ACLS[i % 2]} for i in range(16)}  # two classes
    src = tmp_path / "base.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in corpus.values()))
    index = tmp_path / "ix"
    build_snapshot([src], index, embedder, BuildOptions(dense_graph_from=1, dense_whole_graph=whole))
    generations = Generations(open_view(index, embedder, plugins=False), owned=True)
    writer = Writer(index, generations)
    try:
        assert writer.write([Put(_doc(_record(rng, "fresh")), "test")], None)["status"] == "applied"
        assert writer.compact(embedder)["status"] == "compacted"
    finally:
        writer.close()
        generations.close()
    reopened = open_view(index, embedder, plugins=False)
    try:
        dense = reopened.snapshot.dense
        dense = getattr(dense, "parts", [dense])[0]
        assert reopened.snapshot.manifest["options"]["dense_whole_graph"] is whole
        assert dense.graphs == 2 and (dense._whole is not None) is whole
    finally:
        reopened.close()


def test_a_write_checks_the_whole_batch_and_applies_nothing_on_a_bad_change(tmp_path, embedder):
    rng = random.Random(5)
    corpus = {f"d{i}": _record(rng, f"d{i}") for i in range(6)}
    corpus["d0"]["acl"] = ["group:alpha"]
    index = _index(tmp_path, corpus, embedder)
    generations = Generations(open_view(index, embedder, plugins=False), owned=True)
    writer = Writer(index, generations)
    try:
        new = _doc({**_record(rng, "fresh"), "acl": ["wes", "group:alpha"]})  # wes stays among the readers
        with pytest.raises(NotFound):  # wes cannot read d0: deleting it looks like deleting a missing id
            writer.write([Put(new, "t"), Delete("d0")], Principal("wes"))
        with pytest.raises(NotFound):
            writer.write([Delete("nope")], Principal("wes"))
        assert writer.wal.last_seq == 0
        with generations.lease() as served:
            assert served.engine.snapshot.catalog.document("fresh") is None
            assert served.engine.snapshot.catalog.document("d0") is not None
        with pytest.raises(Conflict):  # one writer per index
            Writer(index)
    finally:
        writer.close()
        generations.close()


def test_past_compact_after_changes_a_background_compaction_folds_them(tmp_path, embedder):
    from indexes.snapshot_load import current_snapshot_path
    from tests.conftest import wait_until

    rng = random.Random(9)
    corpus = {f"d{i}": _record(rng, f"d{i}") for i in range(8)}
    index = _index(tmp_path, corpus, embedder)
    first = current_snapshot_path(index).name
    generations = Generations(open_view(index, embedder, plugins=False), owned=True)
    writer = Writer(index, generations, compact_after=3,
                    opener=lambda: open_view(index, embedder, plugins=False))
    try:
        for i in range(3):
            corpus[f"n{i}"] = _record(rng, f"n{i}")
            writer.write([Put(_doc(corpus[f"n{i}"]), "t")], None)
        def compacted() -> bool:
            corpus["late"] = _record(rng, "late")  # writes go on while it builds
            writer.write([Put(_doc(corpus["late"]), "t")], None)
            return bool(writer.compactions)

        wait_until(compacted, "the background compaction", poll=0.2)
        assert writer.compactions and writer.compactions[0]["status"] == "compacted", writer.compactions
        with generations.lease() as served:
            assert served.engine.snapshot.path.name != first  # serving the new base
            assert served.engine.live.seq == writer.wal.last_seq
            assert served.engine.snapshot.manifest["counts"]["documents"] == len(corpus)
        assert writer.wal.base_seq == writer.compactions[0]["generation"]  # the folded records are gone
    finally:
        writer.close()
        generations.close()
    rebuilt = _rebuild(tmp_path, corpus, embedder)
    reopened = open_view(index, embedder, plugins=False)
    try:
        queries = _queries(rng)
        _compare(_rankings(reopened, queries), _rankings(rebuilt, queries))
    finally:
        reopened.close()
        rebuilt.close()


def test_changes_logged_before_the_id_and_acl_rules_still_open_and_a_write_meets_the_rules(tmp_path, embedder):
    """A log written by an older build may hold an id with '/' or a keyword-like ACL entry: the
    index must still open (the change is served as it was acknowledged), while every new
    write meets the rules, the local operator's included."""
    from dataclasses import replace

    from indexes.live import record_payload, wal_path
    from indexes.wal import WriteAheadLog
    from retrieval.errors import InvalidRequest

    rng = random.Random(9)
    index = _index(tmp_path, {f"d{i}": _record(rng, f"d{i}") for i in range(3)}, embedder)
    old = replace(_doc(_record(rng, "fresh")), id="notes/legacy", acl=("everyone", "group:alpha"))
    vectors = np.zeros((1, embedder.dim), np.float32)
    vectors[0, 0] = 1.0
    payload = record_payload([(Put(old, "api"), vectors), (SetAcl("d0", ("all",)), None)], embedder.model_id, 1500)
    log = WriteAheadLog(wal_path(index))
    log.append("write", payload)
    log.close()
    engine = open_view(index, embedder, plugins=False)
    generations = Generations(engine, owned=True)
    writer = Writer(index, generations)
    try:
        catalog = engine.snapshot.catalog
        assert catalog.document_acl("notes/legacy") == ("everyone", "group:alpha") and catalog.document_acl("d0") == ("all",)
        for change in (Put(replace(old, id="notes/new"), "cli"), Put(replace(old, id="fine"), "cli"),
                       SetAcl("d1", ("nobody",)), Delete("a/b")):
            with pytest.raises(InvalidRequest):
                writer.write([change], None)
        assert writer.wal.last_seq == 1
    finally:
        writer.close()
        generations.close()
