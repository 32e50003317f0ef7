"""Property: for random ACLs and principals, every retriever returns only authorized chunks,
and returns min(k, authorized matches) of them, the best ones, as if the others did not exist."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from indexes.bm25_index import Tokenizer
from retrieval.access import ChunkTable
from retrieval.retrievers.bm25 import Bm25Retriever
from retrieval.retrievers.dense import DenseRetriever
from retrieval.retrievers.exact import ExactRetriever
from retrieval.retrievers.hybrid import HybridRetriever
from retrieval.types import Filters, Principal

TOKENS = ["public", "alice", "bob", "carol", "group:sre", "group:finance", "group:hr", "group:security"]
QUERIES = ["ledger lock timeout", "INC-2077", "E4012", "signing keys", "leave for parents", "routing engine",
           "\"tracking gateway\"", "budget", "/INC-2[0-9]+/", "webhook"]
TOKENIZE = Tokenizer()


@pytest.fixture(scope="module")
def base(engine):
    snap = engine.snapshot
    t = snap.chunks
    index_texts = [f"{title}\n{text}" if title else text for title, text in zip(t.titles, t.texts, strict=True)]
    vectors = engine.embedder.encode(index_texts)
    doc_ids = sorted(set(t.doc_ids))
    return snap, t, index_texts, vectors, doc_ids, engine.embedder.encode_query


def table_with(t: ChunkTable, doc_acl: dict[str, tuple[str, ...]]) -> ChunkTable:
    return ChunkTable(t.chunk_ids, t.doc_ids, t.texts, t.starts, t.ends, t.titles, t.sources, t.dates,
                      [doc_acl[d] for d in t.doc_ids], t.metas)


acl_strategy = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=3, unique=True).map(tuple)
principal_strategy = st.builds(
    Principal,
    id=st.sampled_from(["alice", "bob", "carol", "dave"]),
    groups=st.lists(st.sampled_from(["sre", "finance", "hr", "security"]), max_size=2, unique=True).map(tuple),
)
filters_strategy = st.one_of(
    st.just(Filters()),
    st.builds(Filters, sources=st.lists(st.sampled_from(["runbooks", "faq", "incidents", "policies"]),
                                        min_size=1, max_size=2, unique=True).map(tuple)),
)


@given(data=st.data(), principal=principal_strategy, k=st.integers(1, 12), query=st.sampled_from(QUERIES),
       filters=filters_strategy)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_retriever_returns_only_authorized_chunks_and_all_it_should(base, data, principal, k, query, filters):
    snap, t, index_texts, vectors, doc_ids, encode = base
    doc_acl = {d: data.draw(acl_strategy, label=f"acl[{d}]") for d in doc_ids}
    table = table_with(t, doc_acl)
    tokens = principal.access_tokens()
    allowed = np.array([
        not tokens.isdisjoint(doc_acl[d]) and (filters.sources is None or s in filters.sources)
        for d, s in zip(t.doc_ids, t.sources, strict=True)
    ])
    access = principal.access_scope()
    assert np.array_equal(table.mask(access, filters), allowed)

    bm25 = Bm25Retriever(snap.bm25, table)
    dense = DenseRetriever(snap.dense, encode, table)
    exact = ExactRetriever(snap.catalog, table)
    hybrid = HybridRetriever(bm25, dense)

    q_terms = set(TOKENIZE(query))
    bm25_matches = [r for r in np.flatnonzero(allowed) if q_terms & set(TOKENIZE(index_texts[r]))]
    # exact reads a passage with its document's title and metadata values
    exact_matches = [r for r in np.flatnonzero(allowed)
                     if any(_exact_match(query, part) for part in (t.texts[r], t.titles[r], t.metas[r]) if part)]
    expectations = {bm25: len(bm25_matches), dense: int(allowed.sum()), exact: len(exact_matches), hybrid: int(allowed.sum())}

    for retriever, n_matches in expectations.items():
        hits = retriever.search(query, access, k, filters)
        assert len(hits) == min(k, n_matches), retriever.name
        for h in hits:
            assert not tokens.isdisjoint(doc_acl[h.doc_id]), f"{retriever.name} leaked {h.chunk_id}"
        assert len({h.chunk_id for h in hits}) == len(hits)

    # Dense ranking equals brute-force cosine over the authorized rows only.
    scores = vectors @ encode(query)[0]
    order = [r for r in np.argsort(-scores, kind="stable") if allowed[r]][:k]
    assert [h.chunk_id for h in dense.search(query, access, k, filters)] == [t.chunk_ids[r] for r in order]


def _exact_match(query: str, text: str) -> bool:
    import re

    low = text.lower()
    if query.startswith("/"):
        return re.search(query.strip("/"), text, re.IGNORECASE) is not None
    if query.startswith('"'):
        return query.strip('"').lower() in low
    if any(c.isdigit() for c in query):
        return re.search(r"(^|[^\w])" + re.escape(query.lower()) + r"($|[^\w])", low) is not None
    return " ".join(query.lower().split()) in " ".join(low.split())
