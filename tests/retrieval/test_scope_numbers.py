"""Every number a caller sees is computed over the caller's readable scope: on a generated
corpus (not the demo), each answer's numbers (hit scores, grade scores, route scores, counts,
ranks) equal those of an index holding only the documents that caller may read. And the
accent-variant word oracle finds nothing: "calendar W" and "calendar Ẃ" embed alike, so any
number that differs between them says whether W occurs in a forbidden document."""

from __future__ import annotations

import json
import random
from datetime import date

import pytest

import indexes.dense_index as dense_module
from indexes.snapshot_build import BuildOptions, build_snapshot
from retrieval.answer import gap_json
from retrieval.types import Principal
from routes.service.view import open_view

pytestmark = pytest.mark.slow  # builds an index per principal, then compares every answer

TODAY = date(2025, 11, 1)
SYLLABLES = ["ka", "lo", "mi", "ren", "tas", "vo", "qui", "bel", "dor", "fen", "gal", "hus", "ix", "jor", "nup", "sel"]
SECRETS = ["zorvane", "quillet", "brisko", "talvera", "munrick", "pellory"]
PRINCIPALS = [Principal("erin", (), frozenset({"query", "sql"})), Principal("ivo", ("ops",), frozenset({"query", "sql"})),
              Principal("uma", ("ops", "legal"), frozenset({"query", "sql"})), Principal("sam", (), frozenset({"query", "sql"}))]
SQL_QUESTIONS = ["How many orders are there?", "How many open orders does north have?",
                 "What is the total amount of shipped orders?", "How many orders were placed in Q2 2025?",
                 "Which team has the most orders?", "What is the average amount per team?", "What is the status of ORD-123?"]
STATEMENTS = ["SELECT team, count(*), sum(amount), min(placed_on), max(amount) FROM orders GROUP BY team ORDER BY team",
              "SELECT order_id, status, amount FROM orders WHERE amount > 100 ORDER BY order_id"]


def _corpus(rng: random.Random) -> list[dict]:
    vocab = sorted({rng.choice(SYLLABLES) + rng.choice(SYLLABLES) + rng.choice(SYLLABLES) for _ in range(400)})
    docs = []
    for i in range(60):
        words = [rng.choice(vocab) for _ in range(rng.randint(25, 70))]
        acl = rng.choice([["public"], ["public"], ["group:ops"], ["group:legal"], ["sam"], ["group:admin"]])
        if i < len(SECRETS):  # secret words live in forbidden documents only
            words.insert(rng.randrange(len(words)), SECRETS[i])
            acl = ["group:admin"]
        text = "The holiday calendar notes: " + " ".join(words) + "."
        docs.append({"id": f"d{i:02d}", "title": f"Record {i} {words[0]}", "text": text, "acl": acl,
                     "source": rng.choice(["wiki", "tickets"]), "date": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                     "metadata": {"ref": f"REF-{1000 + i}"}})
    return docs


def _questions(docs: list[dict], rng: random.Random) -> list[str]:
    words = sorted({w for d in docs for w in d["text"].rstrip(".").split()[4:]})
    qs = []
    for _ in range(10):
        a, b, c = rng.sample(words, 3)
        qs += [f"What does the holiday calendar say about {a} and {b}?", f"{a} {c}", f'"{a}" near {b} in March 2025',
               f"REF-{1000 + rng.randrange(60)} {a}"]
    # words that only forbidden documents hold, next to public ones
    qs += [f"What does the holiday calendar say about {w} and {rng.choice(words)}?" for w in SECRETS]
    return qs


def _rows(rng: random.Random) -> list[dict]:
    """A table with a row ACL: orders of three teams, some rows private."""
    return [{"order_id": f"ORD-{100 + i}", "team": rng.choice(["north", "south", "east"]),
             "status": rng.choice(["open", "shipped", "held"]), "amount": rng.randint(5, 500),
             "placed_on": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
             "acl": rng.choice(["public", "public", "group:ops", "group:legal", "sam", "group:admin"])} for i in range(80)]


def _write(docs: list[dict], folder, rows: list[dict] = ()) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    lines = ["order_id,team,status,amount,placed_on,acl"] + [",".join(str(r[c]) for c in ("order_id", "team", "status", "amount",
                                                                                          "placed_on", "acl")) for r in rows]
    (folder / "orders.csv").write_text("\n".join(lines) + "\n")
    (folder / "orders.acl.json").write_text(json.dumps({"acl": ["public"]}))


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The generated corpus for the full index and the readable part of it for each principal."""
    docs, rows = _corpus(random.Random(11)), _rows(random.Random(3))
    root = tmp_path_factory.mktemp("scope-numbers-sources")
    _write(docs, root / "all", rows)
    for p in PRINCIPALS:
        _write([d for d in docs if p.can_read(d["acl"])], root / f"only-{p.id}", [r for r in rows if p.can_read([r["acl"]])])
    return root, docs


@pytest.fixture(scope="module")
def scan_indexes(sources, tmp_path_factory, embedder):
    """The full index and one per principal, every passage embedded by its own build, with
    exact scans only (no dense graphs)."""
    root = tmp_path_factory.mktemp("scope-numbers-scan")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dense_module, "EXACT_BELOW", 3)
        for name in ("all", *(p.id for p in PRINCIPALS)):
            src = sources[0] / ("all" if name == "all" else f"only-{name}")
            build_snapshot([src], root / f"index-{name}", embedder, BuildOptions())
    return root


@pytest.fixture(scope="module", params=["scan", "graphs"])
def scoped_engines(request, sources, scan_indexes, tmp_path_factory, embedder):
    """The full index and one per principal; with "graphs", every dense index holds an HNSW
    graph per access class of at least 3 chunks (walked whenever a scope allows more). The
    graphs' indexes take the vectors of the scan index of the same documents (each was
    embedded by a build that saw only those documents)."""
    root, docs = sources
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dense_module, "EXACT_BELOW", 3)
        built = scan_indexes
        if request.param == "graphs":
            built = tmp_path_factory.mktemp("scope-numbers-graphs")
            for name in ("all", *(p.id for p in PRINCIPALS)):
                src = root / ("all" if name == "all" else f"only-{name}")
                manifest = build_snapshot([src], built / f"index-{name}", embedder,
                                          BuildOptions(dense_graph_from=1, reuse_from=scan_indexes / f"index-{name}"))
                assert manifest["embeddings"]["computed"] == 0, manifest["embeddings"]
        full = open_view(built / "index-all", embedder, today=TODAY)
        alone = {p.id: open_view(built / f"index-{p.id}", embedder, today=TODAY) for p in PRINCIPALS}
        assert (full.snapshot.dense.graphs >= 4) == (request.param == "graphs")
        yield full, alone, _questions(docs, random.Random(5))
    for e in [full, *alone.values()]:
        e.close()


def numbers(result) -> dict:
    """Every number and id of an answer, rounded as the answer JSON rounds (4 decimals)."""
    r4 = lambda x: round(float(x), 4)  # noqa: E731
    return {
        "status": result.status, "gap": gap_json(result.gap), "stop": result.stop_reason,
        "route": {k: r4(v) for k, v in result.decision.scores.items()}, "chosen": result.decision.chosen,
        "context": [(h.chunk_id, r4(h.score), h.retrievers) for h in result.context],
        "attempts": [(a.plan.route, a.plan.strategy, a.plan.query_text(), len(a.hits), a.error,
                      a.grade.to_json() if a.grade else None, [(h.chunk_id, r4(h.score)) for h in a.hits])
                     for a in result.attempts],
        "constraints": result.constraints.to_json(),
        "rows": (result.rows.columns, result.rows.rows) if result.rows is not None else None,
    }


def test_every_number_in_an_answer_equals_the_number_without_forbidden_documents(scoped_engines):
    full, alone, questions = scoped_engines
    compared = 0
    for p in PRINCIPALS:
        for q in questions:
            assert numbers(full.query(q, p)) == numbers(alone[p.id].query(q, p)), (p.id, q)
            compared += 1
    assert compared == len(PRINCIPALS) * len(questions)


def test_every_retriever_and_the_sql_route_give_the_numbers_of_the_readable_scope(scoped_engines):
    from retrieval.search import search
    from retrieval.types import Filters

    full, alone, questions = scoped_engines
    hits = lambda e, r, q, p: [(h.chunk_id, round(h.score, 4)) for h in search(e.retrievers, r, q, p, 8, Filters(), e.limits)]  # noqa: E731
    rows = lambda out: (out.columns, out.rows, out.doc_ids) if hasattr(out, "rows") else (out.reason, out.unlinked)  # noqa: E731
    for p in PRINCIPALS:
        for q in questions[::3]:
            for r in ("exact", "bm25", "dense", "hybrid"):
                assert hits(full, r, q, p) == hits(alone[p.id], r, q, p), (p.id, r, q)
        for q in SQL_QUESTIONS:
            assert rows(full.sql.answer(q, p, TODAY)) == rows(alone[p.id].sql.answer(q, p, TODAY)), (p.id, q)
            assert numbers(full.query(q, p)) == numbers(alone[p.id].query(q, p)), (p.id, q)
        for st in STATEMENTS:
            assert rows(full.sql.run_statement(st, p)) == rows(alone[p.id].sql.run_statement(st, p)), (p.id, st)


@pytest.mark.parametrize("word", SECRETS)
def test_an_accent_variant_of_a_forbidden_word_changes_no_number(scoped_engines, word):
    full, _, _ = scoped_engines
    i = next(i for i, c in enumerate(word) if c in "aeiou")
    accented = word[:i] + {"a": "\u00e1", "e": "\u00e9", "i": "\u00ed", "o": "\u00f3", "u": "\u00fa"}[word[i]] + word[i + 1:]
    assert full.embedder.encode_query(word).tolist() == full.embedder.encode_query(accented).tolist()  # the premise
    for p in PRINCIPALS[:3]:  # none of them may read the admin documents holding the word
        plain = numbers(full.query(f"holiday calendar {word}", p))
        variant = numbers(full.query(f"holiday calendar {accented}", p))
        for n in (plain, variant):
            n.pop("constraints")
            for a in n["attempts"]:
                a_query = a[2]
                assert word in a_query or accented in a_query
        strip = lambda n: json.loads(json.dumps(n, ensure_ascii=False).replace(accented, "X").replace(word, "X"))  # noqa: E731
        assert strip(plain) == strip(variant), (p.id, word)


def _strip_times(value):
    """An answer as JSON without what differs between two runs of the same work, numbers to
    4 decimals (as the answer rounds grade scores)."""
    if isinstance(value, dict):
        return {k: _strip_times(v) for k, v in value.items() if k not in ("trace_id", "elapsed_ms", "ms")}
    if isinstance(value, list):
        return [_strip_times(v) for v in value]
    if isinstance(value, float):  # BM25 scores over a scope and over an index of it agree to ~1e-7
        return round(value, 4)
    return value


def test_http_and_tool_answers_carry_the_numbers_of_the_readable_scope(scoped_engines, tmp_path):
    """The same comparison over the interfaces: two live servers, one on the full index and one
    on the index of what the caller may read, give the same JSON to the same key."""

    import httpx

    from routes.server.app import create_app
    from auth.keys import KeyStore
    from routes.service.settings import Settings
    from tests.conftest import LiveServer

    full, alone, questions = scoped_engines
    p = PRINCIPALS[2]
    store = KeyStore(tmp_path / "keys.json")
    key = store.add(p.id, list(p.groups), ["query", "sql"])[0]
    settings = Settings(index_dir=tmp_path / "srv", rate_per_second=1000.0, burst=1000, max_concurrent_per_key=64)
    calls = [("/v1/query", {"question": q}) for q in questions[::4] + SQL_QUESTIONS[:3]]
    calls += [("/v1/search", {"query": q, "retriever": r}) for q in questions[1::8] for r in ("exact", "bm25", "dense", "hybrid")]
    calls += [("/v1/sql", {"question": q}) for q in SQL_QUESTIONS] + [("/v1/sql", {"sql": st}) for st in STATEMENTS]
    calls += [("/v1/tools/call", {"call_id": "c", "name": "retrieve_context", "arguments": {"question": q}})
              for q in questions[2::8]]
    answers = []
    for engine in (full, alone[p.id]):
        (tmp_path / "srv").mkdir(exist_ok=True)
        with LiveServer(create_app(settings, engine=engine, keys=store)) as server:
            with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:
                answers.append([_strip_times(client.post(server.url + path, json=body).json()) for path, body in calls])
    assert len(answers[0]) == len(calls) > 30
    for call, a, b in zip(calls, *answers, strict=True):
        ranked_a, ranked_b = a.get("hits", a.get("context", [])), b.get("hits", b.get("context", []))
        assert a == b, (call, [(x.get("score"), y.get("score")) for x, y in zip(ranked_a, ranked_b, strict=False)])
