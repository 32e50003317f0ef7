"""Policies plugged in by settings: in effect over HTTP and MCP, and refused at startup when broken."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from types import SimpleNamespace

import anyio
import httpx
import pytest

from retrieval.policy import Policy
from routes.service.plugins import PluginError, load_policy
from tests.conftest import LiveServer
from tests.routes.policies.policy_plugins import STAMP, StampGrader
from tests.system.test_cli import one_line_error, quarry
from tests.system.test_mcp import _http_session

PLUGINS = "tests.routes.policies.policy_plugins"
QUESTION = "how do engineers rotate the keys that sign tokens"  # routed to hybrid, no dates
GAP_FOR_BOB = "What is the incident escalation policy for the satellite uplink?"


@pytest.fixture(scope="module")
def plugged(demo_index, http_keys, tmp_path_factory):
    """A real server whose engine the app builds itself from settings naming a grader and a reranker."""
    from routes.server.app import create_app
    from routes.service.settings import Settings

    index = tmp_path_factory.mktemp("plugged") / "index"
    shutil.copytree(demo_index, index)  # its own catalog file: the session engine holds the original open
    store, keys = http_keys
    settings = Settings(index_dir=index, rate_per_second=1000.0, burst=1000, max_concurrent_per_key=64,
                       grader=f"{PLUGINS}:make_grader", reranker=f"{PLUGINS}:make_reranker")
    with LiveServer(create_app(settings, keys=store)) as server:
        server.keys = keys
        yield server


def test_a_plugged_grader_and_reranker_decide_grades_and_ranks_over_http(plugged, live):
    k = 4
    bob = {"Authorization": f"Bearer {plugged.keys['bob']}"}
    default = httpx.post(f"{live.url}/v1/query", json={"question": GAP_FOR_BOB, "k": k}, headers=bob, timeout=60).json()
    assert default["status"] == "evidence_gap"  # the built-in grader finds nothing sufficient
    got = httpx.post(f"{plugged.url}/v1/query", json={"question": GAP_FOR_BOB, "k": k}, headers=bob, timeout=60).json()
    assert got["status"] == "answer_context" and got["attempts"][0]["grade"]["score"] == STAMP

    got = httpx.post(f"{plugged.url}/v1/query", json={"question": QUESTION, "k": k}, headers=bob, timeout=60).json()
    assert got["attempts"][0]["route"] == "hybrid"
    pool = httpx.post(f"{live.url}/v1/search", json={"query": QUESTION, "retriever": "hybrid", "k": 2 * k},
                      headers=bob, timeout=60).json()["hits"]
    assert [h["chunk_id"] for h in got["context"]] == [h["chunk_id"] for h in reversed(pool)][:k]
    assert [h["score"] for h in got["context"]] == [float(i) for i in range(k)]  # the reranker's scores


def test_a_plugged_grader_and_reranker_decide_grades_and_ranks_over_mcp(plugged, live):
    async def ask(client):
        return (await client.call_tool("retrieve_context", {"question": GAP_FOR_BOB, "k": 4})).structured_content

    plugged_answer = anyio.run(_http_session, plugged.url, plugged.keys["bob"], ask)
    default_answer = anyio.run(_http_session, live.url, live.keys["bob"], ask)
    assert default_answer["status"] == "evidence_gap"
    assert plugged_answer["status"] == "answer_context" and plugged_answer["attempts"][0]["grade"]["score"] == STAMP
    ranks = [h["score"] for h in plugged_answer["context"]]
    assert ranks == sorted(ranks) and ranks[0] == 0.0  # the reranker's order: worst candidate first


def test_a_plugged_policy_must_import_construct_and_fit_its_interface():
    base = Policy()
    assert load_policy(SimpleNamespace(grader=f"{PLUGINS}:make_grader"), None, base).grader.__class__ is StampGrader
    assert load_policy(SimpleNamespace(), None, base) is base
    cases = {
        "no.such.module:make": "cannot import 'no.such.module'",
        f"{PLUGINS}:missing": "has no attribute 'missing'",
        f"{PLUGINS}": "is not an import path of the form module:factory",
        f"{PLUGINS}:STAMP": "is not callable",
        f"{PLUGINS}:make_broken": "raised RuntimeError: model file missing",
        f"{PLUGINS}:make_nothing": "lacks the Grader methods (grade)",
    }
    for path, message in cases.items():
        with pytest.raises(PluginError) as err:
            load_policy(SimpleNamespace(grader=path), None, base)
        assert message in err.value.message and err.value.message.startswith("QUARRY_GRADER: ")
        assert "\n" not in err.value.message


@pytest.mark.slow
def test_serve_with_a_broken_policy_stops_before_listening_with_one_line(demo_index, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(demo_index, index)
    keys = tmp_path / "keys.json"
    assert quarry("keys", "add", "--principal", "erin", "--keys", str(keys)).returncode == 0
    env = dict(os.environ, QUARRY_GRADER=f"{PLUGINS}:make_broken")
    out = quarry("serve", "--index", str(index), "--keys", str(keys), "--port", "0", env=env)
    assert out.returncode != 0
    error = one_line_error(out)
    assert error["message"] == f"QUARRY_GRADER: {PLUGINS}:make_broken raised RuntimeError: model file missing"


def test_the_readme_grader_loads_by_settings_and_grades(demo_engine, tmp_path, monkeypatch):
    from retrieval.loop import Budget, run_loop
    from retrieval.types import Principal
    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    code = readme.split("# mypkg/judge.py")[1].split("```")[0]
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "judge.py").write_text("#" + code)
    monkeypatch.syspath_prepend(str(tmp_path))
    policy = load_policy(SimpleNamespace(grader="mypkg.judge:make_grader"), demo_engine, demo_engine.deps.policy)
    deps = replace(demo_engine.deps, policy=policy)
    question = "How do I refresh the token-signing secret?"
    result = run_loop(question, Principal("erin"), Budget(max_attempts=1), deps)
    grade = result.attempts[0].grade
    words = set(question.lower().split())
    assert grade.score == len(words & set(result.attempts[0].hits[0].text.lower().split())) / len(words)
