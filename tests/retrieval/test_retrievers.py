from __future__ import annotations

from datetime import date

import pytest

from retrieval.errors import InvalidRequest
from retrieval.fusion import rrf
from retrieval.limits import Limits
from retrieval.search import search
from retrieval.types import Filters, Principal

ERIN = Principal("erin")
CAROL = Principal("carol", ("security", "sre"))
BOB = Principal("bob", ("finance",))
ALL = Filters()


def ids(hits) -> list[str]:
    return [h.doc_id for h in hits]


def run(engine, name, query, principal=ERIN, k=8, filters=ALL):
    return search(engine.retrievers, name, query, principal, k, filters, engine.limits)


def test_exact_finds_an_identifier_as_a_whole_token(engine):
    assert set(ids(run(engine, "exact", "what happened in INC-2077?"))) == {"m05", "m06"}
    assert run(engine, "exact", "INC-207") == []  # a prefix of an identifier is not that identifier


def test_exact_matches_quoted_phrases_and_regular_expressions(engine):
    assert ids(run(engine, "exact", '"drain the connection pool"')) == ["m01"]
    assert set(ids(run(engine, "exact", "/E40[0-9]{2}/", principal=BOB))) == {"m01", "m20"}
    with pytest.raises(InvalidRequest, match="invalid regular expression"):
        run(engine, "exact", "/(unclosed/")


def test_exact_never_matches_a_private_document_for_an_outsider(engine):
    assert run(engine, "exact", "SEC-210") == []
    assert ids(run(engine, "exact", "SEC-210", principal=CAROL)) == ["m11"]


def test_dense_finds_a_paraphrase_without_shared_keywords(engine):
    hits = run(engine, "dense", "how can I renew the key that signs authentication tokens", k=3)
    assert hits[0].doc_id == "m03"
    assert "m02" not in ids(hits)  # the security runbook is private to its group
    renew = run(engine, "dense", "how can I renew the key that signs authentication tokens", principal=CAROL, k=2)
    assert ids(renew)[0] in {"m02", "m03"}


def test_bm25_ranks_keyword_matches_and_reports_its_score(engine):
    hits = run(engine, "bm25", "carrier webhook retries")
    assert hits[0].doc_id == "m15" and hits[0].retrievers == ("bm25",) and hits[0].signal("bm25") == hits[0].score


def test_hybrid_fuses_both_retrievers_and_keeps_their_signals(engine):
    hits = run(engine, "hybrid", "carrier webhook retries", k=3)
    top = hits[0]
    assert top.doc_id == "m15" and set(top.retrievers) == {"bm25", "dense"}
    assert top.signal("bm25") > 0 and top.signal("dense") > 0 and top.signal("rrf") == top.score


@pytest.mark.parametrize("query", ["connection pool exhausted", "how do I rotate a leaked key?", "INC-2077", "zzz"])
@pytest.mark.parametrize("principal", [ERIN, CAROL, BOB])
def test_hybrid_on_rows_equals_rrf_over_the_two_hit_lists(engine, query, principal):
    """Fusing rows and building only k hits is an optimisation: the result is plain RRF."""
    hybrid = engine.retrievers["hybrid"]
    depth = hybrid.params.depth
    access = principal.access_scope()
    expected = rrf({name: engine.retrievers[name].search(query, access, depth, ALL) for name in ("bm25", "dense")},
                   k=hybrid.params.rrf_k, weights=hybrid.params.weights, limit=5)
    assert hybrid.search(query, access, 5, ALL) == expected


@pytest.mark.parametrize("query", ["connection pool exhausted", "how do I rotate a leaked key?", "zzz"])
@pytest.mark.parametrize("principal", [ERIN, CAROL])
def test_zscore_hybrid_ranks_as_zscore_fusion_of_the_two_authorized_lists(engine, query, principal):
    from retrieval.fusion import zscore_scores
    from retrieval.retrievers.hybrid import FusionParams, HybridRetriever

    bm25, dense = engine.retrievers["bm25"], engine.retrievers["dense"]
    params = FusionParams(method="zscore", weights={"bm25": 0.4, "dense": 0.6})
    access = principal.access_scope()
    hits = HybridRetriever(bm25, dense, params).search(query, access, 5, ALL)
    sides = {name: engine.retrievers[name].search(query, access, params.depth, ALL) for name in ("bm25", "dense")}
    fused, _ = zscore_scores({n: ([h.chunk_id for h in hs], [h.score for h in hs]) for n, hs in sides.items()}, params.weights)
    assert [h.chunk_id for h in hits] == sorted(fused, key=lambda c: -fused[c])[: len(hits)]
    assert all(abs(h.score - fused[h.chunk_id]) < 1e-9 and h.signal("zscore") == h.score for h in hits)
    readable = {h.chunk_id for hs in sides.values() for h in hs}
    assert {h.chunk_id for h in hits} <= readable


@pytest.mark.parametrize("query", ["connection pool exhausted", "how do I rotate a leaked key?", "zzz"])
def test_zscore_hybrid_on_rows_equals_zscore_fusion_of_the_two_hit_lists(engine, query):
    """Hit for hit, signals included: the rows path and the hit lists share one fusion."""
    from retrieval.fusion import fuse_hits
    from retrieval.retrievers.hybrid import FusionParams, HybridRetriever

    params = FusionParams(method="zscore", weights={"bm25": 0.4, "dense": 0.6})
    hybrid = HybridRetriever(engine.retrievers["bm25"], engine.retrievers["dense"], params)
    access = CAROL.access_scope()
    sides = {name: engine.retrievers[name].search(query, access, params.depth, ALL) for name in ("bm25", "dense")}
    assert hybrid.search(query, access, 5, ALL) == fuse_hits(sides, "zscore", weights=params.weights, limit=5)


def test_an_unknown_fusion_method_is_refused():
    from retrieval.retrievers.hybrid import FusionParams

    with pytest.raises(ValueError, match="rrf, zscore"):
        FusionParams(method="borda")


def test_filters_narrow_results_like_the_acl(engine):
    assert set(ids(run(engine, "dense", "engine", k=50, filters=Filters(sources=("faq",))))) == {"m03", "m10", "m15", "m17"}
    assert ids(run(engine, "bm25", "routing engine", k=50, filters=Filters(doc_ids=("m21",)))) == ["m21"]
    dated = run(engine, "dense", "routing engine", k=50, filters=Filters(date_from=date(2024, 6, 1), date_to=date(2024, 12, 31)))
    assert dated and all("2024-06-01" <= h.date <= "2024-12-31" for h in dated)
    assert "m21" not in ids(dated)  # an undated document cannot be shown to fall inside the range


def test_provenance_offsets_point_into_the_document(engine):
    for h in run(engine, "hybrid", "certificate chain", k=5):
        doc = engine.snapshot.catalog.document(h.doc_id)
        assert doc.text[h.start : h.end] == h.text


def test_document_without_acl_is_visible_to_admins_only(engine):
    assert "m22" not in ids(run(engine, "dense", "document has no ACL", k=50))
    assert "m22" in ids(run(engine, "dense", "document has no ACL", principal=Principal("root", ("admin",)), k=3))


@pytest.mark.parametrize(
    "name, query, k, message",
    [
        ("nope", "x", 3, "unknown retriever 'nope'"),
        ("bm25", "   ", 3, "must not be empty"),
        ("bm25", "x" * 2001, 3, "the limit is 2000"),
        ("bm25", "x", 0, "k must be an integer from 1 to 50"),
        ("bm25", "x", 51, "k must be an integer from 1 to 50"),
        ("bm25", "x", True, "k must be an integer"),
    ],
)
def test_bad_search_requests_get_typed_errors(engine, name, query, k, message):
    with pytest.raises(InvalidRequest, match=message):
        search(engine.retrievers, name, query, ERIN, k, ALL, Limits())


def test_too_many_filter_values_are_refused(engine):
    with pytest.raises(InvalidRequest, match="filter doc_ids has 101 values"):
        run(engine, "bm25", "x", filters=Filters(doc_ids=tuple(f"d{i}" for i in range(101))))


def test_exact_finds_an_identifier_that_only_the_title_or_metadata_carries(trial_engine):
    # "HIT-1042" is in the title only, "HIT-1050" in a metadata value only: both name a document.
    assert ids(run(trial_engine, "exact", "HIT-1042")) == ["hit-1042"]
    assert ids(run(trial_engine, "exact", "what happened in HIT-1050?")) == ["hit-1050"]
    assert ids(run(trial_engine, "exact", '"east wing"')) == ["hit-1050"]
    # the title of a document the caller may not read matches nothing
    assert run(trial_engine, "exact", "HIT-1099") == []
    assert ids(run(trial_engine, "exact", "HIT-1099", principal=Principal("pat", ("pharmacy",)))) == ["hit-1099"]


def test_an_identifier_in_the_title_meets_the_question_constraint(trial_engine):
    result = trial_engine.query("What was done about HIT-1042?", ERIN)
    assert result.status == "answer_context"
    assert result.context[0].doc_id == "hit-1042"
    result = trial_engine.query("Who fixed HIT-1050?", ERIN)  # the ticket number is a metadata value
    assert result.status == "answer_context" and "hit-1050" in ids(result.context)
    assert not result.attempts[0].grade.missing or "identifier:HIT-1050" not in result.attempts[0].grade.missing
