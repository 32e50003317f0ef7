"""A deterministic synthetic corpus for scale runs, and a stand-in encoder of the real dimension.

    .venv/bin/python benchmarks/scale_corpus.py --chunks 100000 --out var/bench/scale-100000/docs.jsonl

Documents (one chunk each, 40-90 words) draw their words from a 50,000-word made-up
vocabulary with a Zipf(1.1) distribution; each title carries an identifier (`ASSET-0001234`),
each document a date and one of 8 sources. Access (who may read what), by design of the
scope sizes the benchmark measures:

| readers | share of the documents |
|---|---|
| `group:g00` | 10% |
| `group:g01` | 0.1% |
| `group:g02` ... `group:g49` | the rest, evenly (about 1.87% each) |
| one user each (`u0000` ... `u0999`) | 1,000 documents |

The same `--chunks` always gives the same file (seeded by the count), written line by line
(no whole-corpus list in memory).

Three kinds (`--corpus`):
- `zipf`: every word drawn from the one Zipf vocabulary. Documents share the frequent words
  and little else, so their stand-in vectors sit in a narrow cone (mean cosine 0.65, the
  10th neighbour at 0.805 against the 1st at 0.822 over 20k documents): far flatter
  neighbourhoods than real embeddings have, the worst case for an approximate index.
- `topical`: each document also has one of 2,000 topics (each a fixed set of 300 rarer words,
  Zipf within it) and draws half its words from it, as documents of a knowledge base share
  a subject. Its stand-in vectors measure mean cosine 0.21, 1st / 10th neighbour 0.64 /
  0.47, against all-MiniLM-L6-v2 on SciFact's abstracts 0.12, 0.77 / 0.54 and on the HotpotQA
  paragraphs 0.02, 0.57 / 0.36 (var/diag-style check: `neighbourhood` below).
- `real`: real text, for runs with the real model: every sentence of the shared datasets
  (SciFact abstracts, HotpotQA paragraphs, SQuAD 2.0 paragraphs, read from ../shared/datasets,
  never copied), then every pair of consecutive sentences (1-2, 3-4, ...), as a knowledge
  base's chunks overlap; about 111k chunks in all, in a seeded shuffle so any prefix mixes
  the sources. Titles are the source documents' titles; ids, dates and ACLs as above. Its
  questions are the datasets' own (SciFact claims, HotpotQA and SQuAD questions).

`StandInEncoder` stands in for the embedding model where a run measures index behaviour, not
retrieval quality: a text's vector is the normalised sum of fixed pseudo-random unit vectors
of its words (a bag-of-words random projection, 384-d like all-MiniLM-L6-v2), so texts that
share words are near each other and an approximate index faces a real neighbourhood
structure. Every figure produced with it says so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from datetime import date, timedelta
from pathlib import Path
from threading import Lock
from typing import Callable, Iterator, Sequence

import numpy as np

VOCAB = 50_000
SOURCES = ("wiki", "tickets", "runbooks", "policies", "reports", "notes", "specs", "minutes")
GROUPS = 50
USERS = 1_000
_WORD = re.compile(r"[a-z]+|asset-\d+", re.IGNORECASE)


def vocabulary(n: int = VOCAB, seed: int = 11) -> list[str]:
    """n distinct pronounceable made-up words, the same for every run."""
    rng = np.random.default_rng(seed)
    onsets = ["b", "br", "c", "cr", "d", "dr", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "pr", "r", "s", "st",
              "t", "tr", "v", "w", "z", "sh", "th"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
    codas = ["", "n", "r", "s", "l", "m", "t", "x", "nd", "rk", "st"]
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n:
        parts = rng.integers(2, 4)
        w = "".join(onsets[rng.integers(len(onsets))] + vowels[rng.integers(len(vowels))] + codas[rng.integers(len(codas))]
                    for _ in range(parts))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def reader_of(i: int, n: int) -> list[str]:
    """The ACL of document i of n (see the module docstring)."""
    per_user = min(USERS, n // 10)
    if i < per_user:
        return [f"u{i:04d}"]
    j = i - per_user
    rest = n - per_user
    if j < rest // 10:
        return ["group:g00"]
    if j < rest // 10 + max(1, n // 1000):
        return ["group:g01"]
    return [f"group:g{2 + j % (GROUPS - 2):02d}"]


TOPICS, TOPIC_WORDS, TOPIC_SHARE = 2_000, 300, 0.5
KINDS = ("zipf", "topical", "real")
DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"
_SENTENCE = re.compile(r'(?<=[.!?])\s+(?=[A-Z0-9"(])')


def _real_sources() -> Iterator[tuple[str, str]]:
    """(title, text) of every source document of the `real` kind, in a fixed order."""
    for name in ("scifact", "hotpotqa"):
        with (DATASETS / name / "corpus.jsonl").open() as f:
            for line in f:
                doc = json.loads(line)
                yield doc.get("title") or "", doc["text"]
    for name in ("dev-v2.0.json", "train-v2.0-partial.json"):
        for article in json.loads((DATASETS / "squad2" / name).read_text())["data"]:
            for paragraph in article["paragraphs"]:
                yield article["title"].replace("_", " "), paragraph["context"]


def real_chunks() -> list[tuple[str, str]]:
    """(title, text) of the `real` kind's chunks: sentences, then consecutive pairs, shuffled."""
    singles, pairs = [], []
    for title, text in _real_sources():
        sentences = [s for s in _SENTENCE.split(text) if len(s) > 20]
        singles += [(title, s) for s in sentences]
        # (an odd last sentence stays single)
        pairs += [(title, f"{a} {b}") for a, b in zip(sentences[::2], sentences[1::2], strict=False)]
    chunks = singles + pairs
    order = np.random.default_rng(7).permutation(len(chunks))
    return [chunks[i] for i in order]


def real_questions(count: int) -> list[str]:
    """`count` of the datasets' questions, a seeded sample across SciFact, HotpotQA and SQuAD."""
    texts = []
    for name in ("scifact", "hotpotqa"):
        with (DATASETS / name / "queries.jsonl").open() as f:
            texts += [json.loads(line)["text"] for line in f]
    for name in ("dev-v2.0.json", "train-v2.0-partial.json"):
        for article in json.loads((DATASETS / "squad2" / name).read_text())["data"]:
            texts += [qa["question"] for p in article["paragraphs"] for qa in p["qas"]]
    order = np.random.default_rng(count).permutation(len(texts))
    return [texts[i] for i in order[:count]]


def topic_words(topic: int) -> np.ndarray:
    """Vocabulary positions of a topic's words: 300 of the words past the 200 most frequent."""
    return np.random.default_rng(1_000 + topic).choice(np.arange(200, VOCAB), TOPIC_WORDS, replace=False)


def documents(n: int, kind: str = "zipf") -> Iterator[dict]:
    """The n documents of the corpus `kind`, one at a time."""
    if kind not in KINDS:
        raise ValueError(f"corpus kind {kind!r}: one of {', '.join(KINDS)}")
    if kind == "real":
        yield from _real_documents(n)
        return
    rng = np.random.default_rng(n)
    words = np.asarray(vocabulary())
    cdf = np.cumsum(1.0 / np.arange(1, len(words) + 1) ** 1.1)
    cdf /= cdf[-1]
    tcdf = np.cumsum(1.0 / np.arange(1, TOPIC_WORDS + 1))
    tcdf /= tcdf[-1]
    topics: dict[int, np.ndarray] = {}
    start = date(2020, 1, 1)
    for i in range(n):
        k = int(rng.integers(40, 91))
        drawn = np.minimum(np.searchsorted(cdf, rng.random(k + 2)), len(words) - 1)
        if kind == "topical":
            t = int(rng.integers(TOPICS))
            own = topics.get(t)
            if own is None:
                own = topics[t] = topic_words(t)
            local = own[np.minimum(np.searchsorted(tcdf, rng.random(k + 2)), TOPIC_WORDS - 1)]
            drawn = np.where(rng.random(k + 2) < TOPIC_SHARE, local, drawn)
        text = " ".join(words[drawn[:k]])
        topic = " ".join(words[drawn[k:]]).title()
        yield {"id": f"d{i:07d}", "title": f"{topic} report ASSET-{i:07d}", "text": text + ".",
               "source": SOURCES[i % len(SOURCES)], "date": (start + timedelta(days=(i * 7919) % 2190)).isoformat(),
               "acl": reader_of(i, n)}


def _real_documents(n: int) -> Iterator[dict]:
    chunks = real_chunks()
    if n > len(chunks):
        raise ValueError(f"the real kind has {len(chunks):,} chunks, not {n:,}")
    start = date(2020, 1, 1)
    for i, (title, text) in enumerate(chunks[:n]):
        yield {"id": f"d{i:07d}", "title": title, "text": text, "source": SOURCES[i % len(SOURCES)],
               "date": (start + timedelta(days=(i * 7919) % 2190)).isoformat(), "acl": reader_of(i, n)}


def write(n: int, out: Path, kind: str = "zipf") -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tmp.open("w") as f:
        for doc in documents(n, kind):
            f.write(json.dumps(doc) + "\n")
    tmp.replace(out)
    return out


class StandInEncoder:
    """The Embedder interface (build and query), 384-d bag-of-words random projections."""

    model_id = "standin:bow-random-projection-384"

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self._vectors: dict[str, np.ndarray] = {}
        self._lock = Lock()

    def load(self) -> StandInEncoder:
        return self

    def dimension(self) -> int:
        return self.dim

    def clear_cache(self) -> None:
        pass

    def _word(self, w: str) -> np.ndarray:
        v = self._vectors.get(w)
        if v is None:
            seed = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            v /= np.linalg.norm(v)
            with self._lock:
                self._vectors[w] = v
        return v

    def _one(self, text: str) -> np.ndarray:
        tokens = [t.lower() for t in _WORD.findall(text)]
        v = np.zeros(self.dim, dtype=np.float32)
        for t in tokens:
            v += self._word(t)
        norm = float(np.linalg.norm(v))
        return v / norm if norm else self._word("\x00empty")

    def encode(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), 4096):
            for i in range(start, min(start + 4096, len(texts))):
                out[i] = self._one(texts[i])
            if progress:
                progress(min(4096, len(texts) - start))
        return out

    def encode_query(self, text: str) -> np.ndarray:
        return self._one(text).reshape(1, -1)


def neighbourhood(vectors: np.ndarray, probes: int = 2_000) -> dict[str, float]:
    """How spread a set of embeddings is: mean cosine of unrelated pairs, and the cosine of
    the 1st and 10th nearest neighbour (the first `probes` rows against all)."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = unit[:probes] @ unit.T
    np.fill_diagonal(sims[:, :probes], -1.0)
    ranked = np.sort(sims, axis=1)
    return {"mean_cosine": round(float(sims[:, probes:].mean()), 3), "top1": round(float(ranked[:, -1].mean()), 3),
            "top10": round(float(ranked[:, -10].mean()), 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--corpus", choices=KINDS, default="zipf")
    args = ap.parse_args()
    print(write(args.chunks, args.out, args.corpus))


if __name__ == "__main__":
    main()
