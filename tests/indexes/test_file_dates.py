"""A file's date and where it came from: given (manifest, sidecar, a PUT's query), the file's own
metadata, or stated by the page, in that order; and the metadata dates an ingest does not
trust silently (one stamp on a whole folder, a day before the format existed, a future day).
Real PDFs written with fpdf2, their CreationDate set as generators set it."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from pathlib import Path

import pytest
from fpdf import FPDF

from indexes.files import date_warnings, file_record
from indexes.snapshot_build import build_snapshot

TODAY = date(2026, 12, 7)


def test_a_given_date_beats_the_files_metadata_and_the_metadata_beats_the_pages_own():
    fields = {"title": "Minutes of 3 June 2025", "date": "2020-01-01", "metadata": {}}
    assert file_record(fields, [{}], "Attendees: the board.") == (fields, "file")
    assert file_record(fields, [{"date": "2025-06-10"}], "x") == ({**fields, "date": "2025-06-10"}, "given")
    undated = {"title": "Minutes of 3 June 2025", "metadata": {}}
    assert file_record(undated, [{}, {}], "Attendees.") == ({**undated, "date": "2025-06-03"}, "stated")
    assert file_record({"title": None, "metadata": {}}, [{}], "Nothing.") == ({"title": None, "metadata": {}}, None)


def test_one_metadata_date_on_a_whole_folder_is_reported_not_trusted_silently():
    stamped = {Path(f"/corpus/manuals/m{i}.pdf"): "2019-05-02" for i in range(4)}
    varied = {Path("/corpus/reports/a.pdf"): "2025-01-03", Path("/corpus/reports/b.pdf"): "2025-02-03",
              Path("/corpus/reports/c.pdf"): "2025-03-03"}
    two = {Path(f"/corpus/memos/{n}.docx"): "2024-04-04" for n in "ab"}
    warnings = date_warnings({**stamped, **varied, **two}, TODAY)
    assert [(w["reason"], w["date"], len(w["files"])) for w in warnings] == [("same_date", "2019-05-02", 4)]
    assert "/corpus/manuals" in warnings[0]["message"]


@pytest.mark.parametrize("name, day, reason", [("old.pdf", "1980-01-01", "before_format"),
                                               ("old.docx", "2001-05-05", "before_format"),
                                               ("new.html", "2027-01-01", "future")])
def test_a_metadata_date_before_the_format_or_in_the_future_is_reported(name, day, reason):
    assert [w["reason"] for w in date_warnings({Path("/c") / name: day}, TODAY)] == [reason]
    assert date_warnings({Path("/c") / name: "2025-06-01"}, TODAY) == []


def _pdf(path: Path, text: str, created: datetime) -> None:
    pdf = FPDF()
    pdf.set_creation_date(created)
    pdf.add_page()
    pdf.set_font("helvetica", size=11)
    for line in text.splitlines():
        pdf.cell(0, 8, line, new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(path))


def test_an_ingest_reports_a_generators_stamp_on_a_folder_and_a_sidecar_settles_it(tmp_path, embedder):
    src = tmp_path / "manuals"
    src.mkdir()
    stamp = datetime(2019, 5, 2, tzinfo=timezone.utc)
    for n in range(3):
        _pdf(src / f"pump-{n}.pdf", f"Pump {n} maintenance\nCheck the seal of pump {n} every month.", stamp)
    _pdf(src / "minutes.pdf", "Minutes of 3 June 2025\nThe board approved the pump budget.",
         datetime(2025, 6, 4, tzinfo=timezone.utc))
    (src / "quarry.manifest.json").write_text(json.dumps({"files": [{"match": "*", "acl": ["public"]}]}))
    manifest = build_snapshot([src], tmp_path / "index", embedder)
    assert [(w["reason"], w["date"], sorted(Path(f).name for f in w["files"])) for w in manifest["date_warnings"]] == []
    _pdf(src / "minutes.pdf", "Minutes of 3 June 2025\nThe board approved the pump budget.", stamp)
    manifest = build_snapshot([src], tmp_path / "index", embedder)
    (warning,) = manifest["date_warnings"]
    assert warning["reason"] == "same_date" and warning["date"] == "2019-05-02" and len(warning["files"]) == 4
    for n in range(3):
        (src / f"pump-{n}.pdf.meta.json").write_text(json.dumps({"date": f"2024-0{n + 1}-01"}))
    assert build_snapshot([src], tmp_path / "index", embedder)["date_warnings"] == []  # one file left on the stamp
