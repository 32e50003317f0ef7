"""Front matter is parsed in bounded time and memory: no aliases (a few hundred bytes cannot
expand into gigabytes), bounded size and depth, short error messages; the first heading is
found by a linear scan."""

from __future__ import annotations

import re

import pytest

from indexes.corpus import load_documents
from indexes.front_matter import MAX_DEPTH, MAX_FRONT_MATTER_BYTES, first_heading, split_front_matter
from retrieval.errors import IngestError

LAUGHS = "---\n" + "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n" + "".join(
    f"{x}: &{x} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, x in zip("abcdefgh", "bcdefghi", strict=True)
) + "acl: *i\n---\nbody\n"


def test_a_billion_laughs_front_matter_is_a_short_clear_error(tmp_path):
    assert len(LAUGHS) < 500
    path = tmp_path / "laughs.md"
    path.write_text(LAUGHS)
    with pytest.raises(IngestError, match="anchors and aliases") as err:
        load_documents([tmp_path])
    assert err.value.path == str(path) and err.value.line == 2
    assert len(str(err.value)) < 400


@pytest.mark.parametrize("front", ["a: &x 1\nb: 2", "base: &b {acl: [public]}\n<<: *b", "title: *nothing"])
def test_any_anchor_or_alias_is_refused(front):
    with pytest.raises(IngestError, match="anchors and aliases"):
        split_front_matter(f"---\n{front}\n---\nbody", "f.md")


def test_front_matter_nested_past_the_bound_is_refused():
    deep = "metadata: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(IngestError, match=f"deeper than {MAX_DEPTH} levels"):
        split_front_matter(f"---\n{deep}\n---\nbody", "f.md")
    very_deep = "metadata: " + "[" * 30_000 + "]" * 30_000  # no recursion error, no traceback
    with pytest.raises(IngestError, match="deeper than"):
        split_front_matter(f"---\n{very_deep}\n---\nbody", "f.md")


def test_front_matter_past_its_size_bound_is_refused():
    big = "title: " + "x" * MAX_FRONT_MATTER_BYTES
    with pytest.raises(IngestError, match="front matter larger than"):
        split_front_matter(f"---\n{big}\n---\nbody", "f.md")


@pytest.mark.parametrize("front", ["date: 2024-13-45", "n: " + "9" * 5000])
def test_values_python_refuses_are_malformed_front_matter_not_a_traceback(front):
    with pytest.raises(IngestError, match="malformed front matter") as err:
        split_front_matter(f"---\n{front}\n---\nbody", "f.md")
    assert len(err.value.message) < 400


def test_a_huge_value_is_quoted_as_a_short_excerpt(tmp_path):
    entries = ", ".join(f"'bad entry {i}'" for i in range(2000))
    (tmp_path / "a.md").write_text(f"---\nacl: [{entries}]\n---\nbody\n")
    with pytest.raises(IngestError, match="invalid acl entries") as err:
        load_documents([tmp_path])
    assert len(err.value.message) < 700 and "characters cut" in err.value.message
    (tmp_path / "a.md").write_text(f"---\ndate: '{'z' * 30_000}'\n---\nbody\n")
    with pytest.raises(IngestError, match="not an ISO 8601 date") as err:
        load_documents([tmp_path])
    assert len(err.value.message) < 400


def test_ordinary_front_matter_reads_as_before():
    meta, body = split_front_matter("---\ntitle: T\nacl: [public]\ndate: 2024-05-06\n---\n# H\ntext", "f.md")
    assert meta["title"] == "T" and meta["acl"] == ["public"] and str(meta["date"]) == "2024-05-06"
    assert body == "# H\ntext"
    assert split_front_matter("no front matter", "f.md") == ({}, "no front matter")


def test_a_heading_line_of_100000_spaces_loads(tmp_path):
    (tmp_path / "spaces.md").write_text("#" + " " * 100_000 + "\n\nBody text.\n" + "# " + " " * 100_000 + "x" + " " * 100_000)
    (tmp_path / "tabs.md").write_text("# \t" * 50_000 + "\nBody.\n")
    docs = {d.doc.id: d.doc for d in load_documents([tmp_path])}
    assert docs["spaces"].title == "x" and docs["tabs"].title.startswith("#")


_OLD_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)  # the pattern the scan replaces


@pytest.mark.parametrize("body", [
    "Intro line\n\n# The Title\ntext", "# Title ##\n", "#\tTabbed  \n", "# C#\n", "# # #\n", "# A # #\n",
    "#NoSpace\n# Real\n", "## Two\n# One\n", "# Title\r\nbody", "text only", "", "  # indented\n# Yes",
    "# \u00e9t\u00e9 \u2014 r\u00e9sum\u00e9 #", "#\u00a0nbsp title",
])
def test_the_heading_scan_finds_what_the_pattern_found(body):
    m = _OLD_HEADING.search(body)
    assert first_heading(body) == (m.group(1) if m else None)
