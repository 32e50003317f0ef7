"""Questions that ask for the list of a period's documents, on two domains generated here:
incident notes (Markdown and saved HTML pages, some dated only by their heading, some that a
security group alone reads) and a facilities office's meeting minutes and change log, worded
apart from the first. A list is graded by how it was gathered (every readable document dated
in the period), never by passage relevance; a forbidden document dated in the period changes
nothing a reader sees, checked against an index built without the forbidden documents."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Callable

import pytest

from quarry_client.models import Answer

from retrieval.answer import result_json
from retrieval.types import Principal
from tests.conftest import assert_alike

TODAY = date(2025, 11, 1)
READER = Principal("rosa", (), frozenset({"query"}))
SECURITY = Principal("ines", ("security",), frozenset({"query"}))
SYSTEMS = ["payment gateway", "badge readers", "mail relay", "VPN concentrator", "print server", "wiki",
           "backup job", "phone system", "HR portal", "ticket queue", "file share", "timesheet app"]


def _incident(n: int, day: str, how: str, *, forbidden: bool = False) -> tuple[str, str]:
    """(file name, content) of one incident note dated `day`: in front matter, only in its
    heading (Markdown), or only in a saved HTML page's title and heading."""
    system = SYSTEMS[n % len(SYSTEMS)]
    d = date.fromisoformat(day)
    shown = f"{d.day} {d.strftime('%B')} {d.year}"
    body = (f"The {system} stopped answering for about {20 + 7 * n} minutes. The on-call engineer restarted it, "
            f"checked the logs and opened a follow-up ticket for the {system} owners.")
    acl = "acl: [group:security]\n" if forbidden else ""
    if how == "front":
        return f"inc-{n:02d}.md", f"---\ndate: {day}\n{acl}---\n# {system.capitalize()} outage\n\n{body}\n"
    if how == "heading":
        front = f"---\n{acl}---\n" if acl else ""
        return f"inc-{n:02d}.md", f"{front}# Incident report — {shown}\n\n{body}\n"
    assert how == "html" and not forbidden
    return f"inc-{n:02d}.html", (f"<html><head><title>Incident report — {shown}</title></head><body>"
                                 f"<h1>Incident report — {shown}</h1><p>{body}</p></body></html>")


# (number, day, how the date is given); numbers 90+ only the security group reads
INCIDENTS = [(1, "2025-01-08", "front"), (2, "2025-01-19", "heading"), (3, "2025-01-27", "front"),
             (4, "2025-02-03", "heading"), (5, "2025-02-14", "front"), (6, "2025-02-25", "html"),
             (7, "2025-03-04", "front"), (8, "2025-03-11", "heading"), (9, "2025-03-19", "html"),
             (10, "2025-03-28", "front"), (11, "2025-04-09", "front"), (12, "2025-05-21", "heading"),
             (13, "2025-06-30", "front")]
FORBIDDEN = [(90, "2025-03-15", "front"), (91, "2025-03-22", "heading"), (92, "2025-07-10", "front")]


def _incident_files(root: Path, forbidden: bool) -> Path:
    src = root / "notes"
    src.mkdir(parents=True)
    for n, day, how in INCIDENTS + (FORBIDDEN if forbidden else []):
        name, text = _incident(n, day, how, forbidden=n >= 90)
        (src / name).write_text(text)
    # explicit metadata wins over the heading: dated in April whatever its heading says
    (src / "inc-20.md").write_text("---\ndate: 2025-04-02\n---\n# Incident report — 20 March 2025\n\n"
                                   "The wiki was read-only for an hour; the report was written up in April.\n")
    # a day in the body is no date of the page: undated, so in no period's list
    (src / "review.md").write_text(
        "# Post-incident review of the quarter\n\nThis review looks back at the outages of the quarter and what they "
        "had in common. On 12 March 2025 the badge readers failed during the fire drill, which is the case the "
        "review spends most of its time on, before it turns to the monitoring gaps the on-call rota reported.\n")
    return src


def _with_and_without(tmp_path_factory, embedder, name: str, write: Callable[[Path, bool], list[Path]]):
    """Engines over two indexes of a domain's files (`write(root, forbidden)` returns the
    folders to ingest): "full" with the documents a group alone reads, "readable" without."""
    from indexes.snapshot_build import BuildOptions, build_snapshot
    from routes.service.view import open_view

    engines = {}
    for variant, forbidden in (("full", True), ("readable", False)):
        root = tmp_path_factory.mktemp(f"{name}-{variant}")
        build_snapshot(write(root, forbidden), root / "index", embedder, BuildOptions(default_acl=("public",)))
        engines[variant] = open_view(root / "index", embedder, today=TODAY, plugins=False)
    return engines


def _same_for_a_reader(engines, question: str) -> None:
    """The answer over the index with a group's documents equals the answer over the one built
    without them: documents, order, counts, grades and gap (scores within 1e-4)."""
    full, readable = (result_json(engines[n].query(question, READER, k=8)) for n in ("full", "readable"))
    for shown in (full, readable):
        for key in ("trace_id", "elapsed_ms"):
            shown.pop(key)
        for a in shown["attempts"]:
            a.pop("ms")
        for c in shown["context"]:
            c.pop("chunk_id")  # a chunk id holds the build's file order, not the answer
    assert_alike(full, readable)


@pytest.fixture(scope="module")
def incidents(tmp_path_factory, embedder):
    """Two indexes of the same incident notes: with the security group's notes and without."""
    engines = _with_and_without(tmp_path_factory, embedder, "incidents", lambda root, hidden: [_incident_files(root, hidden)])
    yield engines
    for e in engines.values():
        e.close()


def _ids(days: list[tuple[int, str, str]], prefix: str) -> set[str]:
    return {f"inc-{n:02d}" + (".html" if how == "html" else "") for n, day, how in days if day.startswith(prefix)}


def _listed(result) -> list[str]:
    return [h.doc_id for h in result.context]


def test_a_month_listed_is_every_readable_incident_dated_in_it_graded_by_construction(incidents):
    result = incidents["full"].query("List the incidents reported in March 2025", READER, k=8)
    assert result.status == "answer_context", result.gap
    assert set(_listed(result)) == _ids(INCIDENTS, "2025-03")  # front matter, heading-only and HTML-title dates
    assert len(_listed(result)) == len(set(_listed(result)))  # one passage per document
    (attempt,) = result.attempts
    assert attempt.plan.strategy == "listing" and attempt.grade.source == "construction"
    assert attempt.grade.sufficient and attempt.grade.missing == ()
    assert result.listing.complete and result.listing.documents == 4
    shown = result_json(result)
    assert shown["listing"] == {"complete": True, "documents": 4, "shown": 4, "bound_reached": False}
    assert Answer.model_validate(shown).listing.complete  # the wire model the client parses answers with
    assert shown["attempts"][0]["grade"]["source"] == "construction"


def test_the_security_group_lists_its_own_incidents_of_the_month_too(incidents):
    result = incidents["full"].query("Which incidents happened in March 2025?", SECURITY, k=8)
    assert set(_listed(result)) == _ids(INCIDENTS, "2025-03") | {"inc-90", "inc-91"}


def test_a_list_longer_than_k_says_it_is_incomplete(incidents):
    q1 = _ids(INCIDENTS, "2025-01") | _ids(INCIDENTS, "2025-02") | _ids(INCIDENTS, "2025-03")
    short = incidents["full"].query("Which incidents happened in Q1 2025?", READER, k=8)
    assert short.status == "answer_context" and len(short.context) == 8 and set(_listed(short)) < q1
    assert not short.listing.complete and (short.listing.documents, short.listing.shown) == (len(q1), 8)
    assert short.attempts[-1].grade.missing == (f"listing:{len(q1) - 8}_more_documents",)
    whole = incidents["full"].query("Which incidents happened in Q1 2025?", READER, k=20)
    assert set(_listed(whole)) == q1 and whole.listing.complete


def test_a_list_past_the_passage_bound_says_the_bound_was_reached(incidents, embedder):
    from retrieval.limits import Limits
    from routes.service.view import open_view

    bounded = open_view(incidents["full"].snapshot.path.parent.parent, embedder, Limits(list_max_passages=5),
                        today=TODAY, plugins=False)
    try:
        result = bounded.query("Which incidents happened in Q1 2025?", READER, k=8)
    finally:
        bounded.close()
    assert result.status == "answer_context" and result.listing.bound_reached and not result.listing.complete
    assert result.attempts[-1].grade.missing == ("listing:bound_reached",)


def test_a_month_with_only_a_forbidden_incident_is_a_typed_gap_for_a_reader(incidents):
    result = incidents["full"].query("Which incidents happened in July 2025?", READER)
    assert result.status == "evidence_gap" and result.gap.reason == "no_authorized_evidence"
    assert result.gap.missing == ("date:July 2025",) and "dated July 2025" in result.gap.detail
    assert result.context == () and len(result.attempts) == 1  # nothing readable is dated in it: no other route tried
    assert incidents["full"].query("Which incidents happened in July 2025?", SECURITY).status == "answer_context"


@pytest.mark.parametrize("question", [
    "List the incidents reported in March 2025", "Which incidents happened in Q1 2025?",
    "Which incidents happened in July 2025?", "Show every incident logged in March",
    "What incidents were there in the first quarter of 2025?",
])
def test_forbidden_incidents_in_the_period_change_nothing_a_reader_sees(incidents, question):
    _same_for_a_reader(incidents, question)


def test_a_date_written_only_in_the_body_puts_a_note_in_no_period(incidents):
    result = incidents["full"].query("List the incidents reported in March 2025", READER, k=20)
    assert "review" not in _listed(result) and "inc-20" not in _listed(result)  # undated; dated April by front matter
    april = incidents["full"].query("List the incidents reported in April 2025", READER, k=20)
    assert set(_listed(april)) == {"inc-11", "inc-20"}


def test_a_question_about_a_period_that_asks_for_no_list_is_graded_by_relevance(incidents):
    for question in ("What happened to the badge readers in February 2025?",
                     "Which incidents affected the mail relay in March 2025?"):
        result = incidents["full"].query(question, READER)
        assert result.listing is None, question
        assert all(a.plan.strategy != "listing" and (a.grade is None or a.grade.source != "construction")
                   for a in result.attempts), question


# -- a second domain, worded apart: a facilities office's minutes and change log -------------

MEETINGS = [("2025-02-11", "Facilities Committee"), ("2025-04-08", "Facilities Committee"),
            ("2025-05-13", "Health and Safety Forum"), ("2025-06-24", "Facilities Committee"),
            ("2025-07-15", "Health and Safety Forum"), ("2025-09-09", "Facilities Committee")]
CHANGES = [("2025-02-26", "replaced the lift door sensor in block B"), ("2025-03-05", "moved the boiler timer to 05:30"),
           ("2025-03-18", "fitted new locks on the bike store"), ("2025-03-31", "retuned the car park barrier"),
           ("2025-04-14", "swapped the fire panel battery")]


@pytest.fixture(scope="module")
def facilities(tmp_path_factory, embedder):
    from indexes.snapshot_build import BuildOptions, build_snapshot
    from routes.service.view import open_view

    root = tmp_path_factory.mktemp("facilities")
    src = root / "office"
    src.mkdir()
    for day, body in MEETINGS:
        d = date.fromisoformat(day)
        (src / f"minutes-{day}.html").write_text(
            f"<html><head><title>Minutes — {body}</title></head><body><h1>{body}: minutes of "
            f"{d.strftime('%B')} {d.day}, {d.year}</h1><p>Present: the estates manager, two tenant representatives. "
            "The meeting agreed the cleaning rota and asked for quotes for the roof gutters.</p></body></html>")
    for day, what in CHANGES:
        (src / f"change-{day}.md").write_text(f"# Change {day}\n\nLogged by the site team: {what}. Tested and signed "
                                              "off the same day.\n")
    (src / "handbook.md").write_text("---\ndate: 2024-09-01\n---\n# Tenant handbook\n\nHow to report a fault, "
                                     "who holds the keys, and when the building is closed.\n")
    (src / "board-minutes.html").write_text(
        "<html><head><title>Minutes — Board</title></head><body><h1>Board: minutes of May 20, 2025</h1>"
        "<p>The board discussed the lease.</p></body></html>")
    (src / "board-minutes.html.meta.json").write_text(json.dumps({"acl": ["group:board"]}))
    build_snapshot([src], root / "index", embedder, BuildOptions(default_acl=("public",)))
    engine = open_view(root / "index", embedder, today=TODAY, plugins=False)
    yield engine
    engine.close()


def test_meetings_of_a_quarter_are_listed_from_dates_their_headings_state(facilities):
    result = facilities.query("Which meetings took place in Q2 2025?", READER)
    assert result.status == "answer_context" and result.listing.complete
    meetings = {f"minutes-{d}.html" for d, _ in MEETINGS if "2025-04" <= d[:7] <= "2025-06"}
    # the construction is every readable document dated in the quarter: the change logged in April too,
    # ranked after the minutes the question is about (the board's minutes of May stay unseen)
    assert set(_listed(result)) == meetings | {"change-2025-04-14"}
    assert set(_listed(result)[: len(meetings)]) == meetings
    assert result.attempts[0].grade.source == "construction"


def test_every_change_of_a_month_named_without_its_year_is_listed(facilities):
    result = facilities.query("Show every change logged in March", READER)
    assert result.status == "answer_context" and result.listing.complete
    assert set(_listed(result)) == {f"change-{d}" for d, _ in CHANGES if d.startswith("2025-03")}


def test_a_period_with_nothing_readable_in_it_is_an_honest_gap(facilities):
    result = facilities.query("Which meetings were held in August 2025?", READER)
    assert result.status == "evidence_gap" and result.gap.reason == "no_authorized_evidence"
    assert result.gap.missing == ("date:August 2025",)


# -- a third domain: a housing estate's collections, one folder each --------------------------

INSPECTIONS = [("2025-05-06", "stairwell lighting, block C"), ("2025-05-20", "play area surfacing"),
               ("2025-06-03", "roof access hatches"), ("2025-08-12", "bin store doors")]
COMPLAINTS = [("2025-05-14", "noise from the car wash at night"), ("2025-07-01", "a broken entry phone, block A")]
NEWSLETTERS = [("2025-05-28", "Inspection season: what the surveyors look at on the estate"),
               ("2025-06-18", "Summer fair, bulky waste days and the new caretaker")]
HIDDEN_COMPLAINT = ("2025-06-09", "damp in a ground-floor flat")  # only the housing team reads it


def _estate_files(root: Path, hidden: bool) -> Path:
    src = root / "estate"
    for folder, items in (("inspections", INSPECTIONS), ("complaints", COMPLAINTS), ("newsletters", NEWSLETTERS)):
        (src / folder).mkdir(parents=True)
        for day, what in items:
            (src / folder / f"{folder[:4]}-{day}.md").write_text(
                f"---\ndate: {day}\n---\n# {what[0].upper()}{what[1:]}\n\nWritten up by the estate office: {what}. "
                "Residents were told what happens next and when.\n")
    if hidden:
        day, what = HIDDEN_COMPLAINT
        (src / "complaints" / f"comp-{day}.md").write_text(
            f"---\ndate: {day}\nacl: [group:housing]\n---\n# {what.capitalize()}\n\nWritten up by the estate office: "
            f"{what}. Residents were told what happens next and when.\n")
    return src


@pytest.fixture(scope="module")
def estate(tmp_path_factory, embedder):
    """The estate's collections, with the housing team's complaint and without it."""
    def folders(root: Path, hidden: bool) -> list[Path]:
        src = _estate_files(root, hidden)
        return [src / d for d in ("inspections", "complaints", "newsletters")]

    engines = _with_and_without(tmp_path_factory, embedder, "estate", folders)
    yield engines
    for e in engines.values():
        e.close()


def test_a_list_of_a_collection_is_its_documents_of_the_period_not_the_others_dated_there(estate):
    result = estate["full"].query("Which inspections were carried out in May 2025?", READER)
    assert result.status == "answer_context" and result.listing.complete
    # the newsletter of May is about inspections, by its title too, but is no inspection
    assert set(_listed(result)) == {f"insp-{d}" for d, _ in INSPECTIONS if d.startswith("2025-05")}
    assert result.attempts[0].grade.source == "construction"


def test_a_period_without_the_collection_it_names_is_a_gap_not_the_other_documents_of_the_period(estate):
    result = estate["full"].query("List the complaints from June 2025.", READER)
    assert result.status == "evidence_gap" and result.gap.reason == "no_authorized_evidence"
    assert result.gap.missing == ("date:June 2025",) and result.context == ()
    housing = Principal("hana", ("housing",), frozenset({"query"}))
    assert _listed(estate["full"].query("List the complaints from June 2025.", housing)) == [f"comp-{HIDDEN_COMPLAINT[0]}"]


def test_a_list_that_names_no_collection_is_every_document_of_the_period(estate):
    result = estate["full"].query("Which documents were written in June 2025?", READER)
    assert set(_listed(result)) == {"insp-2025-06-03", "news-2025-06-18"}


@pytest.mark.parametrize("question", ["List the complaints from June 2025.", "Which complaints came in during May 2025?",
                                      "Which documents were written in June 2025?"])
def test_a_collection_only_forbidden_documents_fill_in_the_period_changes_nothing_a_reader_sees(estate, question):
    _same_for_a_reader(estate, question)
