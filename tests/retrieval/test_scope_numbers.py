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

from indexes.snapshot import build_snapshot
from retrieval.types import Principal
from routes.engine import open_engine

TODAY = date(2025, 11, 1)
SYLLABLES = ["ka", "lo", "mi", "ren", "tas", "vo", "qui", "bel", "dor", "fen", "gal", "hus", "ix", "jor", "nup", "sel"]
SECRETS = ["zorvane", "quillet", "brisko", "talvera", "munrick", "pellory"]
PRINCIPALS = [Principal("erin"), Principal("ivo", ("ops",)), Principal("uma", ("ops", "legal")), Principal("sam")]


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


def _write(docs: list[dict], folder) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))


@pytest.fixture(scope="module")
def scoped_engines(tmp_path_factory, embedder):
    docs = _corpus(random.Random(11))
    root = tmp_path_factory.mktemp("scope-numbers")
    _write(docs, root / "all")
    build_snapshot([root / "all"], root / "index-all", embedder)
    full = open_engine(root / "index-all", embedder, today=TODAY)
    alone = {}
    for p in PRINCIPALS:
        _write([d for d in docs if p.can_read(d["acl"])], root / f"only-{p.id}")
        build_snapshot([root / f"only-{p.id}"], root / f"index-{p.id}", embedder)
        alone[p.id] = open_engine(root / f"index-{p.id}", embedder, today=TODAY)
    yield full, alone, _questions(docs, random.Random(5))
    for e in [full, *alone.values()]:
        e.close()


def numbers(result) -> dict:
    """Every number and id of an answer, rounded as the answer JSON rounds (4 decimals)."""
    r4 = lambda x: round(float(x), 4)  # noqa: E731
    return {
        "status": result.status, "gap": result.gap, "stop": result.stop_reason,
        "route": {k: r4(v) for k, v in result.decision.scores.items()}, "chosen": result.decision.chosen,
        "context": [(h.chunk_id, r4(h.score), h.retrievers) for h in result.context],
        "attempts": [(a.plan.route, a.plan.strategy, a.plan.query_text(), len(a.hits), a.error,
                      a.grade.to_json() if a.grade else None, [(h.chunk_id, r4(h.score)) for h in a.hits]) for a in result.attempts],
        "constraints": result.constraints.to_json(),
    }


def test_every_number_in_an_answer_equals_the_number_without_forbidden_documents(scoped_engines):
    full, alone, questions = scoped_engines
    compared = 0
    for p in PRINCIPALS:
        for q in questions:
            assert numbers(full.query(q, p)) == numbers(alone[p.id].query(q, p)), (p.id, q)
            compared += 1
    assert compared == len(PRINCIPALS) * len(questions)


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
