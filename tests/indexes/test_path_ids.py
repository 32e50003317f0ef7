"""Every real file name becomes a valid document id (or a listed skip), and a name that gave a
valid id keeps it."""

from __future__ import annotations

import unicodedata
from pathlib import PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from indexes.path_ids import ID_HASH_CHARS, path_id
from retrieval.errors import InvalidRequest
from retrieval.types import MAX_DOC_ID_CHARS, check_doc_id


def _old_id(rel: PurePosixPath, keep_suffix: bool) -> str:
    """The id rule before names were made into ids."""
    return ":".join(rel.parts if keep_suffix else rel.with_suffix("").parts)


@pytest.mark.parametrize("rel, keep, want", [
    ("Q3 report.pdf", True, "Q3_report.pdf"),
    ("notes/Q3  \t report.md", False, "notes:Q3_report"),
    ("tab\there.txt", False, "tab_here"),
    ("ctl\x01\x7fx.md", False, "ctlx"),
    ("bidi\u202eabc\u2066.md", False, "bidiabc"),
    ("zero\u200bwidth\ufeff.html", True, "zerowidth.html"),
    ("#hash.md", False, "_hash"),
    ("#drafts/a.md", False, "_drafts:a"),
    ("a/#b.md", False, "a:#b"),
    ("nai\u0308ve.md", False, "na\u00efve"),  # stored decomposed (macOS): the composed id
    ("\uff21\uff22.md", False, "AB"),  # compatibility forms fold
    ("runbooks/r.md", False, "runbooks:r"),
    ("q3.pdf", True, "q3.pdf"),
])
def test_a_name_becomes_the_id_people_expect(rel, keep, want):
    got = path_id(PurePosixPath(rel), keep)
    assert got == want and check_doc_id(got) == got


def test_a_long_path_is_cut_with_a_stable_hash_keeping_the_extension():
    rel = PurePosixPath("d" * 200, "f" * 100 + ".pdf")
    got = path_id(rel, keep_suffix=True)
    assert len(got) == MAX_DOC_ID_CHARS and got.endswith(".pdf") and check_doc_id(got) == got
    assert got.startswith("d" * 200 + ":ff") and got[-4 - ID_HASH_CHARS - 1] == "~"
    assert path_id(rel, keep_suffix=True) == got  # stable
    other = path_id(PurePosixPath("d" * 200, "f" * 99 + "g.pdf"), keep_suffix=True)
    assert other != got and other[:-15] == got[:-15]  # same cut, another hash
    assert len(path_id(PurePosixPath("x" * 300 + ".md"), keep_suffix=False)) == MAX_DOC_ID_CHARS


def test_a_name_check_doc_id_still_refuses_is_left_to_the_caller():
    with pytest.raises(InvalidRequest):
        check_doc_id(path_id(PurePosixPath("a\\b.md"), keep_suffix=False))


_NAME = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=40)


@given(st.lists(_NAME, min_size=1, max_size=3), st.sampled_from([(".md", False), (".pdf", True), (".txt", False)]))
def test_a_name_that_gave_a_valid_id_keeps_it(parts, kind):
    suffix, keep = kind
    rel = PurePosixPath(*parts[:-1], parts[-1] + suffix)
    if rel.suffix != suffix:  # a part such as '.' or '..' is not a name a folder lists
        return
    old = _old_id(rel, keep)
    try:
        check_doc_id(old)
    except InvalidRequest:
        return
    if unicodedata.normalize("NFKC", old) == old:
        assert path_id(rel, keep) == old


@given(st.lists(_NAME, min_size=1, max_size=3))
def test_every_name_gives_an_id_that_is_valid_or_refused_by_check_doc_id_alone(parts):
    rel = PurePosixPath(*parts[:-1], parts[-1] + ".md")
    got = path_id(rel, keep_suffix=False)
    assert len(got) <= MAX_DOC_ID_CHARS and not got.startswith("#")
    assert not any(c.isspace() or unicodedata.category(c) in {"Cc", "Cf", "Co", "Cn"} for c in got)
