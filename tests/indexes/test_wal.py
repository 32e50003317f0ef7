"""The write-ahead log: acknowledged writes survive `kill -9` at any moment, a torn tail is cut
off, earlier damage is an error, one writer process at a time, idempotency keys outlive
restarts and compaction. Real files and real processes; `kill -9` tests a process crash
(the page cache survives it), not a power loss, which cannot be staged here."""

from __future__ import annotations

import inspect
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from indexes.idempotency import IdempotencyKeys
from indexes.wal import Record, WriteAheadLog, read_log
from retrieval.errors import Conflict, InvalidRequest, PayloadTooLarge, ServerFault, StorageError
from tests.conftest import PATIENCE_S, ROOT



def payload(seq: int) -> dict:
    """The payload of record `seq`, shared with the writer processes so the parent can check
    every record; sizes vary from a few bytes to ~5 kB so kills land mid-line too."""
    return {"n": seq, "text": "wal été " * (seq % 13), "blob": "x" * ((seq * 7919) % 5000)}


PAYLOAD = inspect.getsource(payload)

WRITER = PAYLOAD + """
import sys
from pathlib import Path
from indexes.wal import WriteAheadLog
wal = WriteAheadLog(Path(sys.argv[1]))
print("open", wal.last_seq, flush=True)
while True:
    seq = wal.append("put", payload(wal.last_seq + 1))
    print("a", seq, flush=True)
    if len(sys.argv) > 2 and seq % 7 == 0:  # compaction-like truncations between appends
        print("t", seq - 3, flush=True)
        wal.truncate_through(seq - 3)
        print("T", seq - 3, flush=True)
"""

HOLDER = """
import sys, time
from pathlib import Path
from indexes.wal import WriteAheadLog
wal = WriteAheadLog(Path(sys.argv[1]))
print("open", flush=True)
time.sleep(600)
"""


def kill_writer(log: Path, *, after_lines: int | None = None, after_seconds: float = 0.0,
                truncating: bool = False) -> list[tuple[str, int]]:
    """Run a writer on `log`, `kill -9` it after it printed `after_lines` lines (or after
    `after_seconds`), and return every line it printed: each names a write that was on disk."""
    argv = [sys.executable, "-c", WRITER, str(log)] + (["truncating"] if truncating else [])
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        opened = proc.stdout.readline().split()
        assert opened and opened[0] == "open", opened
        lines = []
        if after_lines is None:
            time.sleep(after_seconds)
        else:
            while len(lines) < after_lines:
                lines.append(proc.stdout.readline())
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        lines += proc.stdout.readlines()  # printed before the kill, not read yet: acknowledged too
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    # A line the kill cut short (no newline) is dropped: it reports less than was on disk, and
    # every check below allows a write the writer finished but did not get to report.
    return [(kind, int(n)) for kind, n in (line.split() for line in lines if line.endswith("\n"))]


def fill(log: Path, n: int) -> list[Record]:
    with WriteAheadLog(log) as wal:
        for seq in range(1, n + 1):
            assert wal.append("put", payload(seq)) == seq
        return list(wal.replay())


def test_appended_records_replay_in_order_and_numbering_continues_after_reopen(tmp_path):
    log = tmp_path / "wal.jsonl"
    with WriteAheadLog(log) as wal:
        assert wal.last_seq == 0 and list(wal.replay()) == []
        assert [wal.append("put", {"id": "a", "n": 1}), wal.append("delete", {"id": "b"})] == [1, 2]
        assert list(wal.replay()) == [Record(1, "put", {"id": "a", "n": 1}), Record(2, "delete", {"id": "b"})]
    with WriteAheadLog(log) as wal:
        assert wal.last_seq == 2
        assert wal.append("acl", {"id": "a", "acl": ["group:ops"], "text": "ünïcode ✓"}) == 3
    assert [r.seq for r in read_log(log)] == [1, 2, 3]
    assert list(read_log(log))[2].payload["text"] == "ünïcode ✓"


def test_appends_from_many_threads_get_distinct_consecutive_seqs(tmp_path):
    log = tmp_path / "wal.jsonl"
    with WriteAheadLog(log) as wal:
        def write(t: int) -> None:
            for i in range(10):
                wal.append("put", {"t": t, "i": i})

        threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    records = list(read_log(log))
    assert [r.seq for r in records] == list(range(1, 41))
    assert sorted((r.payload["t"], r.payload["i"]) for r in records) == [(t, i) for t in range(4) for i in range(10)]


def test_every_acknowledged_write_survives_kill_9_at_several_moments(tmp_path):
    """One log, killed four times while a writer appends (after 5, 50 and 200 acknowledgements
    and after a random delay), each run reopening where the last left off. After each kill:
    the records are seqs 1..last without a gap, each byte-identical to what was written; every
    acknowledged seq is there; the only record beyond the last acknowledgement is at most the
    one whose fsync returned before the kill but whose acknowledgement was never printed (it
    is complete, never torn); reopening cuts off only a torn tail and changes nothing else."""
    log = tmp_path / "wal.jsonl"
    seed = random.randrange(1 << 30)
    acked: list[int] = []
    for after_lines, after_seconds in ((5, 0.0), (50, 0.0), (200, 0.0), (None, random.Random(seed).uniform(0.05, 0.5))):
        acked += [n for _, n in kill_writer(log, after_lines=after_lines, after_seconds=after_seconds)]
        before = log.read_bytes()
        records = list(read_log(log))
        seqs = [r.seq for r in records]
        assert seqs == list(range(1, len(seqs) + 1)), seed
        assert set(acked) <= set(seqs) and seqs[-1] - max(acked) in (0, 1), (seed, seqs[-1], max(acked))
        assert all(r.op == "put" and r.payload == payload(r.seq) for r in records), seed
        with WriteAheadLog(log) as wal:
            assert wal.last_seq == seqs[-1] and list(wal.replay()) == records
        after = log.read_bytes()
        assert before.startswith(after) and after.endswith(b"\n"), seed  # at most a torn tail was cut
    assert len(acked) >= 255


@pytest.mark.parametrize("damage", ["half_a_line", "no_newline", "garbage_inside", "zeros_after"])
def test_a_torn_final_line_is_ignored_then_cut_off_and_numbering_continues(tmp_path, damage):
    log = tmp_path / "wal.jsonl"
    records = fill(log, 5)
    data = log.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1  # where the last line begins
    damaged = {
        "half_a_line": data[: (start + len(data)) // 2],
        "no_newline": data[:-1],
        "garbage_inside": data[: start + 10] + b"#" + data[start + 11:],  # complete-looking, bad checksum
        "zeros_after": data + b"\0" * 300,  # a file extended past what was written (power loss)
    }[damage]
    log.write_bytes(damaged)
    kept = records if damage == "zeros_after" else records[:4]
    assert list(read_log(log)) == kept
    with WriteAheadLog(log) as wal:
        assert wal.last_seq == len(kept) and log.stat().st_size == len(data if damage == "zeros_after" else data[:start])
        assert wal.append("put", {"after": "repair"}) == len(kept) + 1
    assert list(read_log(log)) == kept + [Record(len(kept) + 1, "put", {"after": "repair"})]


@pytest.mark.parametrize("damage", ["flipped_byte", "missing_line", "bad_header"])
def test_damage_before_the_final_line_is_an_error_not_a_skip(tmp_path, damage):
    log = tmp_path / "wal.jsonl"
    fill(log, 5)
    lines = log.read_bytes().splitlines(keepends=True)  # header + 5 records
    if damage == "flipped_byte":
        lines[2] = lines[2].replace(b'"n":2', b'"n":3')  # still JSON, checksum no longer holds
    elif damage == "missing_line":
        del lines[3]
    else:
        lines[0] = lines[0].replace(b'"wal":1', b'"wal":2')
    log.write_bytes(b"".join(lines))
    with pytest.raises(ServerFault):
        list(read_log(log))
    with pytest.raises(ServerFault):
        WriteAheadLog(log)
    # The failed open released the writer lock: a repaired log opens in this process.
    (tmp_path / "wal.jsonl").unlink()
    WriteAheadLog(log).close()


def test_a_second_writer_is_refused_with_the_holders_pid_until_the_holder_is_killed(tmp_path):
    log = tmp_path / "wal.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(log)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(Conflict) as refused:
            WriteAheadLog(log)
        assert refused.value.http_status == 409 and refused.value.code == "conflict"
        assert refused.value.context["holder_pid"] == holder.pid and str(holder.pid) in refused.value.message
        holder.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops the lock
        holder.wait()
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout:
            holder.stdout.close()
    with WriteAheadLog(log) as wal:
        assert wal.append("put", {}) == 1
        with pytest.raises(Conflict):  # a second log object in the same process is refused too
            WriteAheadLog(log)


def test_a_writer_asked_to_wait_takes_the_lock_when_the_holder_lets_it_go(tmp_path):
    """The replicas of a shard take turns at its log: a second writer given `wait_s` waits
    for the first to close (and is refused with the holder named if it does not in time)."""
    log = tmp_path / "wal.jsonl"
    first = WriteAheadLog(log)
    first.append("put", {"n": 1})
    with pytest.raises(Conflict):
        WriteAheadLog(log, wait_s=0.05)
    opened: list[int] = []

    def second() -> None:
        with WriteAheadLog(log, wait_s=60) as wal:
            opened.append(wal.append("put", {"n": 2}))

    waiting = threading.Thread(target=second)
    waiting.start()
    time.sleep(0.2)
    assert opened == [] and waiting.is_alive()  # still waiting while the first holds the lock
    first.close()
    waiting.join(60)
    assert opened == [2]


def test_a_record_over_the_size_limit_or_not_json_is_refused_and_writes_nothing(tmp_path):
    log = tmp_path / "wal.jsonl"
    with WriteAheadLog(log, max_record_bytes=1024) as wal:
        with pytest.raises(PayloadTooLarge) as too_big:
            wal.append("put", {"text": "x" * 2000})
        assert too_big.value.context["limit"] == 1024 and too_big.value.http_status == 413
        with pytest.raises(InvalidRequest):
            wal.append("put", {"score": float("nan")})
        with pytest.raises(InvalidRequest):
            wal.append("put", {"ids": {1, 2}})
        assert wal.append("put", {"text": "fits"}) == 1
    assert [r.payload for r in read_log(log)] == [{"text": "fits"}]


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from indexes.wal import WriteAheadLog
from retrieval.errors import StorageError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
wal = WriteAheadLog(Path(sys.argv[1]))
resource.setrlimit(resource.RLIMIT_FSIZE, (wal.path.stat().st_size + 1000, resource.RLIM_INFINITY))
seq = 0
try:
    while True:
        seq = wal.append("put", {"text": "y" * 300})
except StorageError as e:
    print("failed", seq, e.message, flush=True)
try:
    wal.append("put", {"text": "z"})
except StorageError as e:
    print("refused", e.message, flush=True)
"""


def test_after_a_failed_write_the_log_refuses_appends_and_a_reopen_finds_every_acknowledged_one(tmp_path):
    log = tmp_path / "wal.jsonl"
    fill(log, 2)
    out = subprocess.run([sys.executable, "-c", FULL_DISK, str(log)], cwd=ROOT, capture_output=True, text=True,
                         timeout=PATIENCE_S, check=True).stdout.splitlines()
    failed, refused = out[0].split(), out[1]
    assert failed[0] == "failed" and "could not be written" in out[0] and refused.startswith("refused")
    last = int(failed[1])
    assert last >= 3
    with WriteAheadLog(log) as wal:
        assert wal.last_seq == last and [r.seq for r in wal.replay()] == list(range(1, last + 1))
        assert wal.append("put", {"text": "after"}) == last + 1


def test_truncate_through_keeps_later_records_and_the_numbering(tmp_path):
    log = tmp_path / "wal.jsonl"
    records = fill(log, 10)
    with WriteAheadLog(log) as wal:
        wal.truncate_through(6)
        assert wal.base_seq == 6 and wal.last_seq == 10 and list(wal.replay()) == records[6:]
        assert wal.append("put", {"n": 11}) == 11
        with pytest.raises(InvalidRequest):
            wal.truncate_through(12)
        wal.truncate_through(3)  # already folded: nothing changes
        assert [r.seq for r in wal.replay()] == [7, 8, 9, 10, 11]
    with WriteAheadLog(log) as wal:
        assert (wal.base_seq, wal.last_seq) == (6, 11)
        wal.truncate_through(11)  # everything folded: an empty log that still knows its numbering
    with WriteAheadLog(log) as wal:
        assert list(wal.replay()) == [] and wal.last_seq == 11
        assert wal.append("put", {"n": 12}) == 12
    assert [r.seq for r in read_log(log)] == [12]


def test_a_leftover_temp_file_of_a_crashed_truncate_is_ignored_and_removed(tmp_path):
    log = tmp_path / "wal.jsonl"
    records = fill(log, 4)
    tmp = tmp_path / "wal.jsonl.tmp"
    tmp.write_bytes(b'{"base":3,"carry":{},"sha2')  # a rewrite killed before its rename
    with WriteAheadLog(log) as wal:
        assert not tmp.exists() and list(wal.replay()) == records and wal.base_seq == 0


def test_truncations_killed_at_any_moment_leave_the_old_log_or_the_new_one(tmp_path):
    """The writer truncates through seq-3 after every seventh append. After each kill the log
    starts after the last completed truncation, or after the one in flight if its rename
    landed; it holds every acknowledged seq past that base, without a gap, intact."""
    log = tmp_path / "wal.jsonl"
    seed = random.randrange(1 << 30)
    started = completed = 0
    acked: list[int] = []
    for after_lines, after_seconds in ((11, 0.0), (40, 0.0), (123, 0.0), (None, random.Random(seed).uniform(0.05, 0.5))):
        for kind, n in kill_writer(log, after_lines=after_lines, after_seconds=after_seconds, truncating=True):
            if kind == "a":
                acked.append(n)
            elif kind == "t":
                started = n
            else:
                completed = n
        with WriteAheadLog(log) as wal:
            assert not (tmp_path / "wal.jsonl.tmp").exists()
            assert wal.base_seq in (completed, started), (seed, wal.base_seq, completed, started)
            records = list(wal.replay())
            assert [r.seq for r in records] == list(range(wal.base_seq + 1, wal.last_seq + 1)), seed
            assert {n for n in acked if n > wal.base_seq} <= {r.seq for r in records}, seed
            assert wal.last_seq - max(acked) in (0, 1), seed
            assert all(r.payload == payload(r.seq) for r in records), seed
            completed = started = wal.base_seq


def put(keys: IdempotencyKeys, wal: WriteAheadLog, key: str, body: bytes) -> tuple[dict, bool]:
    return keys.append(wal, key, body, "put", {"doc": body.decode()}, lambda seq: {"generation": seq, "status": "applied"})


def test_a_request_retried_ten_times_with_its_key_writes_once_and_returns_the_first_result(tmp_path):
    log = tmp_path / "wal.jsonl"
    with WriteAheadLog(log) as wal:
        wal.append("put", {"doc": "unkeyed"})
        keys = IdempotencyKeys.from_log(wal)
        outcomes = [put(keys, wal, "alice:k1", b'{"id": "d1"}') for _ in range(10)]
    first = {"generation": 2, "status": "applied"}
    assert outcomes == [(first, True)] + [(first, False)] * 9
    assert [r.seq for r in read_log(log)] == [1, 2]


def test_concurrent_retries_of_one_key_write_once(tmp_path):
    with WriteAheadLog(tmp_path / "wal.jsonl") as wal:
        keys = IdempotencyKeys()
        outcomes: list[tuple[dict, bool]] = []
        threads = [threading.Thread(target=lambda: outcomes.append(put(keys, wal, "k", b"body"))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wal.last_seq == 1 and sorted(applied for _, applied in outcomes) == [False] * 7 + [True]


def test_a_key_reused_with_another_body_is_a_409_conflict_that_writes_nothing(tmp_path):
    with WriteAheadLog(tmp_path / "wal.jsonl") as wal:
        keys = IdempotencyKeys()
        put(keys, wal, "alice:k1", b'{"id": "d1"}')
        with pytest.raises(Conflict) as reused:
            put(keys, wal, "alice:k1", b'{"id": "d2"}')
        assert reused.value.http_status == 409 and reused.value.to_dict()["error"]["code"] == "conflict"
        with pytest.raises(Conflict):
            keys.lookup("alice:k1", b'{"id": "d2"}')
        assert keys.lookup("alice:k1", b'{"id": "d1"}') == {"generation": 1, "status": "applied"}
        assert keys.lookup("bob:k1", b'{"id": "d2"}') is None
        assert wal.last_seq == 1
        for bad in ("", "k" * 256):
            with pytest.raises(InvalidRequest):
                keys.lookup(bad, b"")
        with pytest.raises(InvalidRequest):
            keys.append(wal, "k2", b"", "put", {"idempotency": "mine"}, lambda seq: {})


def test_idempotency_keys_survive_a_reopen_and_a_truncation(tmp_path):
    log = tmp_path / "wal.jsonl"
    with WriteAheadLog(log) as wal:
        keys = IdempotencyKeys.from_log(wal)
        put(keys, wal, "k1", b"one")
        put(keys, wal, "k2", b"two")
    with WriteAheadLog(log) as wal:
        keys = IdempotencyKeys.from_log(wal)
        assert put(keys, wal, "k1", b"one") == ({"generation": 1, "status": "applied"}, False)
        with pytest.raises(Conflict):
            put(keys, wal, "k2", b"other")
        wal.truncate_through(2, carry=keys.carry())  # compaction folds both keyed records away
        assert list(wal.replay()) == [] and wal.last_seq == 2
    with WriteAheadLog(log) as wal:
        keys = IdempotencyKeys.from_log(wal)
        assert put(keys, wal, "k2", b"two") == ({"generation": 2, "status": "applied"}, False)
        assert put(keys, wal, "k3", b"three") == ({"generation": 3, "status": "applied"}, True)
        wal.truncate_through(3)  # no carry given: the carried keys are kept
    with WriteAheadLog(log) as wal:
        assert len(IdempotencyKeys.from_log(wal)) == 2  # k1, k2 carried; k3's record was folded without a carry


def test_only_the_last_capacity_keys_are_remembered_live_and_after_reopen(tmp_path):
    log = tmp_path / "wal.jsonl"
    with WriteAheadLog(log) as wal:
        keys = IdempotencyKeys(capacity=3)
        for i in range(5):
            put(keys, wal, f"k{i}", b"same")
        assert len(keys) == 3 and keys.lookup("k0", b"other") is None and keys.lookup("k4", b"same") is not None
    with WriteAheadLog(log) as wal:
        again = IdempotencyKeys.from_log(wal, capacity=3)
        assert again.carry() == keys.carry()
        assert put(again, wal, "k1", b"same")[1] is True  # forgotten: a new write
    with pytest.raises(StorageError):
        wal.append("put", {})  # closed


def test_a_follower_reads_only_what_was_appended_since_it_last_stopped(tmp_path):
    from indexes.wal import read_new

    path = tmp_path / "wal.log"
    with WriteAheadLog(path) as wal:
        for n in range(1, 4):
            wal.append("put", payload(n))
        base, records, position = read_new(path, 0, None)
        assert (base, [r.seq for r in records], position.seq) == (0, [1, 2, 3], 3)
        wal.append("put", payload(4))
        wal.append("put", payload(5))
        grown = path.stat().st_size
        # what was read before is not read again: bytes behind the position are never looked at
        with open(path, "r+b") as fh:
            fh.seek(position.offset - 2)
            before = fh.read(1)
            fh.seek(position.offset - 2)
            fh.write(b"#" if before != b"#" else b"$")
        _, records, position = read_new(path, 3, position)
        assert [(r.seq, r.payload) for r in records] == [(4, payload(4)), (5, payload(5))]
        assert (position.seq, position.offset) == (5, grown)
        _, records, _ = read_new(path, 5, position)
        assert records == []


def test_a_folded_log_is_a_new_file_and_is_read_from_its_start(tmp_path):
    from indexes.wal import read_new

    path = tmp_path / "wal.log"
    with WriteAheadLog(path) as wal:
        for n in range(1, 5):
            wal.append("put", payload(n))
        _, _, position = read_new(path, 0, None)
        wal.truncate_through(2)
        wal.append("put", payload(5))
    base, records, position = read_new(path, 2, position)
    assert (base, [r.seq for r in records], position.seq) == (2, [3, 4, 5], 5)
