"""Training and held-out pairs for the answer model (see indexes/answer_train.py).

Everything here is a pure function of the dataset files and a seed, so a run rebuilt on
resume gets the same pairs in the same order (the checkpoint stores a digest to prove it).

Sources (MODEL_CARD.md has their licenses):
- SQuAD 2.0: dev-v2.0.json (35 articles) and train-v2.0-partial.json (10 train articles).
  `HOLDOUT` dev articles, drawn with a fixed seed independent of the training seed, are
  never used for training, not even as negatives, so figures from different seeds compare.
- SciFact: claims of qrels/train.tsv with their cited abstracts. Abstracts cited by the test
  qrels are kept out of training altogether, also as negatives; the test qrels only serve
  as an out-of-domain figure.

Pair kinds (label 1 = the passage answers):
- answerable (1): an answerable question and its own paragraph, when a gold answer survives
  truncation to the model's window (otherwise the label would be wrong for what it sees);
- unanswerable_own (0): an unanswerable question and its own paragraph, the hard "on topic
  but not answering" case SQuAD 2.0 was written for;
- same_article (0): an answerable question and another paragraph of its article;
- bm25_other_article (0): an answerable question and one of its top BM25 paragraphs from
  another article;
- scifact_pos (1) / scifact_bm25 (0): a SciFact claim and its cited abstract / a top BM25
  abstract it does not cite;
- easy_other_corpus (0): a SQuAD question with a random SciFact abstract, or a SciFact claim
  with a random SQuAD paragraph.
Negative paragraphs that contain a gold answer string of the question are skipped, since
they may well answer it.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

HOLDOUT = 7
HOLDOUT_SEED = 20240607  # fixed: the held-out articles do not change with --seed
EVAL_SEED = 7919
MIX: dict[str, float] = {  # share of --max-pairs per kind; a kind short of pairs hands its share on
    "answerable": 0.32, "unanswerable_own": 0.17, "same_article": 0.17, "bm25_other_article": 0.20,
    "scifact_pos": 0.03, "scifact_bm25": 0.06, "easy_other_corpus": 0.05,
}
POSITIVE_KINDS = frozenset({"answerable", "scifact_pos", "own_answerable"})


@dataclass(frozen=True)
class Pair:
    question: str
    passage: str
    label: int
    kind: str
    group: str  # the question's id: held-out metrics group candidates by it


@dataclass(frozen=True)
class Paragraph:
    pid: int
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    pid: int
    answers: tuple[tuple[str, int], ...]  # (text, char start); empty when unanswerable

    @property
    def answerable(self) -> bool:
        return bool(self.answers)


@dataclass(frozen=True)
class Squad:
    paragraphs: list[Paragraph]
    questions: list[Question]
    dev_titles: list[str]
    train_titles: list[str]


def load_squad(dev: Path, train: Path | None) -> Squad:
    """Flatten SQuAD 2.0 files into paragraphs and questions (dev first, then train)."""
    paragraphs: list[Paragraph] = []
    questions: list[Question] = []
    titles: dict[str, list[str]] = {"dev": [], "train": []}
    for split, path in (("dev", dev), ("train", train)):
        if path is None:
            continue
        for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
            titles[split].append(article["title"])
            for para in article["paragraphs"]:
                pid = len(paragraphs)
                paragraphs.append(Paragraph(pid, article["title"], para["context"]))
                for qa in para["qas"]:
                    answers = () if qa.get("is_impossible") else tuple(
                        (a["text"], int(a["answer_start"])) for a in qa["answers"])
                    questions.append(Question(qa["id"], qa["question"].strip(), pid, answers))
    return Squad(paragraphs, questions, titles["dev"], titles["train"])


def heldout_titles(squad: Squad, n: int = HOLDOUT) -> list[str]:
    """The held-out dev articles: a fixed seeded sample, sorted by title."""
    return sorted(random.Random(HOLDOUT_SEED).sample(sorted(squad.dev_titles), n))


def load_scifact(folder: Path) -> tuple[dict[str, str], dict[str, str], dict[str, list[str]], dict[str, list[str]]]:
    """(claims by id, abstracts by id as "title text", train qrels, test qrels)."""
    claims = {r["_id"]: r["text"] for r in _jsonl(folder / "queries.jsonl")}
    docs = {r["_id"]: f"{r.get('title', '')} {r['text']}".strip() for r in _jsonl(folder / "corpus.jsonl")}
    qrels = {name: _qrels(folder / "qrels" / f"{name}.tsv") for name in ("train", "test")}
    return claims, docs, qrels["train"], qrels["test"]


def answer_in_window(tokenizer: Any, question: Question, passage: str, max_length: int, max_question: int) -> bool:
    """Whether some gold answer ends inside the passage tokens the model keeps."""
    q_len = min(len(tokenizer.encode(question.text, add_special_tokens=False).ids), max_question)
    room = max(0, max_length - 3 - q_len)
    offsets = tokenizer.encode(passage, add_special_tokens=False).offsets
    kept_end = len(passage) if len(offsets) <= room else (offsets[room - 1][1] if room else 0)
    return any(start + len(text) <= kept_end for text, start in question.answers)


def training_pairs(squad: Squad, heldout: Sequence[str], scifact: Path | None, tokenizer: Any, max_pairs: int,
                   seed: int, max_length: int, max_question: int) -> list[Pair]:
    """Up to `max_pairs` training pairs mixed by `MIX`, shuffled with `seed`."""
    rng = random.Random(seed)
    held = set(heldout)
    paras = [p for p in squad.paragraphs if p.title not in held]
    questions = [q for q in squad.questions if squad.paragraphs[q.pid].title not in held]
    answerable = [q for q in questions if q.answerable
                  and answer_in_window(tokenizer, q, squad.paragraphs[q.pid].text, max_length, max_question)]
    pools: dict[str, list[Pair]] = {
        "answerable": [_own(squad, q, "answerable") for q in answerable],
        "unanswerable_own": [_own(squad, q, "unanswerable_own") for q in questions if not q.answerable],
        "same_article": _same_article(squad, answerable, paras, rng, per_question=1),
        "bm25_other_article": _bm25_other_article(squad, answerable, paras, rng, per_question=1, top=3),
    }
    if scifact is not None:
        claims, docs, train_qrels, test_qrels = load_scifact(scifact)
        banned = {d for cited in test_qrels.values() for d in cited}
        usable = {d: t for d, t in docs.items() if d not in banned}
        pools["scifact_pos"], pools["scifact_bm25"] = _scifact(claims, usable, train_qrels, rng, negatives=2, top=5)
        pools["easy_other_corpus"] = _easy(answerable, squad, paras, claims, train_qrels, usable, rng)
    for pool in pools.values():
        rng.shuffle(pool)
    quotas = _quotas({k: len(v) for k, v in pools.items()}, max_pairs)
    pairs = [p for kind, pool in pools.items() for p in pool[: quotas[kind]]]
    rng.shuffle(pairs)
    return pairs


def heldout_pairs(squad: Squad, heldout: Sequence[str], tokenizer: Any, max_length: int, max_question: int,
                  same_article: int = 2, bm25: int = 2) -> tuple[list[Pair], dict[str, int]]:
    """Evaluation pairs over the held-out articles, the same for every training seed.

    Each question with its own paragraph (own_answerable / own_unanswerable); each answerable
    question also with `same_article` random other paragraphs of its article and its top
    `bm25` paragraphs from other articles (any of the 45, the training ones included).
    Returns the pairs and what was left out.
    """
    rng = random.Random(EVAL_SEED)
    held = set(heldout)
    questions = [q for q in squad.questions if squad.paragraphs[q.pid].title in held]
    kept = [q for q in questions if not q.answerable
            or answer_in_window(tokenizer, q, squad.paragraphs[q.pid].text, max_length, max_question)]
    answerable = [q for q in kept if q.answerable]
    pairs = [_own(squad, q, "own_answerable" if q.answerable else "own_unanswerable") for q in kept]
    pairs += _same_article(squad, answerable, squad.paragraphs, rng, per_question=same_article)
    pairs += _bm25_other_article(squad, answerable, squad.paragraphs, None, per_question=bm25, top=bm25)
    return pairs, {"answer_outside_window": len(questions) - len(kept)}


def scifact_test_pairs(folder: Path, negatives: int = 3) -> list[Pair]:
    """Out-of-domain check: each SciFact test claim with its cited abstracts (1) and its top
    `negatives` BM25 abstracts it does not cite (0). Evaluation only."""
    claims, docs, _, test_qrels = load_scifact(folder)
    pos, neg = _scifact(claims, docs, test_qrels, None, negatives=negatives, top=negatives)
    return pos + neg


def counts(pairs: Iterable[Pair]) -> dict[str, int]:
    """Pairs per kind, in MIX order, then any other kinds."""
    c = Counter(p.kind for p in pairs)
    return {k: c[k] for k in [*MIX, *sorted(set(c) - set(MIX))] if c[k]}


def _own(squad: Squad, q: Question, kind: str) -> Pair:
    return Pair(q.text, squad.paragraphs[q.pid].text, int(q.answerable), kind, q.qid)


def _contains_answer(q: Question, text: str) -> bool:
    low = text.lower()
    return any(a.lower() in low for a, _ in q.answers if a.strip())


def _same_article(squad: Squad, questions: Sequence[Question], paras: Sequence[Paragraph], rng: random.Random,
                  per_question: int) -> list[Pair]:
    by_title: dict[str, list[Paragraph]] = defaultdict(list)
    for p in paras:
        by_title[p.title].append(p)
    out = []
    for q in questions:
        candidates = [p for p in by_title[squad.paragraphs[q.pid].title]
                      if p.pid != q.pid and not _contains_answer(q, p.text)]
        for p in rng.sample(candidates, min(per_question, len(candidates))):
            out.append(Pair(q.text, p.text, 0, "same_article", q.qid))
    return out


def _bm25_other_article(squad: Squad, questions: Sequence[Question], paras: Sequence[Paragraph],
                        rng: random.Random | None, per_question: int, top: int) -> list[Pair]:
    """`per_question` of the `top` best BM25 paragraphs from other articles (at random with
    `rng`, else the best ones)."""
    from indexes.bm25 import Bm25Index

    index = Bm25Index.build([p.text for p in paras])
    titles = np.array([p.title for p in paras], dtype=object)
    out = []
    for q in questions:
        scores = np.array(index.scores(q.text), dtype=np.float64)
        scores[titles == squad.paragraphs[q.pid].title] = -np.inf
        best: list[Paragraph] = []
        for row in np.argsort(-scores, kind="stable"):
            if not scores[row] > 0 or len(best) == top:  # no shared term: not a neighbour
                break
            if not _contains_answer(q, paras[row].text):
                best.append(paras[row])
        chosen = best[:per_question] if rng is None else rng.sample(best, min(per_question, len(best)))
        out += [Pair(q.text, p.text, 0, "bm25_other_article", q.qid) for p in chosen]
    return out


def _scifact(claims: dict[str, str], docs: dict[str, str], qrels: dict[str, list[str]], rng: random.Random | None,
             negatives: int, top: int) -> tuple[list[Pair], list[Pair]]:
    from indexes.bm25 import Bm25Index

    ids = sorted(docs)
    index = Bm25Index.build([docs[d] for d in ids])
    pos, neg = [], []
    for qid in sorted(qrels, key=int):
        cited = [d for d in qrels[qid] if d in docs]
        if qid not in claims or not cited:
            continue
        pos += [Pair(claims[qid], docs[d], 1, "scifact_pos", f"scifact:{qid}") for d in cited]
        scores = index.scores(claims[qid])
        best = [ids[r] for r in np.argsort(-scores, kind="stable")[: top + len(cited)] if ids[r] not in cited][:top]
        chosen = best[:negatives] if rng is None else rng.sample(best, min(negatives, len(best)))
        neg += [Pair(claims[qid], docs[d], 0, "scifact_bm25", f"scifact:{qid}") for d in chosen]
    return pos, neg


def _easy(answerable: Sequence[Question], squad: Squad, paras: Sequence[Paragraph], claims: dict[str, str],
          train_qrels: dict[str, list[str]], docs: dict[str, str], rng: random.Random) -> list[Pair]:
    doc_ids = sorted(docs)
    out = [Pair(q.text, docs[rng.choice(doc_ids)], 0, "easy_other_corpus", q.qid)
           for q in rng.sample(list(answerable), min(len(answerable), 2000))]
    out += [Pair(claims[qid], rng.choice(paras).text, 0, "easy_other_corpus", f"scifact:{qid}")
            for qid in sorted(train_qrels, key=int) if qid in claims]
    return out


def _quotas(available: dict[str, int], total: int) -> dict[str, int]:
    """Split `total` by MIX; the share a kind cannot fill goes to the others in proportion."""
    quotas = {k: 0 for k in available}
    open_kinds = [k for k in MIX if available.get(k)]
    left = total
    while left > 0 and open_kinds:
        weight = sum(MIX[k] for k in open_kinds)
        shares = {k: int(left * MIX[k] / weight) for k in open_kinds}
        if not any(shares.values()):  # fewer pairs left than kinds: one each, in MIX order
            shares = {k: 1 for k in open_kinds[:left]}
        for k, s in shares.items():
            take = min(s, available[k] - quotas[k])
            quotas[k] += take
            left -= take
        open_kinds = [k for k in open_kinds if quotas[k] < available[k]]
    return quotas


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _qrels(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    with path.open(encoding="utf-8") as f:
        next(f)  # header
        for line in f:
            qid, doc, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                out[qid].append(doc)
    return dict(out)
