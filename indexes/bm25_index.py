"""BM25 over chunks with bm25s.

Tokenizer (documented because queries and chunks must agree): NFKC + lower case, tokens of
two or more word characters (`(?u)\\b\\w\\w+\\b`, scikit-learn's pattern), Lucene's English
stopwords, Snowball English stemming (PyStemmer). Stemming measured +0.035 nDCG@10 on SciFact.

Variant served: bm25s `lucene` (Lucene's idf `log(1 + (N - df + 0.5) / (df + 0.5))`, always
positive; Kamphuis et al., ECIR 2020). Robertson's idf, which rank-bm25's BM25Okapi uses,
goes negative for terms in more than half the chunks, so a very common query term would push
a chunk down for containing it; the Lucene idf keeps such terms slightly positive instead.
With `method="robertson"` the rankings equal rank_bm25.BM25Okapi's (tests/indexes/test_bm25_index.py).

Collection statistics follow the access scope: when a principal may not read every chunk,
N, each term's df and the average chunk length are counted over the authorized chunks only,
so scores equal those of an index built from the authorized chunks alone. Otherwise the
presence of a forbidden chunk would shift authorized chunks' scores and order, which would
let a caller detect it. bm25s stores idf x tf-part per posting; with the stored chunk
lengths the raw term frequency is recovered exactly and rescored with the scoped statistics.

Top-k is pruned, and exact (Turtle & Flood's MaxScore): a term adds less than its idf to any
chunk (the Lucene form's tf / (tf + K) is below 1), so once the k-th best partial score of the
chunks holding the rarer terms exceeds the idf sum of the terms left, a chunk holding only
those cannot enter, and they are read at the candidates only (one binary search each). The
very common terms, whose postings cover most of the index, then cost little, and so do their
scoped document frequencies, counted from whichever side of the scope is smaller.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Literal, Sequence

import bm25s
import numpy as np
import Stemmer
from bm25s.scoring import _select_idf_scorer
from bm25s.stopwords import STOPWORDS_EN

from retrieval.access import top_k
from retrieval.lru import Lru
from retrieval.types import CollectionStats

_TOKEN = re.compile(r"(?u)\b\w\w+\b")
MEMO_TEXTS = 8192  # texts whose terms a served index's tokenizer keeps
MEMO_BYTES = 32 << 20


@dataclass(frozen=True)
class Bm25Params:
    method: Literal["lucene", "robertson"] = "lucene"
    k1: float = 1.5
    b: float = 0.75
    stem: bool = True
    stopwords: bool = True


class Tokenizer:
    """Text to BM25 terms; identical for chunks and queries. A served index's tokenizer keeps
    the terms of the last `memo` texts it read (passages recur across a question's attempts
    and across questions, and the loop's evidence signals tokenize them again); an index
    build's reads each text once and keeps none. The memo lives and dies with its index."""

    def __init__(self, stem: bool = True, stopwords: bool = True, memo: int = 0) -> None:
        self._stemmer = Stemmer.Stemmer("english") if stem else None
        self._stop = frozenset(STOPWORDS_EN) if stopwords else frozenset()
        self._memo: Lru[str, tuple[str, ...]] | None = (
            Lru(memo, MEMO_BYTES, lambda text, terms: 2 * len(text) + 60 * len(terms)) if memo else None)

    def __call__(self, text: str) -> list[str]:
        if self._memo is None:
            return self._tokenize(text)
        terms = self._memo.get(text)
        if terms is None:
            terms = tuple(self._tokenize(text))
            self._memo.put(text, terms)
        return list(terms)

    def _tokenize(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFKC", text).lower()
        tokens = [t for t in _TOKEN.findall(text) if t not in self._stop]
        return self._stemmer.stemWords(tokens) if self._stemmer else tokens


class Bm25Builder:
    """An index built from texts added a batch at a time (an ingest streams its corpus).

    Terms become ids as each text is read, so the corpus is held as lists of shared int
    objects (8 bytes a term) rather than of fresh strings (about 60): at a million chunks that
    was several GB. Ids in first-seen order; bm25s scores a (term, row) pair the same whatever
    id its term has. An empty token list breaks bm25s' vocabulary; a placeholder term matches
    no query."""

    def __init__(self, params: Bm25Params = Bm25Params(), storage: str | None = None) -> None:
        self.params, self._storage = params, storage
        self._tokenize = Tokenizer(params.stem, params.stopwords)
        self._vocab: dict[str, int] = {}
        self._ids: list[list[int]] = []

    def add(self, texts: Iterable[str]) -> None:
        vocab, terms = self._vocab, self._tokenize
        self._ids += [[vocab.setdefault(term, len(vocab)) for term in terms(t) or ["\x00"]] for t in texts]

    def finish(self) -> Bm25Index:
        params, ids = self.params, self._ids
        if not ids:
            return Bm25Index(None, params, 0, storage=self._storage)
        lengths = np.asarray([len(row) for row in ids], dtype=np.float64)
        model = bm25s.BM25(method=self._storage or params.method, k1=params.k1, b=params.b)
        model.index((ids, self._vocab), show_progress=False)
        self._ids, self._vocab = [], {}
        return Bm25Index(model, params, len(ids), lengths, self._storage)


@dataclass(frozen=True)
class Scope:
    """The allowed rows in the form cheapest to intersect with postings: every row, the
    forbidden rows (sorted) or the allowed rows (sorted), whichever side is smaller."""

    allowed: np.ndarray
    n: int
    side: np.ndarray | None  # None: every row allowed
    forbidden_side: bool

    @classmethod
    def of(cls, allowed: np.ndarray) -> Scope:
        n = int(np.count_nonzero(allowed))
        if n == len(allowed):
            return cls(allowed, n, None, True)
        if len(allowed) - n <= n:
            return cls(allowed, n, np.flatnonzero(~allowed), True)
        return cls(allowed, n, np.flatnonzero(allowed), False)

    def _searched(self, postings: np.ndarray) -> bool:
        """Whether binary searches of the side beat a pass over the postings."""
        assert self.side is not None
        return len(self.side) * max(1, len(postings).bit_length()) < len(postings)

    def count(self, postings: np.ndarray) -> int:
        """How many of `postings` (sorted rows) are allowed."""
        if self.side is None:
            return len(postings)
        if self._searched(postings):
            found = int(np.count_nonzero(_locate(postings, self.side)[1]))
            return len(postings) - found if self.forbidden_side else found
        return int(np.count_nonzero(self.allowed[postings]))

    def positions(self, postings: np.ndarray) -> np.ndarray:
        """Positions in `postings` of the allowed rows, ascending."""
        if self.side is None:
            return np.arange(len(postings))
        if self._searched(postings) and not self.forbidden_side:
            at, hit = _locate(postings, self.side)
            return at[hit]
        return np.flatnonzero(self.allowed[postings])

    def total(self, lengths: np.ndarray, whole: float) -> float:
        """Sum of `lengths` over the allowed rows, given their sum over every row `whole`
        (exact: lengths are integers)."""
        if self.side is None:
            return whole
        part = float(lengths[self.side].sum())
        return whole - part if self.forbidden_side else part


def _locate(postings: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position in `postings` of each of `rows`, whether it is there): one binary search
    each, both sorted."""
    if len(postings) == 0:
        return np.zeros(len(rows), dtype=np.int64), np.zeros(len(rows), dtype=bool)
    at = np.minimum(postings.searchsorted(rows), len(postings) - 1)
    return at, np.asarray(postings[at] == rows)


class Bm25Index:
    """A bm25s index whose row i is chunk row i of the snapshot."""

    def __init__(self, model: bm25s.BM25 | None, params: Bm25Params, size: int, lengths: np.ndarray | None = None,
                 storage: str | None = None) -> None:
        self._model = model
        self.params = params
        self.size = size
        self._lengths = np.zeros(size, dtype=np.float64) if lengths is None else lengths.astype(np.float64)
        self._avgdl = float(self._lengths.mean()) if size else 1.0
        self._total_len = float(self._lengths.sum())
        self.tokenize = Tokenizer(params.stem, params.stopwords, memo=MEMO_TEXTS)
        self._idf = _select_idf_scorer(params.method)
        # The idf bm25s stored its postings with: the one scored with, except for a live index's
        # delta, stored with Lucene's (always positive) so every term's tf can be recovered.
        self._storage = storage or params.method
        self._store_idf = _select_idf_scorer(self._storage)

    @classmethod
    def build(cls, texts: Sequence[str], params: Bm25Params = Bm25Params(), storage: str | None = None) -> Bm25Index:
        """`storage`: the bm25s method the postings are stored with, when it is not the
        scoring one (scores then always go through the recovered term frequencies)."""
        builder = Bm25Builder(params, storage)
        builder.add(texts)
        return builder.finish()

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        if self._model is not None:
            self._model.save(str(directory), show_progress=False)
        (directory / "quarry_bm25.json").write_text(json.dumps({**asdict(self.params), "size": self.size}))
        np.save(directory / "quarry_lengths.npy", self._lengths.astype(np.float32))

    @classmethod
    def load(cls, directory: Path) -> Bm25Index:
        meta = json.loads((directory / "quarry_bm25.json").read_text())
        size = meta.pop("size")
        model = bm25s.BM25.load(str(directory), show_progress=False, verbosity=0) if size else None
        return cls(model, Bm25Params(**meta), size, np.load(directory / "quarry_lengths.npy"))

    def scores(self, query: str, allowed: np.ndarray | None = None) -> np.ndarray:
        """BM25 score of every row, with idf taken over the `allowed` rows (all rows if None).

        Rows outside `allowed` get meaningless scores; callers rank allowed rows only.
        """
        model = self._model
        ids = model.get_tokens_ids(self.tokenize(query)) if model is not None else []
        if model is None or not ids:
            return np.zeros(self.size, dtype=np.float32)
        if (allowed is None or int(allowed.sum()) == self.size) and self._storage == self.params.method:
            scores: np.ndarray = model.get_scores_from_ids(ids)
            return scores
        allowed = np.ones(self.size, dtype=bool) if allowed is None else allowed
        return self.scores_with(query, allowed, self.collection_stats(query, allowed))

    def collection_stats(self, query: str, allowed: np.ndarray | Scope) -> CollectionStats:
        """This index's share of the statistics BM25 needs over the `allowed` rows: their
        number and total length, and each query term's document frequency among them (0 for
        a term the index never saw: the statistics name every term of the query, so a front
        can count them without a tokenizer of its own). Statistics of several segments add
        up (`CollectionStats.__add__`)."""
        scope = allowed if isinstance(allowed, Scope) else Scope.of(allowed)
        df: dict[str, int] = {}
        model = self._model
        for term in dict.fromkeys(self.tokenize(query)):
            t = model.vocab_dict.get(term) if model is not None else None
            if model is None or t is None:
                df[term] = 0
                continue
            indptr, indices = model.scores["indptr"], model.scores["indices"]
            df[term] = scope.count(indices[int(indptr[t]) : int(indptr[t + 1])])
        return CollectionStats(scope.n, scope.total(self._lengths, self._total_len) if scope.n else 0.0, df)

    def postings(self, term: str) -> np.ndarray:
        """Rows holding an (already tokenized) term, sorted; empty for a term not indexed."""
        model = self._model
        t = model.vocab_dict.get(term) if model is not None else None
        if model is None or t is None:
            return np.zeros(0, dtype=np.int64)
        indptr = model.scores["indptr"]
        return np.asarray(model.scores["indices"][int(indptr[t]) : int(indptr[t + 1])], dtype=np.int64)

    def idf(self, df: int, n: int) -> float:
        """This index's idf of a term in `df` of `n` chunks."""
        return float(self._idf(df, N=n))

    def scores_with(self, query: str, allowed: np.ndarray, stats: CollectionStats) -> np.ndarray:
        """BM25 score of every row with collection statistics `stats` (N, each term's df and
        the average length), which may span several segments: an index built from every
        segment's allowed rows at once gives the same scores. Rows outside `allowed` score 0."""
        model = self._model
        out = np.zeros(self.size, dtype=np.float64)
        if model is None or stats.n == 0:
            return out.astype(np.float32)
        data, indices, indptr = (model.scores[k] for k in ("data", "indices", "indptr"))
        avgdl = stats.total_len / stats.n
        for term in self.tokenize(query):  # repeated query terms count again, as in bm25s and rank-bm25
            t = model.vocab_dict.get(term)
            df = stats.df.get(term, 0)
            if t is None or df == 0:
                continue
            lo, hi = int(indptr[t]), int(indptr[t + 1])
            rows = indices[lo:hi]
            keep = allowed[rows]
            global_idf = self._store_idf(hi - lo, N=self.size)
            if not keep.any() or global_idf <= 0:
                continue
            rows = rows[keep]
            out[rows] += self._idf(df, N=stats.n) * self._rescoped(data[lo:hi][keep], global_idf, rows, avgdl)
        return out.astype(np.float32)

    def _rescoped(self, stored: np.ndarray, global_idf: float | np.ndarray, rows: np.ndarray,
                  scoped_avgdl: float) -> np.ndarray:
        """Term saturation tf / (tf + K) with K from the scoped average length. The index
        stores idf * tf / (tf + K) with snapshot-wide idf and K; the raw tf is recovered from it
        (exact: tf is an integer)."""
        k1, b = self.params.k1, self.params.b
        dl = self._lengths[rows]
        tfc = stored.astype(np.float64) / global_idf
        tf = np.rint(tfc * k1 * (1 - b + b * dl / self._avgdl) / (1.0 - tfc))
        return tf / (tf + k1 * (1 - b + b * dl / scoped_avgdl))

    def evidence(self, query: str, rows: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For some rows only: (BM25 score, idf-weighted and plain share of the query's terms,
        among those some readable chunk holds, present in the row), with the same access-scoped
        statistics as `scores`, read straight from the postings (no full scoring pass, no passage
        tokenized again). One binary search per term; the arithmetic runs once over the
        (term x row) matrix."""
        n = len(rows)
        model = self._model
        all_ids = model.get_tokens_ids(self.tokenize(query)) if model is not None and n else []
        if model is None or not all_ids:
            return np.zeros(n), np.zeros(n), np.zeros(n)
        counts: dict[int, int] = {}
        for t in all_ids:
            counts[t] = counts.get(t, 0) + 1
        data, indices, indptr = (model.scores[k] for k in ("data", "indices", "indptr"))
        n_allowed = int(np.count_nonzero(allowed))
        scoped = n_allowed != self.size or self._storage != self.params.method
        terms, dfs, present, stored = [], [], [], []
        for t in counts:
            lo, hi = int(indptr[t]), int(indptr[t + 1])
            postings = indices[lo:hi]  # sorted row ids
            df = int(np.count_nonzero(allowed[postings])) if scoped else hi - lo
            if df == 0:
                continue
            at, hit = _locate(postings, rows)
            terms.append(t)
            dfs.append((df, hi - lo))
            present.append(hit)
            stored.append(data[lo + at])
        if not terms:
            return np.zeros(n), np.zeros(n), np.zeros(n)
        hit = np.vstack(present)
        value = np.where(hit, np.vstack(stored), 0.0).astype(np.float64)
        idf = np.asarray([self._idf(df, N=n_allowed) for df, _ in dfs])
        if scoped:
            global_idf = np.asarray([self._store_idf(g, N=self.size) for _, g in dfs])
            live = global_idf > 0
            scoped_avgdl = float(self._lengths[allowed].mean())
            value[live] = idf[live, None] * self._rescoped(value[live], global_idf[live, None], rows, scoped_avgdl)
        score = np.asarray([counts[t] for t in terms], dtype=np.float64) @ value
        total = float(idf.sum())
        # Both shares count the query terms some readable chunk holds (`terms`), never those the
        # whole index knows: a word that only forbidden chunks hold must change no number.
        return score, (idf @ hit) / (total or 1.0), hit.sum(axis=0) / len(terms)

    def term_stats(self, query: str, allowed: np.ndarray) -> tuple[int, int, int]:
        """(query terms, terms found in a readable chunk, rare ones: in at most 1% of the
        readable chunks), for routing; counted over the allowed rows only."""
        terms = list(dict.fromkeys(self.tokenize(query)))
        if self._model is None or not terms:
            return len(terms), 0, 0
        indptr, indices = self._model.scores["indptr"], self._model.scores["indices"]
        n = int(np.count_nonzero(allowed))
        scoped = n != self.size
        known = rare = 0
        for term in terms:
            t = self._model.vocab_dict.get(term)
            if t is None:
                continue
            lo, hi = int(indptr[t]), int(indptr[t + 1])
            df = int(np.count_nonzero(allowed[indices[lo:hi]])) if scoped else hi - lo
            if df:
                known += 1
                rare += df <= max(2, n // 100)
        return len(terms), known, rare

    def term_weights(self, query: str, allowed: np.ndarray | None = None) -> dict[str, float]:
        """idf of each indexed query term over the allowed rows (how informative each term is)."""
        if self._model is None:
            return {}
        indptr = self._model.scores["indptr"]
        indices = self._model.scores["indices"]
        n = self.size if allowed is None else int(allowed.sum())
        out: dict[str, float] = {}
        for term in dict.fromkeys(self.tokenize(query)):
            t = self._model.vocab_dict.get(term)
            if t is None:
                continue
            rows = indices[int(indptr[t]) : int(indptr[t + 1])]
            df = len(rows) if allowed is None else int(allowed[rows].sum())
            if df:
                out[term] = float(self._idf(df, N=max(n, 1)))
        return out

    def top_k(self, query: str, allowed: np.ndarray, k: int, order: np.ndarray | None = None,
              stats: CollectionStats | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Best k allowed rows with a positive score, ties by `order`; unauthorized rows are
        never ranked. `stats`: collection statistics spanning several segments (default:
        this index's own over `allowed`). The same rows and scores as ranking `scores_with`
        (or, over the whole index, bm25s' own scores), pruned as the module says."""
        model = self._model
        if model is None or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scope = Scope.of(allowed)
        direct = stats is None and scope.n == self.size and self._storage == self.params.method
        stats = stats if stats is not None else self.collection_stats(query, scope)
        return self._pruned(self._plan(query, scope, stats, direct), scope, k, order, stats, direct)

    def _plan(self, query: str, scope: Scope, stats: CollectionStats,
              direct: bool) -> list[tuple[int, int, int, float, float]]:
        """(term id, postings start, end, idf, stored idf) per query token, in query order
        (repeats again), for the tokens that can score here. No idf is negative (bm25s
        clamps Robertson's at 0), which the pruning bound needs."""
        model = self._model
        assert model is not None
        indptr = model.scores["indptr"]
        plan = []
        for term in self.tokenize(query):
            t = model.vocab_dict.get(term)
            df = stats.df.get(term, 0)
            if t is None or df == 0:
                continue
            lo, hi = int(indptr[t]), int(indptr[t + 1])
            global_idf = float(self._store_idf(hi - lo, N=self.size))
            if global_idf <= 0 or (not direct and stats.n != scope.n and scope.count(model.scores["indices"][lo:hi]) == 0):
                continue  # as scores_with: no posting of the term is readable here
            idf = global_idf if direct else float(self._idf(df, N=stats.n))
            plan.append((t, lo, hi, idf, global_idf))
        return plan

    def _contribution(self, lo: int, at: np.ndarray, idf: float, global_idf: float, avgdl: float,
                      direct: bool) -> np.ndarray:
        """A term's score at postings positions `at`, computed as `scores_with` does."""
        assert self._model is not None
        data, indices = self._model.scores["data"], self._model.scores["indices"]
        if direct:
            return np.asarray(data[lo + at], dtype=np.float64)
        return idf * self._rescoped(data[lo + at], global_idf, indices[lo + at], avgdl)

    def _pruned(self, plan: list[tuple[int, int, int, float, float]], scope: Scope, k: int,
                order: np.ndarray | None, stats: CollectionStats, direct: bool) -> tuple[np.ndarray, np.ndarray]:
        assert self._model is not None
        indices = self._model.scores["indices"]
        avgdl = stats.total_len / stats.n if stats.n else 1.0
        counts: dict[int, int] = {}
        info: dict[int, tuple[int, int, float, float]] = {}
        for t, lo, hi, idf, gidf in plan:
            counts[t] = counts.get(t, 0) + 1
            info[t] = (lo, hi, idf, gidf)
        bound = {t: counts[t] * info[t][2] for t in counts}  # no chunk gets more from the term
        rarest_first = sorted(counts, key=lambda t: -bound[t])
        partial = np.zeros(self.size, dtype=np.float64)
        seen = np.zeros(self.size, dtype=bool)
        found: list[np.ndarray] = []
        read: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        theta, n_found = 0.0, 0
        for i, t in enumerate(rarest_first):
            rest = sum(bound[u] for u in rarest_first[i:])
            if n_found >= k and rest * (1 + 1e-6) < theta:
                break
            lo, hi, idf, gidf = info[t]
            at = scope.positions(indices[lo:hi])
            rows = np.asarray(indices[lo + at], dtype=np.int64)
            value = self._contribution(lo, at, idf, gidf, avgdl, direct)
            read[t] = (rows, value)
            partial[rows] += counts[t] * value
            new = rows[~seen[rows]]
            seen[new] = True
            found.append(new)
            n_found += len(new)
            if n_found >= k:
                pool = partial[np.concatenate(found)]
                theta = float(np.partition(pool, len(pool) - k)[len(pool) - k])
        candidates = np.flatnonzero(seen)  # sorted, without sorting the lists read
        left = sum(bound[t] for t in rarest_first if t not in read)
        if left:  # only candidates that can still reach the k-th best partial score
            candidates = candidates[partial[candidates] + left * (1 + 1e-6) >= theta * (1 - 1e-6)]
        # Sums in the precision and order the unpruned path uses: bm25s adds its stored float32
        # values in float32, scores_with adds in float64; either way in query order.
        acc: np.ndarray = np.zeros(self.size, dtype=np.float32 if direct else np.float64)
        for t, lo, hi, idf, gidf in plan:  # query order, as scores_with adds them: same floats
            if t in read:
                rows, value = read[t]
                acc[rows] += value.astype(acc.dtype)
                continue
            at, hit = _locate(indices[lo:hi], candidates)
            acc[candidates[hit]] += self._contribution(lo, at[hit], idf, gidf, avgdl, direct).astype(acc.dtype)
        scores = acc[candidates].astype(np.float32)
        keep = top_k(scores, np.ones(len(candidates), dtype=bool), k, floor=0.0,
                     order=None if order is None else order[candidates])
        return candidates[keep], scores[keep]
