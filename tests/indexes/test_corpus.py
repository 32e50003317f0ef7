from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from indexes.corpus import ADMIN_ONLY, load_documents
from indexes.files import FileReader
from retrieval.errors import IngestError


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def line(**fields) -> str:
    return json.dumps(fields) + "\n"


def test_jsonl_and_markdown_documents_load_with_their_fields(tmp_path):
    write(tmp_path / "a.jsonl",
          line(id="x1", text="hello", title="T", date="2025-01-02", acl=["group:sre"], metadata={"team": "sre"}))
    write(tmp_path / "runbooks" / "r.md",
          "---\ntitle: Runbook\ndate: 2024-05-06\nacl: [public, alice]\n---\n# Heading\nBody text.\n")
    docs = {d.doc.id: d.doc for d in load_documents([tmp_path])}
    assert docs["x1"].acl == ("group:sre",) and docs["x1"].source == "a" and docs["x1"].metadata == {"team": "sre"}
    md = docs["runbooks:r"]
    assert md.title == "Runbook" and md.date == date(2024, 5, 6) and md.acl == ("public", "alice")
    assert md.source == "runbooks" and md.text.startswith("# Heading")


def test_document_without_acl_is_private_to_admins_by_default(tmp_path):
    write(tmp_path / "a.jsonl", line(id="x1", text="hello"))
    assert load_documents([tmp_path])[0].doc.acl == ADMIN_ONLY
    assert load_documents([tmp_path], default_acl=("public",))[0].doc.acl == ("public",)


def test_markdown_title_falls_back_to_first_heading(tmp_path):
    write(tmp_path / "n.md", "Intro line\n\n# The Title\ntext")
    assert load_documents([tmp_path])[0].doc.title == "The Title"


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"id": "x2", "text": ', "malformed JSON"),
        (line(id="x1", text="again"), "duplicate document id 'x1'"),
        (line(id="x2", text="   "), "has no text"),
        (line(id="x2"), "has no text"),
        (line(id="x2", text="t", date="2025-13-40"), "not an ISO 8601 date"),
        (line(id="x2", text="t", acl=["group:"]), "invalid acl entries"),
        (line(id="x2", text="t", acl=[]), "acl must be a non-empty list"),
        (line(id="x2", text="t", acl="public"), "acl must be a non-empty list"),
        (line(id="x2", text="t", colour="red"), "unknown fields ['colour']"),
        (line(id="x 2", text="t"), "invalid document id \"x 2\""),
        (line(id="x2", text="t", metadata={"a": {"b": 1}}), "flat object"),
        ('["not", "an", "object"]\n', "must be a JSON object"),
    ],
)
def test_bad_jsonl_line_is_reported_with_file_and_line(tmp_path, bad, message):
    path = write(tmp_path / "c.jsonl", line(id="x1", text="first") + "\n" + bad)
    with pytest.raises(IngestError) as err:
        load_documents([path])
    assert message in str(err.value)
    assert err.value.path == str(path) and err.value.line == 3


def test_a_jsonl_line_missing_its_closing_brace_is_placed_at_the_end_of_that_line(tmp_path):
    cut = line(id="x2", text="no closing brace", acl=["public"]).rstrip("\n")[:-1]  # the last character was the '}'
    path = write(tmp_path / "c.jsonl", line(id="x1", text="first") + cut + "\n" + line(id="x3", text="t"))
    with pytest.raises(IngestError) as err:
        load_documents([path])
    assert err.value.line == 2
    assert f"at the end of the line (column {len(cut) + 1}): a closing '}}'" in str(err.value), str(err.value)
    wrong = write(tmp_path / "d.jsonl", '{"id": "x4", "text": "t" "acl": ["public"]}\n')
    with pytest.raises(IngestError, match="Expecting ',' delimiter at column 26$"):
        load_documents([wrong])


def test_duplicate_id_across_files_names_both_places(tmp_path):
    write(tmp_path / "a.jsonl", line(id="dup", text="one"))
    write(tmp_path / "b.md", "---\nid: dup\n---\nsecond")
    with pytest.raises(IngestError, match=r"duplicate document id 'dup' \(first at .*a.jsonl:1\)"):
        load_documents([tmp_path])


def test_unreadable_and_non_utf8_files_are_errors(tmp_path):
    bad = write(tmp_path / "bin.jsonl", b"\xff\xfe\x00garbage")
    with pytest.raises(IngestError, match="not UTF-8"):
        load_documents([bad])
    missing = tmp_path / "gone.jsonl"
    missing.symlink_to(tmp_path / "nowhere.jsonl")
    with pytest.raises(IngestError, match="no such file"):
        load_documents([missing])


def test_malformed_front_matter_names_the_line(tmp_path):
    path = write(tmp_path / "f.md", "---\ntitle: ok\nacl: [public\n---\nbody")
    with pytest.raises(IngestError, match="malformed front matter") as err:
        load_documents([path])
    assert err.value.path == str(path)


def test_unsupported_file_type_is_refused(tmp_path):
    path = write(tmp_path / "x.pptx", "binary")
    with pytest.raises(IngestError, match="unsupported file type"):
        load_documents([path])


def test_a_docx_that_is_not_one_is_named_with_its_reason(tmp_path):
    path = write(tmp_path / "x.docx", "binary")
    with pytest.raises(IngestError, match="not_docx") as err:
        load_documents([path])
    assert err.value.path == str(path)


def test_jsonl_is_read_by_line_and_names_the_line_that_is_not_utf8(tmp_path):
    # U+2028 and U+0085 are legal raw inside a JSON string; only \n (or \r\n) ends a line.
    first = json.dumps({"id": "a", "text": "one\u2028two\u0085three"}, ensure_ascii=False).encode()
    path = write(tmp_path / "c.jsonl", first + b"\r\n\n" + line(id="b", text="fine").encode() + b"{\"id\": \"c\xff\"}\n")
    with pytest.raises(IngestError, match="not UTF-8") as err:
        load_documents([path])
    assert err.value.line == 4
    path.write_bytes(first + b"\r\n\n" + line(id="b", text="fine").encode())
    loaded = load_documents([path])
    assert [d.doc.id for d in loaded] == ["a", "b"] and [d.origin.rsplit(":", 1)[1] for d in loaded] == ["1", "3"]
    assert loaded[0].doc.text == "one\u2028two\u0085three"


@pytest.mark.parametrize("word", ["everyone", "all", "Public", "nobody", "admins", "world"])
def test_a_keyword_like_acl_entry_stops_ingest_naming_the_line(tmp_path, word):
    """`["everyone"]` would be the id of a principal no one is: every reader, the admin who
    wrote it included, would lose the document. The rule is the one --default-acl keeps."""
    path = write(tmp_path / "a.jsonl", line(id="x1", text="fine", acl=["public"]) + line(id="x2", text="t", acl=[word]))
    with pytest.raises(IngestError, match=rf"a.jsonl:2: acl entry '{word}' is not an ACL keyword: use 'public'"):
        load_documents([path])
    md = write(tmp_path / "md" / "n.md", f"---\nacl: [{word}]\n---\nBody.\n")
    with pytest.raises(IngestError, match="is not an ACL keyword"):
        load_documents([md])


@pytest.mark.parametrize("doc_id", ["../admin/report", "a/b", "a\\b", ".", "..", "\u202eabc", "a\u0000b", "a\u200bb",
                                    "a\u2066b", "\ufeffa", "a\u00a0b",
                                    # look-alike separators, those NFKC maps to '/', '\\' or '..' included
                                    "a\uff0fb", "a\uff3cb", "a\u2215b", "a\u2044b", "a\u2216b", "a\u29f8b", "a\u29f9b",
                                    "a\u2571b", "a\u0338b", "\uff0e\uff0e", "\u2025", "1\u00bd",
                                    # percent-encoded octets, which another decoding turns into separators or dots
                                    "%2e%2e", "..%2Fadmin", "a%2fb", "a%5Cb", "%2E", "a\uff052fb"])
def test_an_id_with_separators_dot_segments_or_hidden_characters_stops_ingest(tmp_path, doc_id):
    path = write(tmp_path / "a.jsonl", line(id=doc_id, text="t"))
    with pytest.raises(IngestError, match=r"a.jsonl:1: invalid document id"):
        load_documents([path])


def test_ids_are_stored_in_nfkc_form_so_look_alike_spellings_are_one_id(tmp_path):
    from retrieval.types import check_doc_id

    assert check_doc_id("\uff29\uff2e\uff23\uff0d\uff12\uff10\uff14\uff11") == "INC-2041"  # fullwidth
    assert check_doc_id("\ufb01le-\u2460") == "file-1"  # a ligature, a circled digit
    assert check_doc_id("rate-50%") == "rate-50%" and check_doc_id("a?b%zz") == "a?b%zz"  # '%' without two hex digits
    path = write(tmp_path / "a.jsonl", line(id="\uff29\uff2e\uff23-1", text="t") + line(id="INC-1", text="u"))
    with pytest.raises(IngestError, match=r"a.jsonl:2: duplicate document id 'INC-1'"):
        load_documents([path])


def test_ids_of_every_script_and_with_dots_inside_are_accepted(tmp_path):
    ids = ["rn-ledger-2.4.1", "dbpedia:Foo_(bar)", "日本語-3", "naïve", "..x", "a?b%c"]
    path = write(tmp_path / "a.jsonl", "".join(line(id=i, text="t") for i in ids))
    assert [d.doc.id for d in load_documents([path])] == ids


def test_front_matter_keys_outside_the_fields_go_to_metadata(tmp_path):
    write(tmp_path / "notes" / "pump.md",
          "---\ntitle: Pump 4 seal\nreported_by: odette\nsite: Corrow Quay\nlogged: 2025-03-04\nhours: 3.5\n"
          "tags: [pump, seal, 4]\nmetadata:\n  team: plant\n---\nThe seal on pump 4 weeps.\n")
    doc = load_documents([tmp_path])[0].doc
    assert doc.title == "Pump 4 seal" and doc.text.startswith("The seal")
    assert doc.metadata == {"team": "plant", "reported_by": "odette", "site": "Corrow Quay", "logged": "2025-03-04",
                            "hours": 3.5, "tags": "pump, seal, 4"}


@pytest.mark.parametrize("front, message", [
    ("site: a\nmetadata:\n  site: b\n", "'site' set both as a front-matter field and in its metadata"),
    ("owner:\n  name: x\n", "front-matter field 'owner' holds a dict"),
    ("steps: [[1, 2]]\n", "front-matter field 'steps' holds a list"),
])
def test_a_front_matter_key_that_metadata_cannot_hold_names_itself(tmp_path, front, message):
    write(tmp_path / "n.md", f"---\n{front}---\nbody\n")
    with pytest.raises(IngestError, match=message) as err:
        load_documents([tmp_path])
    assert err.value.path == str(tmp_path / "n.md") and err.value.line == 1


def test_strict_fields_keep_the_error_for_unknown_front_matter_keys(tmp_path):
    write(tmp_path / "n.md", "---\nreported_by: odette\n---\nbody\n")
    with pytest.raises(IngestError, match=r"unknown front-matter fields \['reported_by'\]"):
        load_documents([tmp_path], reader=FileReader(strict_fields=True))


def test_an_empty_text_file_is_a_bad_file_skipped_with_the_flag_and_named_without_it(tmp_path):
    write(tmp_path / "empty.md", "")
    write(tmp_path / "only-front.md", "---\ntitle: nothing yet\n---\n  \n")
    write(tmp_path / "ok.md", "# Fine\ntext\n")
    reader = FileReader(skip_bad=True)
    assert [d.doc.id for d in load_documents([tmp_path], reader=reader)] == ["ok"]
    assert {(Path(s.path).name, s.reason) for s in reader.skipped.values()} == {("empty.md", "empty"),
                                                                                ("only-front.md", "empty")}
    with pytest.raises(IngestError, match="2 files cannot be ingested") as err:
        load_documents([tmp_path])
    assert "empty.md:1: empty" in err.value.message and "only-front.md:1: empty" in err.value.message


def test_every_bad_file_of_a_folder_is_reported_in_one_run(tmp_path):
    write(tmp_path / "a.jsonl", line(id="a1", text="fine") + line(id="a2"))
    write(tmp_path / "b.md", "---\ntitle: [unclosed\n---\nbody\n")
    write(tmp_path / "c.md", "# Good\nbody\n")
    write(tmp_path / "d.md", "---\nacl: [everyone]\n---\nbody\n")
    write(tmp_path / "e.jsonl", line(id="a1", text="again"))
    with pytest.raises(IngestError) as err:
        load_documents([tmp_path])
    message = err.value.message
    assert message.startswith("4 files cannot be ingested (nothing was published)")
    for expected in ("a.jsonl:2: document 'a2' has no text", "b.md:", "malformed front matter", "d.md:1:",
                     "e.jsonl:1: duplicate document id 'a1'"):
        assert expected in message, message
    assert "c.md" not in message


def test_one_bad_file_is_reported_as_it_always_was(tmp_path):
    write(tmp_path / "a.jsonl", line(id="a1", text="fine") + line(id="a2"))
    with pytest.raises(IngestError) as err:
        load_documents([tmp_path])
    assert (err.value.path, err.value.line) == (str(tmp_path / "a.jsonl"), 2)
