"""The loop's signals and entity links over shards: what one node's `HitScorer` and
`EntityLinker` give, computed by a front from every shard's share (retrieval/shard.py).

Pure merging, as retrieval/scatter.py is for the routes; every number is over the caller's
readable rows of all shards, so a forbidden chunk on any shard moves none of them:

- **Routing statistics** (`term_stats`, absent names) come from the summed BM25 collection
  statistics, which name every query term (0 for one no shard knows).
- **Evidence signals** (`annotate`): the summed statistics go back to every shard, which
  scores the hits it holds as a single index of all readable chunks would (BM25 score, the
  idf-weighted and plain share of the question's terms) and gives their cosine with the
  question's vector, encoded once here. The background a cosine is judged against is the
  moments of the readable vectors summed over shards; past BACKGROUND_ROWS readable rows each
  shard samples by a hash of the chunk id (retrieval/signals.py `background_rows`), so the
  sample is the single node's.
- **Entities** (`entities`, `bridge_docs`, `linked_docs`): each shard reports the entity
  candidates its titles and metadata names hold in a text and, per key, the readable
  documents carrying it (retrieval/entities.py `Sightings`); summed, the longest-first scan
  and the one-document rule (`Named.docs`) see what one index of every row sees.

Per question this costs a few rounds of one call per shard (concurrent on `fan_out`). Reading
the question is one of them (`read_question`: the statistics of its text and of each name
word, and both kinds of sightings, in one call per shard), and what a round merged is
remembered for the rest of the question (retrieval/question_scope.py), so the question's
statistics serve routing, the BM25 route and the evidence signals, and its title sightings
serve entity linking and the grader's links.
"""

from __future__ import annotations

from concurrent.futures import Executor
from functools import reduce
from typing import Callable, Sequence

import numpy as np

from retrieval.constraints import identifiers
from retrieval.entities import NO_SIGHTINGS, Sightings, bridge_texts, name_key, pick
from retrieval.linking import ranked_links
from retrieval.lru import Lru
from retrieval.policy import LinkedDoc
from retrieval.question_scope import recalled, remember, remembered
from retrieval.scatter import each, scatter_stats, stats_key
from retrieval.shard import EntityKind, Evidence, Reading, Shard
from retrieval.signals import Moments, absent_of, with_signals
from retrieval.text import name_words
from retrieval.types import NO_FILTERS, AccessScope, CollectionStats, Hit


def read_question(shards: Sequence[Shard], question: str, access: AccessScope, fan_out: Executor | None) -> Reading:
    """The shards' readings of `question` summed (one round), once per question; its parts
    are remembered under the keys the finer calls below look up."""
    def read() -> Reading:
        names = name_words(question)
        parts = each(shards, lambda s: s.read(question, names, access), fan_out)
        reading = reduce(lambda a, b: a + b, parts[1:], parts[0])
        remember(stats_key(question, access), reading.stats)
        for name, stats in zip(names, reading.name_stats, strict=True):
            remember(stats_key(name, access), stats)
        remember(sightings_key(question, access, "titles"), reading.titles)
        remember(sightings_key(question, access, "names"), reading.names)
        return reading

    return remembered(("read", question, access.tokens), read)


def judge_context(shards: Sequence[Shard], question: str, vector: np.ndarray, ids: Sequence[str], access: AccessScope,
                  stats: CollectionStats, hits: Sequence[Hit], fan_out: Executor | None) -> dict[str, Evidence]:
    """The evidence of a candidate context (one round), remembering for the rest of the
    question the title sightings of every text that may name a second hop (the question and
    each passage: the grader's links and a bridge read them) and the question's cosine with
    each document those sightings name: a superset of the documents any pick of them links."""
    texts = [t for _, t in bridge_texts(hits, question)]
    parts = each(shards, lambda s: s.judge(question, vector, ids, access, stats, texts), fan_out)
    judged = reduce(lambda a, b: a + b, parts[1:], parts[0])
    for text, seen in zip(texts, judged.sightings, strict=True):
        remember(sightings_key(text, access, "titles"), seen)
    for doc, cosine in judged.cosines.items():
        remember(cosine_key(question, doc, access), cosine)
    return judged.evidence


def cosine_key(question: str, doc: str, access: AccessScope) -> tuple[str, str, str, frozenset[str]]:
    return ("cosine", question, doc, access.tokens)


def sightings_key(text: str, access: AccessScope, kind: EntityKind) -> tuple[str, str, frozenset[str], EntityKind]:
    return ("sightings", text, access.tokens, kind)


def term_counts(stats: CollectionStats) -> tuple[int, int, int]:
    """(query terms, terms some readable chunk holds, rare ones: in at most 1% of the readable
    chunks) from collection statistics that name every query term (`Bm25Index.term_stats`)."""
    dfs = list(stats.df.values())
    known = sum(1 for df in dfs if df)
    rare = sum(1 for df in dfs if df and df <= max(2, stats.n // 100))
    return len(dfs), known, rare


class ShardedSignals:
    """`HitScorer` over shards (see the module docstring)."""

    def __init__(self, shards: Sequence[Shard], encode: Callable[[str], np.ndarray], fan_out: Executor | None = None) -> None:
        self._shards, self._encode, self._fan_out = list(shards), encode, fan_out
        # ((readable rows, version), mean, covariance) per access scope: 590 KB each at 384-d, as HitScorer keeps them
        self._backgrounds: Lru[frozenset[str], tuple[tuple[int, int], np.ndarray, np.ndarray]] = Lru(
            64, 64 << 20, lambda _key, v: v[1].nbytes + v[2].nbytes)

    def _stats(self, query: str, access: AccessScope) -> CollectionStats:
        return scatter_stats(self._shards, query, access, NO_FILTERS, self._fan_out)

    def term_stats(self, question: str, access: AccessScope) -> tuple[int, int, int]:
        return term_counts(self._stats(question, access))

    def absent_names(self, question: str, access: AccessScope, known: Sequence[str] = ()) -> list[str]:
        read_question(self._shards, question, access, self._fan_out)  # every name word's statistics in one round
        return absent_of(name_words(question), known, lambda name: self.term_stats(name, access))

    def _background(self, access: AccessScope, stats: CollectionStats) -> tuple[np.ndarray, np.ndarray]:
        """The scope's background, cached while the readable rows and every shard's live-write
        seq (`stats.version`, summed) are those it was computed for."""
        readable, version = stats.n, stats.version
        known = self._backgrounds.get(access.tokens)
        if known is not None and known[0] == (readable, version):
            return known[1], known[2]
        parts = each(self._shards, lambda s: s.moments(access, readable), self._fan_out)
        mean, cov = reduce(lambda a, b: a + b, parts[1:], parts[0]).background() if parts else \
            Moments(0, np.zeros(1), np.zeros((1, 1))).background()
        self._backgrounds.put(access.tokens, ((readable, version), mean, cov))
        return mean, cov

    def annotate(self, question: str, hits: Sequence[Hit], access: AccessScope, fresh: bool = False) -> list[Hit]:
        if not hits:
            return list(hits)
        stats = self._stats(question, access)
        query = self._encode(question)[0]
        ids = [h.chunk_id for h in hits]
        found: dict[str, Evidence] = {}
        if fresh:  # a part of the question, scored again: its evidence only
            for part in each(self._shards, lambda s: s.evidence(question, query, ids, access, stats), self._fan_out):
                found.update(part)
        else:  # the set about to be graded: its evidence, and what the grader's links need, in one round
            found = judge_context(self._shards, question, query, ids, access, stats, hits, self._fan_out)
        todo = [i for i, h in enumerate(hits) if h.chunk_id in found]
        if not todo:
            return list(hits)
        columns = np.asarray([found[hits[i].chunk_id] for i in todo], dtype=np.float64).T
        return with_signals(hits, todo, (columns[0], columns[1], columns[2], columns[3]), query,
                            self._background(access, stats), fresh)


class ShardedLinker:
    """`EntityLinker` over shards (see the module docstring)."""

    def __init__(self, shards: Sequence[Shard], encode: Callable[[str], np.ndarray], fan_out: Executor | None = None) -> None:
        self._shards, self._encode, self._fan_out = list(shards), encode, fan_out

    def _sightings(self, texts: Sequence[str], access: AccessScope, kind: EntityKind) -> list[Sightings]:
        """The merged sightings of each text: those this question read already, and the rest in one round."""
        known = [recalled(sightings_key(t, access, kind)) for t in texts]
        missing = [t for t, k in zip(texts, known, strict=True) if k is None]
        if missing:
            fresh = iter(self._scan(missing, access, kind))
            known = [k if k is not None else next(fresh) for k in known]
            for t, k in zip(texts, known, strict=True):
                remember(sightings_key(t, access, kind), k)
        return [k for k in known if k is not None]

    def _scan(self, texts: Sequence[str], access: AccessScope, kind: EntityKind) -> list[Sightings]:
        merged = [NO_SIGHTINGS] * len(texts)
        for part in each(self._shards, lambda s: s.sightings(texts, access, kind), self._fan_out):
            merged = [a + b for a, b in zip(merged, part, strict=True)]
        return merged

    def entities(self, text: str, access: AccessScope) -> list[str]:
        skip = identifiers(text)
        reading = read_question(self._shards, text, access, self._fan_out)  # both kinds of sightings, one round
        titles, names = reading.titles, reading.names
        return list(dict.fromkeys(pick(titles.candidates, titles.readable, skip) + pick(names.candidates, names.readable, skip)))

    def bridge_docs(self, hits: Sequence[Hit], question: str, access: AccessScope) -> tuple[str, ...]:
        texts = bridge_texts(hits, question)
        out: dict[str, None] = {}
        for (origin, _), seen in zip(texts, self._sightings([t for _, t in texts], access, "titles"), strict=True):
            for name in pick(seen.candidates, seen.readable):
                named = seen.named.get(name_key(name))
                for doc in named.docs if named is not None else ():
                    if doc != origin:
                        out.setdefault(doc, None)
        return tuple(out)

    def linked_docs(self, hits: Sequence[Hit], question: str, access: AccessScope) -> list[LinkedDoc]:
        docs = self.bridge_docs(hits, question, access)
        if not docs:
            return []
        named = set(self.bridge_docs((), question, access))
        best = {d: c for d in docs if (c := recalled(cosine_key(question, d, access))) is not None}
        rest = [d for d in docs if d not in best]
        if rest:  # documents no judged context named (or outside a question)
            query = self._encode(question)[0]
            for part in each(self._shards, lambda s: s.doc_cosines(rest, query, access), self._fan_out):
                best.update(part)
        return ranked_links(docs, {d: best[d] for d in docs if d in best}, named)
