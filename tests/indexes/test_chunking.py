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
