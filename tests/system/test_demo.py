"""`make run` (`quarry demo`) as a real subprocess: the demo keys are created once and kept."""

from __future__ import annotations

import json
import queue
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading

import pytest

from auth.keys import KeyStore
from tests.conftest import PATIENCE_S, ROOT
from tests.system.test_cli import quarry


def run_demo(index, keys) -> str:
    """Start `quarry demo`, read what it prints until the server starts, then stop it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "routes.cli.main", "demo", "--index", str(index), "--keys", str(keys),
                             "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    printed = []
    try:
        while not printed or not printed[-1].startswith("API docs:"):
            printed.append(lines.get(timeout=PATIENCE_S))
    finally:
        proc.terminate()
        proc.wait(timeout=PATIENCE_S)
    return "".join(printed)


@pytest.mark.slow
def test_a_second_demo_run_keeps_the_keys_and_prints_the_same_demo_keys(demo_index, tmp_path):
    index, keys = tmp_path / "index", tmp_path / "demo-keys.json"
    shutil.copytree(demo_index, index)  # up to date: the demo reuses it instead of building
    first = run_demo(index, keys)
    tokens = re.findall(r"Bearer (qk_[\w-]+)", first)
    store = KeyStore(keys)
    by_principal = {store.record_of(t).principal: t for t in tokens}
    assert set(by_principal) == {"alice", "bob"} and len(store.records()) == 2
    carol = quarry("keys", "add", "--principal", "carol", "--groups", "security", "--keys", str(keys))
    bob_id = store.record_of(by_principal["bob"]).key_id
    assert quarry("keys", "revoke", bob_id, "--keys", str(keys)).returncode == 0

    second = run_demo(index, keys)
    assert set(re.findall(r"Bearer (qk_[\w-]+)", second)) == {by_principal["alice"]}  # the same key, still valid
    assert "bob's demo key is revoked" in second
    records = {r.principal: r for r in KeyStore(keys).records()}
    assert set(records) == {"alice", "bob", "carol"} and len(KeyStore(keys).records()) == 3
    assert records["bob"].revoked_at and not records["alice"].revoked_at and not records["carol"].revoked_at
    assert KeyStore(keys).authenticate(json.loads(carol.stdout)["key"]).id == "carol"
    assert stat.S_IMODE((tmp_path / "demo-keys.tokens.json").stat().st_mode) == 0o600  # plain keys: owner only


def test_building_the_demo_index_reports_its_progress_into_a_log(tmp_path, embedder, monkeypatch, capsys):
    """`make run` under a runner whose stderr is a file or pipe: the build's stages and the
    embedding's count reach it (it printed "building ..." and then nothing for minutes)."""
    import routes.cli.demo
    from tests.conftest import MINI

    monkeypatch.setattr(routes.cli.demo, "DEMO_SOURCES", [MINI])  # a small corpus: what is printed is the point
    routes.cli.demo.ensure_demo_index(tmp_path / "index", embedder)
    err = capsys.readouterr().err
    assert "building the demo index" in err and re.search(r"embed: 100%.*\b\d+/\d+ \[", err), err
    routes.cli.demo.ensure_demo_index(tmp_path / "quiet", embedder, progress=False)
    assert "embed" not in capsys.readouterr().err
