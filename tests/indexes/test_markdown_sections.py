"""A Markdown note's headings become its sections: CommonMark's ATX and setext headings, never
a `#` line in a fenced sample, never a list item over a rule; and on generated notes each fact
lies under the heading path it was written under."""

from __future__ import annotations

import pytest

from benchmarks.file_corpus import write_markdown_notes
from indexes.corpus import load_documents
from indexes.files import FileReader
from indexes.chunking import document_spans
from indexes.markdown_sections import headings, markdown_regions

NOTE = """Written before any heading.

# Pump manual #

Read it all.

Setup
=====

```sh
# a comment, not a heading
## nor this
```
Install the unit.

## **Oil** and [grease](https://example.org/g)

Oil monthly.

---

2. Bleed the line
---

#no-space is a tag, not a heading

    # indented code

### `Torque` table
"""


def test_headings_follow_commonmark():
    assert [(level, name) for _, level, name in headings(NOTE)] == [
        (1, "Pump manual"), (1, "Setup"), (2, "Oil and grease"), (3, "Torque table")]


def test_regions_cover_each_section_with_its_path():
    regions = markdown_regions(NOTE)
    by_path = {r.section: NOTE[r.start:r.end] for r in regions}
    assert by_path[()] == "Written before any heading."
    assert by_path[("Pump manual",)].startswith("# Pump manual") and "Read it all." in by_path[("Pump manual",)]
    assert "# a comment, not a heading" in by_path[("Setup",)]
    assert "2. Bleed the line" in by_path[("Setup", "Oil and grease")]
    assert by_path[("Setup", "Oil and grease", "Torque table")] == "### `Torque` table"
    assert all(a.end <= b.start for a, b in zip(regions, regions[1:], strict=False))  # ordered, not overlapping


def test_a_note_without_headings_has_no_regions_and_text_files_none_at_all(tmp_path):
    """With `markdown_sections` (off by default: README, Ingest)."""
    assert markdown_regions("Just a paragraph.\n\nAnd another.\n") == ()
    (tmp_path / "plain.txt").write_text("# Not a section in a text file\n\nBody.\n")
    (tmp_path / "note.md").write_text("# A section\n\nBody.\n")
    docs = {ld.doc.id: ld.doc for ld in load_documents([tmp_path], reader=FileReader(markdown_sections=True))}
    assert docs["plain"].regions == ()
    assert [r.section for r in docs["note"].regions] == [("A section",)]
    off = {ld.doc.id: ld.doc for ld in load_documents([tmp_path])}  # the default: no sections, the text the same
    assert off["note"].regions == () and off["note"].text == docs["note"].text


@pytest.mark.parametrize("seed", range(3))
def test_every_generated_fact_lies_under_its_heading_path(tmp_path, seed):
    files, facts = write_markdown_notes(tmp_path, seed, 3)
    docs = {ld.doc.id: ld.doc for ld in load_documents([tmp_path], reader=FileReader(markdown_sections=True))}
    assert len(facts) == 5 * len(files)
    for fact in facts:
        doc = docs[fact.file.stem]
        holding = [r for r in doc.regions if fact.sentence in doc.text[r.start:r.end]]
        assert [r.section for r in holding] == [fact.section], fact.sentence
        spans = [(s, e) for s, e in document_spans(doc) if fact.sentence in doc.text[s:e]]
        assert spans, fact.sentence  # no passage cuts the fact's sentence at a section's edge


def test_offsets_stay_those_of_the_text(tmp_path):
    (tmp_path / "n.md").write_text("---\ntitle: T\n---\nIntro.\n\n## Part\n\nBody.\n")
    doc = load_documents([tmp_path], reader=FileReader(markdown_sections=True))[0].doc
    assert doc.text.startswith("Intro.")
    assert [doc.text[r.start:r.end] for r in doc.regions] == ["Intro.", "## Part\n\nBody."]
