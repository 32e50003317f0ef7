"""A file that carries no date takes the full day its title or first lines state; explicit
metadata always wins, and a day mentioned further down is never the page's date."""

from __future__ import annotations

import json
from datetime import date

import pytest

from indexes.corpus import load_documents
from indexes.stated_date import stated_date


def test_a_heading_or_dateline_states_the_date():
    assert stated_date("Incident report — 14 March 2025", "body") == date(2025, 3, 14)
    assert stated_date(None, "# Minutes\n\nDate: 2025-06-03\n\nThe committee met.") == date(2025, 6, 3)
    assert stated_date("Board: minutes of May 20, 2025", "") == date(2025, 5, 20)


@pytest.mark.parametrize("title, text", [
    ("Post-incident review", "# Post-incident review\n\nIntro.\n\nMore.\n\nOn 12 March 2025 the readers failed."),
    ("Review", "A first paragraph long enough to be prose rather than a heading: on 12 March 2025 the badge "
               "readers failed during the fire drill, and the review covers what followed."),
    ("Report for March 2025", "quarterly numbers"),  # a month is no day
    ("Actions due before 3 May 2025", ""),  # under an operator
    ("Change window 03/04/2025", ""),  # day or month first?
    ("Swap of 14 March 2025 and 21 March 2025", ""),  # two days: which one?
])
def test_no_date_is_taken_from_the_body_a_month_an_operator_or_an_ambiguous_line(title, text):
    assert stated_date(title, text) is None


def test_files_without_a_date_take_the_stated_one_and_metadata_wins(tmp_path):
    (tmp_path / "heading.md").write_text("# Incident report — 14 March 2025\n\nThe mail relay stopped.\n")
    (tmp_path / "front.md").write_text("---\ndate: 2025-04-02\n---\n# Incident report — 20 March 2025\n\nText.\n")
    (tmp_path / "side.md").write_text("# Incident report — 21 March 2025\n\nText.\n")
    (tmp_path / "side.md.meta.json").write_text(json.dumps({"date": "2025-05-01"}))
    (tmp_path / "page.html").write_text("<html><head><title>Incident report — 9 March 2025</title></head>"
                                        "<body><h1>Incident report — 9 March 2025</h1><p>The VPN failed.</p></body></html>")
    (tmp_path / "meta.html").write_text('<html><head><title>Report — 9 March 2025</title>'
                                        '<meta name="date" content="2025-02-01"></head><body><p>Text.</p></body></html>')
    (tmp_path / "plain.md").write_text("# Notes\n\nOn 12 March 2025 something happened.\n")
    (tmp_path / "records.jsonl").write_text(json.dumps({"id": "rec", "title": "Report — 3 March 2025", "text": "x"}) + "\n")
    dates = {d.doc.id: d.doc.date for d in load_documents([tmp_path], default_acl=("public",))}
    assert dates == {"heading": date(2025, 3, 14), "front": date(2025, 4, 2), "side": date(2025, 5, 1),
                     "page.html": date(2025, 3, 9), "meta.html": date(2025, 2, 1), "plain": None, "rec": None}
