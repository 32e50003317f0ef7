from __future__ import annotations

from hypothesis import given, settings, strategies as st

from indexes.chunking import chunk_documents, chunk_spans
from retrieval.types import Document

words = st.lists(st.sampled_from(["alpha", "beta.", "gamma!", "delta?", "\n\n", "\n", "x" * 70, "e.g.", "  ", "   ", "\t"]),
                 max_size=300)


@given(words, st.integers(min_value=5, max_value=300))
@settings(max_examples=500)
def test_chunk_offsets_reproduce_the_text_and_respect_the_size(parts, max_chars):
    text = " ".join(parts)
    spans = chunk_spans(text, max_chars)
    covered = "".join(text[s:e] for s, e in spans)
    assert "".join(covered.split()) == "".join(text.split())  # nothing lost, nothing reordered
    for (s, e), nxt in zip(spans, spans[1:] + [(len(text), len(text))], strict=False):
        assert 0 < e - s <= max_chars and e <= nxt[0]
        assert text[s:e] == text[s:e].strip()


def test_chunks_number_rows_across_documents_and_keep_provenance():
    docs = [Document(id="a", text="One. Two. " * 50), Document(id="b", text="Short.")]
    chunks = chunk_documents(docs, max_chars=100)
    assert [c.row for c in chunks] == list(range(len(chunks)))
    assert chunks[-1].chunk_id == "b#0" and chunks[-1].text == "Short."
    for c in chunks:
        doc = docs[0] if c.doc_id == "a" else docs[1]
        assert doc.text[c.start : c.end] == c.text


def test_a_passage_never_crosses_a_page_or_section_and_names_its_region():
    from indexes.chunking import document_spans, region_at
    from retrieval.types import Document, Region

    pages = ["Alpha line one. " * 30, "Beta line two. " * 30, "Gamma three."]
    text = "\n\n".join(pages)
    starts = [0, len(pages[0]) + 2, len(pages[0]) + len(pages[1]) + 4]
    regions = tuple(Region(s, s + len(p), page=i + 1) for i, (s, p) in enumerate(zip(starts, pages, strict=True)))
    doc = Document(id="d", text=text, regions=regions)
    spans = document_spans(doc, max_chars=200)
    for s, e in spans:
        place = region_at(regions, [r.start for r in regions], e - 1)
        assert place is not None and place.start <= s and e <= place.end
    assert {region_at(regions, starts, e - 1).page for _, e in spans} == {1, 2, 3}
    plain = document_spans(Document(id="d", text=text), max_chars=2000)
    assert any(s < starts[1] < e for s, e in plain)  # without regions the same text packs across the page break


def test_a_heading_alone_above_its_first_subsection_joins_it():
    from indexes.chunking import document_spans, region_at
    from retrieval.types import Document, Region

    text = "Pumps\n\nSeals\n\nReplace the seal every spring.\n\nValves\n\nGrease the valves."
    at = [text.index(w) for w in ("Pumps", "Seals", "Valves")]
    regions = (Region(at[0], at[0] + 5, section=("Pumps",)),
               Region(at[1], at[2] - 2, section=("Pumps", "Seals")),
               Region(at[2], len(text), section=("Pumps", "Valves")))
    spans = document_spans(Document(id="d", text=text, regions=regions))
    assert [text[s:e] for s, e in spans] == ["Pumps\n\nSeals\n\nReplace the seal every spring.", "Valves\n\nGrease the valves."]
    assert [region_at(regions, at, e - 1).section for _, e in spans] == [("Pumps", "Seals"), ("Pumps", "Valves")]
