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

Four kinds (`--corpus`):
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
- `remix`: any size from the same real text: the `real` chunks, then new chunks made of a
  run of 1-3 consecutive sentences of one source document, half the time followed by 1-2
  sentences of one of its 10 nearest source documents by TF-IDF (a chunk that crosses into a
  related page), each combination once. A million chunks reuse each sentence about 40
  times, as overlapping chunks and near-duplicate pages do; the questions are the real ones.

`StandInEncoder` stands in for the embedding model where a run measures index behaviour, not
retrieval quality: a text's vector is the normalised sum of fixed pseudo-random unit vectors
of its words (a bag-of-words random projection, 384-d like all-MiniLM-L6-v2), so texts that
share words are near each other and an approximate index faces a real neighbourhood
structure. Every figure produced with it says so. `StaticEncoder` (below) is a second
stand-in, built from the real model's own token vectors, whose neighbourhoods on real text
measure like the model's: the one to use where a figure depends on the vectors' geometry,
such as an approximate index's recall.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from datetime import date, timedelta
from pathlib import Path
from threading import Lock
from typing import Any, Callable, Iterator, Sequence

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
KINDS = ("zipf", "topical", "real", "remix")
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


def _sentences(text: str) -> list[str]:
    """A source text's sentences, without fragments of 20 characters or fewer."""
    return [s for s in _SENTENCE.split(text) if len(s) > 20]


def real_chunks() -> list[tuple[str, str]]:
    """(title, text) of the `real` kind's chunks: sentences, then consecutive pairs, shuffled."""
    singles, pairs = [], []
    for title, text in _real_sources():
        sentences = _sentences(text)
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
    if kind in ("real", "remix"):
        yield from (_real_documents(n) if kind == "real" else _remix_documents(n))
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


def _record(i: int, n: int, title: str, text: str) -> dict:
    return {"id": f"d{i:07d}", "title": title, "text": text, "source": SOURCES[i % len(SOURCES)],
            "date": (date(2020, 1, 1) + timedelta(days=(i * 7919) % 2190)).isoformat(), "acl": reader_of(i, n)}


def _real_documents(n: int) -> Iterator[dict]:
    chunks = real_chunks()
    if n > len(chunks):
        raise ValueError(f"the real kind has {len(chunks):,} chunks, not {n:,}")
    for i, (title, text) in enumerate(chunks[:n]):
        yield _record(i, n, title, text)


def _remix_documents(n: int) -> Iterator[dict]:
    """The real kind's chunks, then new ones from the same sentences: a run of 1-3
    consecutive sentences of one source document, half the time followed by 1-2 of one of
    its 10 nearest source documents (TF-IDF cosine), each combination once."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    real = real_chunks()
    for i, (title, text) in enumerate(real[:n]):
        yield _record(i, n, title, text)
    sources = [(t, ss) for t, x in _real_sources() if (ss := _sentences(x))]
    tfidf = TfidfVectorizer(sublinear_tf=True, stop_words="english").fit_transform([" ".join(ss) for _, ss in sources])
    near = np.zeros((len(sources), 10), dtype=np.int64)
    for start in range(0, len(sources), 2_000):
        sims = (tfidf[start : start + 2_000] @ tfidf.T).toarray()
        sims[np.arange(len(sims)), np.arange(start, start + len(sims))] = -1.0
        near[start : start + len(sims)] = np.argsort(-sims, axis=1)[:, :10]
    rng, seen, i = np.random.default_rng(n), set(), len(real)
    while i < n:
        a = int(rng.integers(len(sources)))
        title, sa = sources[a]
        la = int(rng.integers(1, 4))
        ia = int(rng.integers(max(1, len(sa) - la + 1)))
        key: tuple[int, ...] = (a, ia, la)
        parts = sa[ia : ia + la]
        if rng.random() < 0.5:
            b = int(near[a, rng.integers(10)])
            sb = sources[b][1]
            lb = int(rng.integers(1, 3))
            ib = int(rng.integers(max(1, len(sb) - lb + 1)))
            key, parts = key + (b, ib, lb), parts + sb[ib : ib + lb]
        if key not in seen:
            seen.add(key)
            yield _record(i, n, title, " ".join(parts))
            i += 1


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


class StaticEncoder:
    """The Embedder interface, 384-d: all-MiniLM-L6-v2 read one token at a time, for scale
    runs where the real model would take hours (it embeds 86-91 chunks/s here).

    Each vocabulary token's vector is the model's mean-pooled output for that token alone;
    a text's vector is the sum of its tokens' vectors, centred and weighted by SIF
    (a / (a + p(token)), p from the shared datasets' texts), normalised, minus the mean
    direction of those texts' vectors, normalised again. On 20,000 real chunks its
    neighbourhoods measure like the model's (mean cosine 0.001 vs 0.039, 1st / 10th
    neighbour 0.72 / 0.50 vs 0.80 / 0.50, a question's 1st / 10th / 100th chunk 0.54 / 0.43
    / 0.32 vs 0.57 / 0.42 / 0.27) and an HNSW graph's recall@10 over them is at or below the
    model's at every breadth (0.883 vs 0.938 at efSearch 16, 0.991 vs 0.992 at 128): a stand-in
    for index behaviour (it agrees with the model on 28% of a question's top 10, so not for
    retrieval quality)."""

    model_id = "standin:minilm-static-sif-384"
    SIF_A = 1e-3

    def __init__(self) -> None:
        self.dim = 384
        self._parts: tuple[Any, np.ndarray, np.ndarray] | None = None
        self._queries: dict[str, np.ndarray] = {}
        self._lock = Lock()

    def load(self) -> StaticEncoder:
        with self._lock:
            if self._parts is None:
                self._parts = _static_parts(self.SIF_A)
        return self

    def dimension(self) -> int:
        return self.dim

    def clear_cache(self) -> None:
        pass

    def _raw(self, texts: Sequence[str]) -> np.ndarray:
        from scipy.sparse import csr_matrix  # type: ignore[import-untyped]

        tokenizer, weighted, _ = self.load()._parts  # type: ignore[misc]
        ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        lengths = np.asarray([len(x) for x in ids])
        flat = np.concatenate([np.asarray(x, dtype=np.int64) for x in ids]) if lengths.sum() else np.zeros(0, np.int64)
        counts = csr_matrix((np.ones(len(flat), dtype=np.float32), flat, np.concatenate([[0], np.cumsum(lengths)])),
                            shape=(len(texts), len(weighted)))
        out = np.asarray(counts @ weighted, dtype=np.float32)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    def encode(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        mean = self.load()._parts[2]  # type: ignore[index]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), 4096):
            block = self._raw(texts[start : start + 4096]) - mean
            out[start : start + len(block)] = block / np.maximum(np.linalg.norm(block, axis=1, keepdims=True), 1e-9)
            if progress:
                progress(len(block))
        return out

    def encode_query(self, text: str) -> np.ndarray:
        """One query vector, kept (as the Embedder keeps its last queries) so a scale run times
        the search, not the encoding."""
        hit = self._queries.get(text)
        if hit is None:
            hit = self._queries[text] = self.encode([text])
        return hit


def _static_parts(sif_a: float) -> tuple[Any, np.ndarray, np.ndarray]:
    """(tokenizer, SIF-weighted centred token vectors, mean direction of the datasets' texts)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from indexes.embedder import default_model_path

    model = SentenceTransformer(str(default_model_path()), device="cpu", local_files_only=True)
    tokenizer = model.tokenizer
    tokenizer.model_max_length = 1 << 30  # texts are summed, never run through the model
    transformer = model[0].auto_model
    vocab = tokenizer.vocab_size
    table = np.zeros((vocab, 384), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, vocab, 1024):
            ids = torch.arange(start, min(start + 1024, vocab)).unsqueeze(1)
            frame = torch.cat([torch.full_like(ids, tokenizer.cls_token_id), ids,
                               torch.full_like(ids, tokenizer.sep_token_id)], dim=1)
            table[start : start + len(ids)] = transformer(input_ids=frame, attention_mask=torch.ones_like(frame)
                                                          ).last_hidden_state.mean(dim=1).numpy()
    texts = [" ".join(ss) for _, x in _real_sources() if (ss := _sentences(x))]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    freq = np.bincount(np.concatenate([np.asarray(x, dtype=np.int64) for x in ids]), minlength=vocab).astype(np.float64)
    p = (freq + 1) / (freq.sum() + vocab)
    weighted = ((table - table.mean(axis=0)) * (sif_a / (sif_a + p))[:, None]).astype(np.float32)
    probe = StaticEncoder()
    probe._parts = (tokenizer, weighted, np.zeros(384, dtype=np.float32))
    mean = probe._raw(texts).mean(axis=0).astype(np.float32)
    return tokenizer, weighted, mean


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
