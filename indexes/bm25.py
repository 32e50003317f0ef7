"""BM25 over chunks with bm25s.

Tokenizer (documented because queries and chunks must agree): NFKC + lower case, tokens of
two or more word characters (`(?u)\\b\\w\\w+\\b`, scikit-learn's pattern), Lucene's English
stopwords, Snowball English stemming (PyStemmer). Stemming measured +0.035 nDCG@10 on SciFact.

Variant served: bm25s `lucene` (Lucene's idf `log(1 + (N - df + 0.5) / (df + 0.5))`, always
positive; Kamphuis et al., ECIR 2020). Robertson's idf, which rank-bm25's BM25Okapi uses,
goes negative for terms in more than half the chunks, so a very common query term would push
a chunk down for containing it; the Lucene idf keeps such terms slightly positive instead.
With `method="robertson"` the rankings equal rank_bm25.BM25Okapi's (tests/indexes/test_bm25.py).
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Sequence

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from retrieval.access import top_k

_TOKEN = re.compile(r"(?u)\b\w\w+\b")


@dataclass(frozen=True)
class Bm25Params:
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    k1: float = 1.5
    b: float = 0.75
    stem: bool = True
    stopwords: bool = True


class Tokenizer:
    """Text to BM25 terms; identical for chunks and queries."""

    def __init__(self, stem: bool = True, stopwords: bool = True) -> None:
        self._stemmer = Stemmer.Stemmer("english") if stem else None
        self._stop = frozenset(STOPWORDS_EN) if stopwords else frozenset()

    def __call__(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFKC", text).lower()
        tokens = [t for t in _TOKEN.findall(text) if t not in self._stop]
        return self._stemmer.stemWords(tokens) if self._stemmer else tokens


class Bm25Index:
    """A bm25s index whose row i is chunk row i of the snapshot."""

    def __init__(self, model: bm25s.BM25, params: Bm25Params, size: int) -> None:
        self._model = model
        self.params = params
        self.size = size
        self.tokenize = Tokenizer(params.stem, params.stopwords)

    @classmethod
    def build(cls, texts: Sequence[str], params: Bm25Params = Bm25Params()) -> Bm25Index:
        tokenize = Tokenizer(params.stem, params.stopwords)
        # An empty token list breaks bm25s' vocabulary; a placeholder term matches no query.
        corpus = [tokenize(t) or ["\x00"] for t in texts]
        model = bm25s.BM25(method=params.method, k1=params.k1, b=params.b)
        model.index(corpus, show_progress=False)
        return cls(model, params, len(texts))

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._model.save(str(directory), show_progress=False)
        (directory / "quarry_bm25.json").write_text(json.dumps({**asdict(self.params), "size": self.size}))

    @classmethod
    def load(cls, directory: Path) -> Bm25Index:
        meta = json.loads((directory / "quarry_bm25.json").read_text())
        size = meta.pop("size")
        model = bm25s.BM25.load(str(directory), show_progress=False, verbosity=0)
        return cls(model, Bm25Params(**meta), size)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every row for the query (zeros when no query term is indexed)."""
        ids = self._model.get_tokens_ids(self.tokenize(query))
        if not ids:
            return np.zeros(self.size, dtype=np.float32)
        return self._model.get_scores_from_ids(ids)

    def top_k(self, query: str, allowed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Best k allowed rows with a positive score; unauthorized rows are never ranked."""
        scores = self.scores(query)
        rows = top_k(scores, allowed, k, floor=0.0)
        return rows, scores[rows]
