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


def documents(n: int) -> Iterator[dict]:
    """The n documents, one at a time."""
    rng = np.random.default_rng(n)
    words = np.asarray(vocabulary())
    cdf = np.cumsum(1.0 / np.arange(1, len(words) + 1) ** 1.1)
    cdf /= cdf[-1]
    start = date(2020, 1, 1)
    for i in range(n):
        k = int(rng.integers(40, 91))
        drawn = np.minimum(np.searchsorted(cdf, rng.random(k + 2)), len(words) - 1)
        text = " ".join(words[drawn[:k]])
        topic = " ".join(words[drawn[k:]]).title()
        yield {"id": f"d{i:07d}", "title": f"{topic} report ASSET-{i:07d}", "text": text + ".",
               "source": SOURCES[i % len(SOURCES)], "date": (start + timedelta(days=(i * 7919) % 2190)).isoformat(),
               "acl": reader_of(i, n)}


def write(n: int, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tmp.open("w") as f:
        for doc in documents(n):
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    print(write(args.chunks, args.out))


if __name__ == "__main__":
    main()
