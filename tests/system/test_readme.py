"""The README's examples, run as written and in order against what `make run` serves: the
demo index in var/demo-index, the demo keys in var/demo-keys.json (bob's in KEY for the quick
start, alice's for MCP), on 127.0.0.1:8000. Here that layout is rebuilt in a temporary folder
(var/ there is a copy of the demo index; .venv and eval_data link to the project's) and the
server listens on a free port, which is the only text changed in the examples. The function
tools example needs an LLM (openai_client), which cannot run here, and the BEIR eval lines
need the shared datasets and minutes; they are left out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from tests.conftest import FINANCE_FACTS, PATIENCE_S, ROOT, LiveServer

pytestmark = pytest.mark.slow
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
FINANCE_DOC = "note-finance-q3-2025-budget"


def block(marker: str, language: str | None = None) -> str:
    """The README code block holding `marker` (exactly one)."""
    found = [body for lang, body in BLOCK.findall(README) if marker in body and (language is None or lang == language)]
    assert len(found) == 1, f"{len(found)} README blocks hold {marker!r}"
    return found[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory, demo_index):
    """A fresh `make run`, rebuilt in a temporary folder: the demo index, the demo keys, a server."""
    from routes.server.app import create_app
    from routes.cli.demo import DEMO_TODAY, demo_keys
    from routes.service.settings import Settings

    home = tmp_path_factory.mktemp("make-run")
    (home / ".venv").symlink_to(Path(sys.executable).parent.parent)  # the environment running the tests
    (home / "eval_data").symlink_to(ROOT / "eval_data")
    shutil.copytree(demo_index, home / "var" / "demo-index")
    keys_file = home / "var" / "demo-keys.json"
    keys = demo_keys(keys_file)
    settings = Settings(index_dir=home / "var" / "demo-index", keys_file=keys_file, rate_per_second=1000.0, burst=1000,
                        reload_interval_s=0.5, today=date.fromisoformat(DEMO_TODAY))
    with LiveServer(create_app(settings)) as server:
        server.home, server.keys = home, keys
        yield server


def _local(text: str, served) -> str:
    """The example with the test server's port for make run's 8000."""
    return text.replace("127.0.0.1:8000", f"127.0.0.1:{served.port}").replace("localhost:8000", f"127.0.0.1:{served.port}")


def _python(code: str, served, key: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-c", f"KEY = {key!r}\n" + _local(code, served)], cwd=served.home,
                         capture_output=True, text=True, timeout=PATIENCE_S)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_the_quick_start_runs_as_written(served):
    out = _python(block("from quarry_client import Quarry", "python"), served, served.keys["bob"])
    first, second = out.stdout.splitlines()[:2]
    assert FINANCE_DOC in first  # bob's budget question: his budget note
    assert second.split()[0] == FINANCE_DOC  # the LangChain retriever: its first document's id, then offsets


def test_the_command_line_examples_run_as_written(served):
    lines = [ln for ln in block(".venv/bin/quarry ingest").splitlines() if ln.strip()]
    for line in lines:
        out = subprocess.run(["bash", "-c", line], cwd=served.home, capture_output=True, text=True, timeout=PATIENCE_S)
        assert out.returncode == 0, (line, out.stdout[-2000:], out.stderr[-2000:])
        assert '"error"' not in out.stdout, (line, out.stdout)
    assert "answer_context" in subprocess.run(["bash", "-c", lines[1]], cwd=served.home, capture_output=True, text=True,
                                              timeout=PATIENCE_S).stdout


def test_the_live_write_examples_run_in_order_with_their_own_key(served):
    script = _local(block("curl -X PUT", "bash"), served)
    # as written; the wrapper only makes an HTTP error fail the script and puts each answer on its own line
    wrapper = 'curl() { command curl -sS --fail-with-body "$@" && echo; }\nset -euo pipefail\n'
    out = subprocess.run(["bash", "-c", wrapper + script], cwd=served.home, capture_output=True, text=True,
                         timeout=PATIENCE_S)
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    answers = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert [a["status"] for a in answers] == ["applied"] * 4
    assert [[(d["op"], d["doc_id"]) for d in a["documents"]] for a in answers] == [
        [("put", "runbook-42")], [("acl", "runbook-42")], [("put", "runbook-43"), ("delete", "runbook-42")],
        [("delete", "runbook-43")]]


def test_the_mcp_client_example_runs_with_the_sdk_installed_here(served):
    out = _python(block("streamable_http_client", "python"), served, served.keys["alice"])
    tools, answer = out.stdout.splitlines()[:2]
    assert "retrieve_context" in tools and answer.split()[0] in ("answer_context", "evidence_gap")
    assert not any(fact in out.stdout for fact in FINANCE_FACTS)


def test_the_eval_example_writes_the_report_the_console_shows():
    from routes.service.settings import Settings

    line = next(ln for ln in block("quarry eval eval_data/demo").splitlines() if "--report" in ln)
    args = line.split()
    index, report = Path(args[args.index("--index") + 1]), Path(args[args.index("--report") + 1])
    settings = Settings(index_dir=index)
    assert report == (settings.report_dir or settings.index_dir / "report")

