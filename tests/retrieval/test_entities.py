"""Entity matching must depend only on what the reader may see."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from retrieval.entities import EntityIndex, bridge_candidates, key_memo

WORDS = ["Project", "Nightingale", "acquisition", "INC-2041", "ledger", "Ostrava", "Trans", "plan"]


def test_a_forbidden_longer_title_does_not_hide_a_readable_one():
    index = EntityIndex.build([(0, "Project Nightingale"), (1, "Project Nightingale acquisition")])
    question = "What is the Project Nightingale acquisition?"
    assert index.find(question, np.array([True, False])) == ["Project Nightingale"]
    assert index.find(question, np.array([True, True])) == ["Project Nightingale acquisition"]
    assert index.find(question, np.array([False, False])) == []


def test_a_title_identifier_names_a_document_only_while_one_readable_title_carries_it():
    index = EntityIndex.build([(0, "INC-2041: ledger outage"), (1, "INC-2041 postmortem")],
                              [(0, "INC-2041"), (1, "INC-2041")], ["pub", "secret"])
    assert index.find("see INC-2041", np.array([True, False])) == ["INC-2041"]
    assert index.find("see INC-2041", np.array([True, True])) == []  # two titles carry it: it names neither


def test_a_forbidden_plain_title_does_not_make_a_shared_identifier_count():
    index = EntityIndex.build([(0, "INC-2041")], [(1, "INC-2041"), (2, "INC-2041")], ["secret", "a", "b"])
    assert index.find("see INC-2041", np.array([False, True, True])) == []
    assert index.find("see INC-2041", np.array([True, True, True])) == ["INC-2041"]


def test_a_whole_title_names_its_document_not_the_titles_that_mention_it():
    index = EntityIndex.build([(0, "BRCA1"), (1, "BRCA1 variants in cohort X"), (2, "Screening for BRCA1 carriers")],
                              [(1, "BRCA1"), (2, "BRCA1")], ["A", "B", "C"])
    everyone = np.ones(3, dtype=bool)
    assert bridge_candidates(index, ["A", "B", "C"], [], "What is BRCA1?", everyone) == ("A",)
    only_b = np.array([False, True, False])
    assert bridge_candidates(index, ["A", "B", "C"], [], "What is BRCA1?", only_b) == ("B",)


def test_rebuilds_that_share_a_name_key_memo_find_what_a_fresh_build_finds():
    """A live index rebuilds its entity indexes at every write; the runtime's memo of name keys
    spares the work, never changes what is found."""
    titles = [(0, "Project Nightingale (draft)"), (1, "INC-2041: ledger outage"), (2, "Ostrava Trans plan")]
    memo, question = key_memo(), "Did Project Nightingale cause INC-2041 or touch the Ostrava Trans plan?"
    first, again = EntityIndex.build(titles, memo=memo), EntityIndex.build(titles[1:], memo=memo)
    assert memo.get("Project Nightingale (draft)") == "project nightingale" and len(memo) == 3
    assert first.find(question) == EntityIndex.build(titles).find(question)
    assert again.find(question) == EntityIndex.build(titles[1:]).find(question)


names = st.lists(st.sampled_from(WORDS[:5]), min_size=1, max_size=2).map(" ".join)  # small: names collide


@given(st.lists(st.tuples(names, st.booleans(), st.booleans()), min_size=1, max_size=8),
       st.lists(st.sampled_from(WORDS[:6]), min_size=1, max_size=10).map(" ".join))
@settings(max_examples=300, deadline=None)
def test_matches_equal_an_index_of_the_readable_documents_alone(docs, text):
    """Row i belongs to document i; its name is a title or (flag) an identifier-like name."""
    allowed = np.array([readable for _, readable, _ in docs])
    doc_ids = [f"d{i}" for i in range(len(docs))]
    plain = [(i, name) for i, (name, _, one) in enumerate(docs) if not one]
    single = [(i, name) for i, (name, _, one) in enumerate(docs) if one]
    full = EntityIndex.build(plain, single, doc_ids)
    alone = EntityIndex.build([(i, n) for i, n in plain if allowed[i]], [(i, n) for i, n in single if allowed[i]], doc_ids)
    assert full.find(text, allowed) == alone.find(text)
    everything = np.ones(len(docs), dtype=bool)
    assert bridge_candidates(full, doc_ids, [], text, allowed) == bridge_candidates(alone, doc_ids, [], text, everything)
    # Read-only masks (the access layer's) are memoized per mask: answers never carry over.
    frozen_all, frozen = everything.copy(), allowed.copy()
    frozen_all.setflags(write=False)
    frozen.setflags(write=False)
    assert full.find(text, frozen_all) == EntityIndex.build(plain, single, doc_ids).find(text, everything)
    assert full.find(text, frozen) == alone.find(text)
    assert bridge_candidates(full, doc_ids, [], text, frozen) == bridge_candidates(alone, doc_ids, [], text, everything)
