"""Serving leases: an ingest never prunes a snapshot that a live process holds, in this
process or another, and a killed process's lease blocks nothing."""

from __future__ import annotations

import fcntl
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from indexes.snapshot_build import build_snapshot
from indexes.snapshot_lease import LEASE_FILE, is_served
from indexes.snapshot_load import current_snapshot_path, load_snapshot
from indexes.snapshot_lease import acquire, remove_unless_served
from tests.conftest import MINI, PATIENCE_S, ROOT

HOLD = "import sys, time; from pathlib import Path; from indexes.snapshot_lease import acquire; " \
       "lease = acquire(Path(sys.argv[1])); print('held' if lease and lease.held else 'none', flush=True); time.sleep(600)"


@pytest.fixture
def index_copy(mini_index, tmp_path) -> Path:
    dst = tmp_path / "index"
    shutil.copytree(mini_index, dst)
    return dst


def extra_corpus(tmp_path: Path, n: int) -> list[Path]:
    extra = tmp_path / f"extra{n}.jsonl"
    extra.write_text(f'{{"id": "x{n}", "text": "Extra note number {n}.", "acl": ["public"]}}\n')
    return [MINI, extra]


def test_a_snapshot_another_process_serves_survives_pruning_until_that_process_is_killed(index_copy, embedder, tmp_path):
    first = current_snapshot_path(index_copy)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(first)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        build_snapshot(extra_corpus(tmp_path, 1), index_copy, embedder)
        build_snapshot(extra_corpus(tmp_path, 2), index_copy, embedder)  # `first` is neither new nor previous now
        assert first.is_dir() and is_served(first)
        holder.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops its lock
    finally:
        holder.kill()
        holder.wait()
    assert not is_served(first)
    build_snapshot(extra_corpus(tmp_path, 3), index_copy, embedder)
    assert not first.exists() and len(list((index_copy / "snapshots").iterdir())) == 2


def test_a_loaded_snapshot_holds_its_lease_until_it_is_closed(index_copy, embedder):
    snapshot = load_snapshot(index_copy, embedder)
    try:
        assert is_served(snapshot.path)
        assert not remove_unless_served(snapshot.path)  # a second open file in the same process is excluded too
        assert snapshot.path.is_dir()
    finally:
        snapshot.close()
    assert not is_served(snapshot.path)
    assert remove_unless_served(snapshot.path) and not snapshot.path.exists()
    assert not list((index_copy / "snapshots").glob(".pruning-*"))


def test_a_loader_does_not_lease_a_snapshot_that_was_pruned_under_it(index_copy):
    serving = current_snapshot_path(index_copy)
    got: dict = {}
    with open(serving / LEASE_FILE) as pruner:
        fcntl.flock(pruner, fcntl.LOCK_EX)  # a prune holds the exclusive lock...
        loader = threading.Thread(target=lambda: got.update(lease=acquire(serving)))
        loader.start()  # ...while a loader that read CURRENT waits for its shared one
        time.sleep(0.2)
        assert loader.is_alive()
        serving.rename(serving.with_name(".pruning-test"))  # the prune moves the folder aside, then unlocks
    loader.join(timeout=PATIENCE_S)
    assert got == {"lease": None}  # the loader reads CURRENT again rather than serve a folder being deleted
    assert acquire(serving) is None
