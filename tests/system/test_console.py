"""The web console in real headless Chromium (Debian's `chromium`, driven by Playwright):
bob's budget question shows his budget note, alice's shows the gap, a document opens, the
eval report page shows its metrics and plots, and no request leaves 127.0.0.1. Screenshots
are kept in var/test-artifacts/console/."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import DEMO, PATIENCE_S, ROOT, wait_until
from routes.service.service import Service

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here: install Debian's `chromium` package "
                                "(.ci/run does) to run the console's browser tests")
BUDGET = "What is the Q3 2025 budget for the payments platform?"
FINANCE_DOC = "note-finance-q3-2025-budget"
SHOTS = ROOT / "var" / "test-artifacts" / "console"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions"]


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield b
        b.close()


def _page(browser, live):
    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    page.set_default_timeout(PATIENCE_S * 1000)  # waits end on what they wait for; this only ends a hang
    requests, problems = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    return page, requests, problems


def _ask(page, key: str, question: str) -> None:
    page.fill("#key", key)
    page.fill("#question", question)
    page.click("#submit")
    page.wait_for_selector("#result:not([hidden])")


def _local_only(live, requests: list[str]) -> None:
    outside = [u for u in requests if not (u.startswith(live.url + "/") or u.startswith("blob:http://127.0.0.1"))]
    assert not outside, outside


def test_bob_sees_his_budget_note_alice_sees_the_gap(browser, live):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page, requests, problems = _page(browser, live)
    response = page.goto(live.url + "/console")
    assert response is not None and response.ok
    assert "default-src 'self'" in response.headers["content-security-policy"]
    _ask(page, live.keys["bob"], BUDGET)
    assert page.text_content("#status") == "answer_context"
    passages = page.eval_on_selector_all("#context .passage", "els => els.map(e => e.dataset.docId)")
    assert passages and passages[0] == FINANCE_DOC
    assert page.is_hidden("#gap")
    assert page.locator("#attempts tbody tr").count() >= 1 and page.locator("#route-scores tbody tr").count() >= 1
    page.screenshot(path=str(SHOTS / "bob-budget.png"), full_page=True)
    page.click("#context .passage >> nth=0 >> .open-doc")
    page.wait_for_selector("#document:not([hidden])")
    assert page.text_content("#doc-id") == FINANCE_DOC and "9,400,000" in (page.text_content("#doc-text") or "")
    page.screenshot(path=str(SHOTS / "bob-document.png"), full_page=True)

    _ask(page, live.keys["alice"], BUDGET)
    page.wait_for_function("() => document.getElementById('status').textContent === 'evidence_gap'")
    assert page.is_visible("#gap") and page.text_content("#gap-reason")
    assert FINANCE_DOC not in page.eval_on_selector_all("#context .passage", "els => els.map(e => e.dataset.docId)")
    page.screenshot(path=str(SHOTS / "alice-gap.png"), full_page=True)
    # alice asking for bob's note by id gets the same error as for a missing document
    page.evaluate("id => openDocument(id)", FINANCE_DOC)
    page.wait_for_selector("#error:not([hidden])")
    assert "not_found" in (page.text_content("#error") or "")
    assert (SHOTS / "bob-budget.png").stat().st_size > 10_000
    _local_only(live, requests)
    assert problems == ["Failed to load resource: the server responded with a status of 404 (Not Found)"], problems
    page.close()  # the one error: alice's 404 for bob's note; no script error, no blocked resource


def test_the_report_page_shows_the_last_eval_report(browser, live, demo_engine):
    from routes.eval.evaluation import evaluate, load_label_file, write_report

    labels = [q for q in load_label_file(DEMO / "questions.jsonl")][:8]
    report_dir = live.app.state.quarry.settings.index_dir / "report"
    write_report(evaluate(Service.serving(demo_engine), labels, k=8), report_dir, "Quarry evaluation of 8 demo questions")
    page, requests, problems = _page(browser, live)
    page.goto(live.url + "/console/report.html")
    page.fill("#key", live.keys["bob"])
    page.click("#load")
    page.wait_for_selector("#error:not([hidden])")
    assert "forbidden" in (page.text_content("#error") or "")  # the report needs the admin scope
    page.fill("#key", live.keys["ops"])
    page.click("#load")
    page.wait_for_selector("#report:not([hidden])")
    assert page.text_content("#title") == "Quarry evaluation of 8 demo questions"
    metrics = dict(page.eval_on_selector_all("#metrics tbody tr",
                                             "rows => rows.map(r => [r.cells[0].textContent, r.cells[1].textContent])"))
    assert metrics["questions"] == "8" and "gap_f1" in metrics and "route_accuracy" in metrics
    assert page.locator("#per-route tbody tr").count() >= 1
    plots = sorted(p.name for p in report_dir.glob("*.png"))
    page.wait_for_function(f"() => document.querySelectorAll('#plots img').length === {len(plots)} && "
                           "[...document.querySelectorAll('#plots img')].every(i => i.complete && i.naturalWidth > 0)")
    page.screenshot(path=str(SHOTS / "report.png"), full_page=True)
    _local_only(live, requests)
    assert not [p for p in problems if "403" not in p], problems  # the forbidden load's 403 is the only error
    page.close()


def test_opening_a_document_sends_its_id_as_one_encoded_segment(browser, live):
    """An id with separators or dot segments (stored by an older build, or a hostile writer's)
    must not make the viewer's bearer key go to another endpoint: every request the "open"
    action sends stays under /v1/documents/, its id a single encoded segment."""
    from urllib.parse import unquote, urlsplit

    page, requests, problems = _page(browser, live)
    page.goto(live.url + "/console")
    page.fill("#key", live.keys["bob"])
    for doc_id in ("../admin/report", "a/../../admin/report", "%2e%2e/admin/report", "..\\admin\\report", "a?b#c"):
        before = len(requests)
        page.evaluate("id => openDocument(id)", doc_id)
        page.wait_for_selector("#error:not([hidden])")
        sent = [urlsplit(u) for u in requests[before:]]
        assert len(sent) == 1, (doc_id, requests[before:])
        path = sent[0].path
        assert path.startswith("/v1/documents/") and "/" not in path[len("/v1/documents/"):], (doc_id, path)
        assert unquote(path[len("/v1/documents/"):]) == doc_id and not sent[0].query
        page.evaluate("() => { document.getElementById('error').hidden = true; }")
    _local_only(live, requests)
    page.close()


HOSTILE_MARKDOWN = """# Pump rota
| shift | owner | **note** |
|---|---|---|
| night | *Ines* | `P-7` <img src=x onerror="window.pwned=1"> |

- **check** the seals
- log it <script>window.pwned=2</script>

Plain <b>not bold</b> text with **bold** and _slanted_ words."""


def test_markdown_in_passages_is_drawn_as_text_nodes_never_as_markup(browser, live):
    page, requests, problems = _page(browser, live)
    page.goto(live.url + "/console")
    drawn = page.evaluate("""text => {
        const box = renderMarkdown(document.createElement("div"), text);
        document.body.appendChild(box);
        return {tags: [...box.querySelectorAll("*")].map(n => n.tagName.toLowerCase()),
                cells: [...box.querySelectorAll("td, th")].map(n => n.textContent),
                strong: [...box.querySelectorAll("strong")].map(n => n.textContent),
                text: box.textContent, pwned: window.pwned === undefined ? null : window.pwned,
                attributes: [...box.querySelectorAll("*")].flatMap(n => [...n.attributes].map(a => a.name))};
    }""", HOSTILE_MARKDOWN)
    assert {"h4", "table", "th", "td", "ul", "li", "strong", "em", "code", "p"} <= set(drawn["tags"])
    assert not {"img", "script", "b", "a"} & set(drawn["tags"]) and drawn["pwned"] is None
    assert drawn["attributes"] == ["class"]  # the table's own class; nothing from the text
    assert drawn["cells"][:3] == ["shift", "owner", "note"] and "night" in drawn["cells"]
    assert drawn["strong"] == ["note", "check", "bold"]
    assert "**" not in drawn["text"] and "|" not in drawn["text"]  # no raw Markdown left
    assert '<img src=x onerror="window.pwned=1">' in drawn["text"] and "<b>not bold</b>" in drawn["text"]  # shown as text
    _local_only(live, requests)
    assert problems == [], problems
    page.close()


def test_a_gap_says_its_passages_are_partial_and_a_request_in_flight_shows(browser, live):
    page, requests, problems = _page(browser, live)
    page.goto(live.url + "/console")
    held = []
    page.route("**/v1/query", lambda route: held.append(route))  # the answer waits until the test lets it go
    page.fill("#key", live.keys["alice"])
    page.fill("#question", BUDGET)
    page.click("#submit")
    page.wait_for_selector("#busy:not([hidden])")
    assert page.is_disabled("#submit") and "Asking" in (page.text_content("#busy") or "")
    wait_until(lambda: bool(held) or bool(page.wait_for_timeout(50)), "the question's request being held")
    held[0].continue_()
    page.wait_for_selector("#result:not([hidden])")
    page.wait_for_selector("#busy", state="hidden")
    assert page.text_content("#status") == "evidence_gap" and not page.is_disabled("#submit")
    passages = page.locator("#context .passage").count()
    assert passages >= 1 and page.is_visible("#partial-note")  # alice's gap carries partial passages, said so
    assert "partial" in (page.text_content("#partial-note") or "")
    page.unroute("**/v1/query")
    _ask(page, live.keys["bob"], BUDGET)
    page.wait_for_function("() => document.getElementById('status').textContent === 'answer_context'")
    assert page.is_hidden("#partial-note")
    _local_only(live, requests)
    page.close()


def test_a_pasted_access_token_asks_as_its_user(browser, demo_engine, tmp_path):
    """An end user's token from an identity provider works in the key field as a key does."""
    from auth.config import IdentityConfig
    from routes.server.app import create_app
    from routes.service.settings import Settings
    from tests.auth.jwt_keys import AUD, ISS, Keys
    from tests.conftest import LiveServer

    signer = Keys()
    signer.add("k1")
    identity = IdentityConfig.model_validate({"issuers": [{"name": "corp", "issuer": ISS, "audience": [AUD],
                                                           "jwks_file": str(signer.write_jwks(tmp_path / "jwks.json"))}]})
    with LiveServer(create_app(Settings(index_dir=tmp_path), engine=demo_engine, identity=identity)) as server:
        page, requests, problems = _page(browser, server)
        page.goto(server.url + "/console")
        _ask(page, signer.sign("k1", sub="bob", groups=["finance"], scope="query"), BUDGET)
        assert page.text_content("#status") == "answer_context"
        assert page.eval_on_selector_all("#context .passage", "els => els.map(e => e.dataset.docId)")[0] == FINANCE_DOC
        page.fill("#key", signer.sign("k1", sub="bob", groups=["finance"], exp=1))
        page.click("#submit")
        page.wait_for_selector("#error:not([hidden])")
        assert "token refused: expired" in (page.text_content("#error") or "")
        _local_only(server, requests)
        page.close()
