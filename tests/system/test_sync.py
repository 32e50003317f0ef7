"""`quarry sync` keeps an index in step with its folder, as a real subprocess on a real index: new,
changed and deleted files and ACL edits are applied, a dry run prints the plan and changes
nothing, a second sync finds nothing to do and opens no file whose stamps are unchanged (but
does one the index no longer holds as it gave it), a document from elsewhere is never touched, and
the watch mode follows edits as they happen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PATIENCE_S, ROOT, wait_until


def quarry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "routes.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=PATIENCE_S, env=os.environ)


def lines(out: subprocess.CompletedProcess) -> list[dict]:
    """A sync's JSON lines (another command's one JSON document, as a list of one)."""
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    try:
        return [json.loads(out.stdout)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def found(index: Path, text: str, principal: str = "erin", groups: tuple[str, ...] = ()) -> list[str]:
    args = ["search", f'"{text}"', "--retriever", "exact", "--index", str(index), "--principal", principal]
    if groups:
        args += ["--groups", *groups]
    return sorted({h["doc_id"] for h in lines(quarry(*args))[0]["hits"]})


def folder(root: Path) -> Path:
    docs = root / "notes"
    docs.mkdir()
    (docs / "quarry.manifest.json").write_text(json.dumps({"files": [{"match": "*", "acl": ["public"]}]}))
    (docs / "pump.md").write_text("# Pump 4\nThe Larkspur pump seal weeps at the gland.\n")
    (docs / "valve.md").write_text("# Valve 2\nThe Corvane valve sticks when cold.\n")
    (docs / "gone.md").write_text("# Old note\nThe Tessaly filter was replaced.\n")
    return docs


@pytest.fixture
def index(tmp_path, embedder):
    from indexes.snapshot_build import build_snapshot

    docs = folder(tmp_path)
    out = tmp_path / "index"
    build_snapshot([docs], out, embedder)
    return docs, out


def test_sync_applies_new_changed_deleted_and_acl_edits_and_a_second_run_finds_nothing(index, tmp_path):
    docs, out = index
    elsewhere = tmp_path / "api.jsonl"
    elsewhere.write_text(json.dumps({"id": "api-note", "text": "The Brambling log was written elsewhere.",
                                     "acl": ["public"]}) + "\n")
    lines(quarry("upsert", str(elsewhere), "--index", str(out)))
    (docs / "pump.md").write_text("# Pump 4\nThe Larkspur pump seal was replaced on Tuesday.\n")
    (docs / "valve.md.meta.json").write_text(json.dumps({"acl": ["group:plant"]}))
    (docs / "gone.md").unlink()
    (docs / "new.md").write_text("# Pump 7\nThe Ormsby pump runs hot.\n")
    _backdate(*docs.iterdir())  # older than a clock tick's doubt: the next sync may trust their stamps
    plan = lines(quarry("sync", str(docs), "--index", str(out), "--dry-run"))[-1]
    assert plan == {"sync": {"put": ["new", "pump"], "acl": ["valve"], "delete": ["gone"], "unchanged": 0},
                    "files": {"read": 3, "unchanged_by_stamp": 0}, "applied": False}
    assert found(out, "Tessaly filter") == ["gone"] and found(out, "Ormsby") == []  # a dry run changes nothing

    applied = lines(quarry("sync", str(docs), "--index", str(out)))
    assert applied[-1] == {**plan, "applied": True} and all("generation" in line for line in applied[:-1])
    assert found(out, "seal was replaced") == ["pump"] and found(out, "Ormsby pump") == ["new"]
    assert found(out, "Tessaly filter") == [] and found(out, "Corvane valve") == []  # deleted; now only plant reads it
    assert found(out, "Corvane valve", "pat", ("plant",)) == ["valve"]
    assert found(out, "Brambling log") == ["api-note"]  # not from the folder: never touched

    again = lines(quarry("sync", str(docs), "--index", str(out)))
    assert again == [{"sync": {"put": [], "acl": [], "delete": [], "unchanged": 3},
                      "files": {"read": 0, "unchanged_by_stamp": 3}, "applied": True}]  # no file opened

    # A write through another path since the last sync: the file is read again and wins back.
    (tmp_path / "over.jsonl").write_text(json.dumps({"id": "valve", "text": "Written over.", "acl": ["public"]}) + "\n")
    lines(quarry("upsert", str(tmp_path / "over.jsonl"), "--index", str(out)))
    (docs / "new.md").write_text("# Pump 7\nThe Ormsby pump runs cool now.\n")
    _backdate(docs / "new.md")
    healed = lines(quarry("sync", str(docs), "--index", str(out)))[-1]
    assert healed["sync"] == {"put": ["new", "valve"], "acl": [], "delete": [], "unchanged": 1}
    assert healed["files"] == {"read": 2, "unchanged_by_stamp": 1}
    assert found(out, "Corvane valve", "pat", ("plant",)) == ["valve"] and found(out, "Written over") == []
    assert found(out, "runs cool") == ["new"]


def test_the_first_sync_after_an_ingest_reads_only_what_changed(tmp_path, embedder):
    from indexes.snapshot_build import build_snapshot

    docs = folder(tmp_path)
    _backdate(*docs.iterdir())
    out = tmp_path / "index"
    build_snapshot([docs], out, embedder)
    (docs / "pump.md").write_text("# Pump 4\nThe Larkspur pump was swapped.\n")
    first = lines(quarry("sync", str(docs), "--index", str(out)))[-1]
    assert first["sync"]["put"] == ["pump"] and first["files"] == {"read": 1, "unchanged_by_stamp": 2}
    other_options = lines(quarry("sync", str(docs), "--index", str(out), "--strict-fields", "--dry-run"))[-1]
    assert other_options["files"] == {"read": 3, "unchanged_by_stamp": 0}  # what decides a file's documents changed
    assert found(out, "swapped") == ["pump"]


def _backdate(*paths: Path) -> None:
    """The files modified an hour ago (their size and content kept)."""
    then = time.time_ns() - 3_600_000_000_000
    for path in paths:
        os.utime(path, ns=(then, then))


def test_the_watch_mode_follows_an_edit_and_a_dry_run_beside_it_sees_nothing_left(index):
    docs, out = index
    watcher = subprocess.Popen([sys.executable, "-m", "routes.cli.main", "sync", str(docs), "--index", str(out),
                                "--watch", "0.2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=os.environ)
    try:
        first = json.loads(watcher.stdout.readline())  # the first look: the folder is as ingested
        assert first["sync"]["unchanged"] == 3 and first["applied"]
        (docs / "valve.md").write_text("# Valve 2\nThe Corvane valve was regreased.\n")
        wait_until(lambda: found(out, "regreased") == ["valve"], "the watcher syncing the edit", poll=0.5)
        dry = lines(quarry("sync", str(docs), "--index", str(out), "--dry-run"))[-1]
        assert dry["sync"] == {"put": [], "acl": [], "delete": [], "unchanged": 3}
    finally:
        watcher.terminate()
        watcher.wait(timeout=PATIENCE_S)
