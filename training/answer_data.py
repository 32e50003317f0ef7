"""Training and held-out pairs for the answer model (see training/answer_train.py).

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

Recipe 2 (`MIX_V2`) adds two things aimed at what recipe 1 got wrong in retrieval use
(on-topic passages that lack the fact, and questions worded unlike the passage):
- answer_removed (0): an answerable question and its own paragraph with every sentence that
  holds a gold answer cut out: same topic, same words, no answer;
- paraphrased questions: in a share of the SQuAD pairs of every kind (so wording is no
  label shortcut) up to two question words that also occur in the passage are replaced by a
  near neighbour in the sentence encoder's space (`synonym_table`), so that matching the
  passage's exact words stops being enough.
Answerable pairs also carry the gold answer's character span for the span head.
"""

from __future__ import annotations

import json
import random
import re
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
MIX_V2: dict[str, float] = {
    "answerable": 0.32, "unanswerable_own": 0.14, "answer_removed": 0.14, "same_article": 0.12,
    "bm25_other_article": 0.14, "scifact_pos": 0.03, "scifact_bm25": 0.06, "easy_other_corpus": 0.05,
}
MIXES = {1: MIX, 2: MIX_V2}
POSITIVE_KINDS = frozenset({"answerable", "scifact_pos", "own_answerable"})
SQUAD_KINDS = frozenset({"answerable", "unanswerable_own", "answer_removed", "same_article", "bm25_other_article"})
PARAPHRASE_SHARE = 0.25  # recipe 2: SQuAD pairs whose question is reworded
SYNONYM_MIN_COSINE = 0.70


@dataclass(frozen=True)
class Pair:
    question: str
    passage: str
    label: int
    kind: str
    group: str  # the question's id: held-out metrics group candidates by it
    answer: tuple[int, int] | None = None  # gold answer's [start, end) characters in passage


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


def span_targets(tokenizer: Any, pairs: Sequence[Pair], max_length: int, max_question: int) -> np.ndarray:
    """(start, end) token positions of each pair's gold answer in its `encode_pairs` row:
    (0, 0), i.e. [CLS], for a pair that does not answer; (-100, -100), no target, for an
    answering pair without a span or whose span is cut off by truncation."""
    out = np.full((len(pairs), 2), -100, dtype=np.int64)
    q_enc = tokenizer.encode_batch([p.question for p in pairs], add_special_tokens=False)
    p_enc = tokenizer.encode_batch([p.passage for p in pairs], add_special_tokens=False)
    for i, (pair, q, enc) in enumerate(zip(pairs, q_enc, p_enc, strict=True)):
        if not pair.label:
            out[i] = 0
            continue
        if pair.answer is None:
            continue
        q_len = min(len(q.ids), max_question)
        kept = max(0, max_length - 3 - q_len)
        a, b = pair.answer
        toks = [j for j, (s, e) in enumerate(enc.offsets[:kept]) if e > a and s < b]
        if toks and enc.offsets[toks[-1]][1] >= b:
            out[i] = (q_len + 2 + toks[0], q_len + 2 + toks[-1])
    return out


def training_pairs(squad: Squad, heldout: Sequence[str], scifact: Path | None, tokenizer: Any, max_pairs: int,
                   seed: int, max_length: int, max_question: int, recipe: int = 1,
                   synonyms: dict[str, list[str]] | None = None) -> list[Pair]:
    """Up to `max_pairs` training pairs mixed by recipe's `MIXES` entry, shuffled with `seed`;
    recipe 2 rewords a share of the questions with `synonyms` (see `synonym_table`)."""
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
    if recipe >= 2:
        pools["answer_removed"] = _answer_removed(squad, answerable)
    if scifact is not None:
        claims, docs, train_qrels, test_qrels = load_scifact(scifact)
        banned = {d for cited in test_qrels.values() for d in cited}
        usable = {d: t for d, t in docs.items() if d not in banned}
        pools["scifact_pos"], pools["scifact_bm25"] = _scifact(claims, usable, train_qrels, rng, negatives=2, top=5)
        pools["easy_other_corpus"] = _easy(answerable, squad, paras, claims, train_qrels, usable, rng)
    for pool in pools.values():
        rng.shuffle(pool)
    mix = MIXES[recipe]
    quotas = _quotas({k: len(v) for k, v in pools.items()}, max_pairs, mix)
    pairs = [p for kind in mix for p in pools.get(kind, [])[: quotas.get(kind, 0)]]
    rng.shuffle(pairs)
    if recipe >= 2 and synonyms:
        pairs = [paraphrased(p, synonyms, rng) if p.kind in SQUAD_KINDS and rng.random() < PARAPHRASE_SHARE else p
                 for p in pairs]
    return pairs


def synonym_table(words: Sequence[str], vectors: np.ndarray, min_cosine: float = SYNONYM_MIN_COSINE,
                  per_word: int = 3) -> dict[str, list[str]]:
    """Each word's nearest other words by cosine of their sentence-encoder vectors (rows of
    `vectors`), at least `min_cosine`, skipping forms of the same word (a shared 4-letter
    prefix): substitutes a question can be reworded with. Noisy by nature (neighbours can
    be co-hyponyms: weekly/monthly), hence the high bar and few substitutions per question."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    table: dict[str, list[str]] = {}
    for start in range(0, len(words), 1024):
        sims = unit[start : start + 1024] @ unit.T
        for i, row in enumerate(sims, start):
            order = np.argsort(-row, kind="stable")[: per_word * 4 + 1]
            near = [words[j] for j in order if j != i and row[j] >= min_cosine and words[j][:4] != words[i][:4]]
            if near:
                table[words[i]] = near[:per_word]
    return table


def vocabulary(texts: Iterable[str], min_count: int = 2) -> list[str]:
    """Lower-case alphabetic words of 4+ letters seen at least `min_count` times, sorted."""
    c: Counter[str] = Counter()
    for t in texts:
        c.update(w.lower() for w in _WORD.findall(t))
    return sorted(w for w, n in c.items() if n >= min_count)


def paraphrased(pair: Pair, synonyms: dict[str, list[str]], rng: random.Random, most: int = 2) -> Pair:
    """`pair` with up to `most` lower-case question words (names stay: rewording "Wall Street"
    changes what is asked) that also occur in the passage replaced by a synonym that does
    not; the passage and label stay (the kind gets a "+para" suffix)."""
    in_passage = {w.lower() for w in _WORD.findall(pair.passage)}
    spots = [m for m in _WORD.finditer(pair.question) if m.group().islower() and m.group() in in_passage
             and any(s not in in_passage for s in synonyms.get(m.group(), ()))]
    if not spots:
        return pair
    text = pair.question
    for m in sorted(rng.sample(spots, min(most, len(spots))), key=lambda m: -m.start()):
        options = [s for s in synonyms[m.group()] if s not in in_passage]
        word = rng.choice(options)
        text = text[: m.start()] + word + text[m.end() :]
    return Pair(text, pair.passage, pair.label, pair.kind + "+para", pair.group, pair.answer)


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
    """Pairs per kind, in MIX_V2 order, then any other kinds."""
    c = Counter(p.kind for p in pairs)
    return {k: c[k] for k in [*MIX_V2, *sorted(set(c) - set(MIX_V2))] if c[k]}


def _own(squad: Squad, q: Question, kind: str) -> Pair:
    span = (q.answers[0][1], q.answers[0][1] + len(q.answers[0][0])) if q.answers else None
    return Pair(q.text, squad.paragraphs[q.pid].text, int(q.answerable), kind, q.qid, span)


_WORD = re.compile(r"[A-Za-z]{4,}")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def _answer_removed(squad: Squad, questions: Sequence[Question], min_share: float = 0.4) -> list[Pair]:
    """Each question's own paragraph without the sentences that hold any gold answer, when
    what is left keeps at least `min_share` of the text and no gold answer string."""
    out = []
    for q in questions:
        text = squad.paragraphs[q.pid].text
        bounds, start = [], 0
        for m in _SENTENCE_END.finditer(text):
            bounds.append((start, m.start()))
            start = m.end()
        bounds.append((start, len(text)))
        spans = [(s, s + len(a)) for a, s in q.answers]
        kept = [text[a:b] for a, b in bounds if not any(s < b and e > a for s, e in spans)]
        rest = " ".join(kept)
        if len(kept) < 2 or len(rest) < min_share * len(text) or _contains_answer(q, rest):
            continue
        out.append(Pair(q.text, rest, 0, "answer_removed", q.qid))
    return out


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
    from indexes.bm25_index import Bm25Index

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
    from indexes.bm25_index import Bm25Index

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


def _quotas(available: dict[str, int], total: int, mix: dict[str, float] = MIX) -> dict[str, int]:
    """Split `total` by `mix`; the share a kind cannot fill goes to the others in proportion."""
    quotas = {k: 0 for k in available}
    open_kinds = [k for k in mix if available.get(k)]
    left = total
    while left > 0 and open_kinds:
        weight = sum(mix[k] for k in open_kinds)
        shares = {k: int(left * mix[k] / weight) for k in open_kinds}
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
