"""The `quarry` command line, run as a real subprocess."""

from __future__ import annotations

import json
import re
import resource
import shutil
import signal
import subprocess
import sys

import pytest

from tests.conftest import PATIENCE_S, ROOT


def quarry(*args: str, timeout: float = PATIENCE_S, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "routes.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, **kw)


def one_line_error(out: subprocess.CompletedProcess) -> dict:
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout
    return json.loads(lines[0])["error"]


def test_search_prints_hits_as_json(mini_index):
    out = quarry("search", "INC-2077", "--retriever", "exact", "--index", str(mini_index), "--principal", "erin")
    assert out.returncode == 0, out.stderr
    hits = json.loads(out.stdout)["hits"]
    assert {h["doc_id"] for h in hits} == {"m05", "m06"} and all(h["trust"] == "untrusted_evidence" for h in hits)


def test_unknown_retriever_is_a_typed_error_with_nonzero_exit(mini_index):
    out = quarry("search", "x", "--retriever", "nope", "--index", str(mini_index), "--principal", "erin")
    assert out.returncode == 2
    assert json.loads(out.stdout)["error"]["code"] == "invalid_request"


def test_rejected_sql_prints_the_error_and_exits_nonzero(tables_index):
    out = quarry("sql", "DROP TABLE incidents", "--index", str(tables_index), "--principal", "erin")
    assert out.returncode == 2
    err = json.loads(out.stdout)["error"]
    assert err["code"] == "sql_rejected" and "DROP" in err["message"]


@pytest.mark.slow
def test_sql_applies_row_acls_for_the_cli_principal(tables_index):
    erin = json.loads(quarry("sql", "SELECT count(*) FROM tickets", "--index", str(tables_index), "--principal", "erin").stdout)
    bob = json.loads(quarry("sql", "SELECT count(*) FROM tickets", "--index", str(tables_index), "--principal", "bob",
                            "--groups", "finance").stdout)
    assert erin["rows"]["data"][0][0] < bob["rows"]["data"][0][0]


@pytest.mark.slow
def test_query_answers_with_the_answer_shape(mini_index):
    out = quarry("query", "carrier webhook retries", "--index", str(mini_index), "--principal", "erin")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert set(answer) == {"status", "context", "rows", "gap", "constraints", "route", "attempts", "stop_reason", "declined",
                           "listing", "trace_id", "elapsed_ms"}
    assert answer["status"] in {"answer_context", "evidence_gap"} and answer["attempts"]


def test_ingest_with_a_bad_file_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "ok"}\n{"id": "b", "text": ""}\n')
    out = quarry("ingest", str(bad), "--index", str(tmp_path / "index"))
    assert out.returncode == 2
    assert json.loads(out.stdout)["error"]["message"].endswith("bad.jsonl:2: document 'b' has no text")
    assert not (tmp_path / "index" / "CURRENT").exists()


def test_ingest_stops_on_a_bad_pdf_naming_it_or_skips_and_lists_it(tmp_path):
    from benchmarks.file_corpus import write_bad_files

    folder = tmp_path / "files"
    write_bad_files(tmp_path / "bad")
    folder.mkdir()
    (folder / "scan.pdf").write_bytes((tmp_path / "bad" / "scan.pdf").read_bytes())
    (folder / "notes.md").write_text("# Notes\n\nThe Harlow pump is serviced in May.\n")
    out = quarry("ingest", str(folder), "--index", str(tmp_path / "index"))
    assert out.returncode == 2
    error = one_line_error(out)
    assert error["message"].startswith(f"{folder / 'scan.pdf'}: no_text: ") and "--skip-bad-files" in error["message"]
    assert not (tmp_path / "index" / "CURRENT").exists()
    out = quarry("ingest", str(folder), "--index", str(tmp_path / "index"), "--skip-bad-files", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert f"skipped {folder / 'scan.pdf'}: no_text:" in out.stderr
    printed = json.loads(out.stdout)
    assert printed["counts"]["documents"] == 1 and [s["reason"] for s in printed["skipped_files"]] == ["no_text"]


def test_ingest_lists_links_and_fifos_it_never_read_and_keeps_the_environment_out(tmp_path):
    import os

    from indexes.catalog import Catalog
    from indexes.snapshot_load import current_snapshot_path

    canary = "QUARRY_CANARY=Zentrolith-5521"
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "Q3 report.md").write_text("# Q3\n\nThe Harlow pump is serviced in May.\n")
    (folder / "env.txt").symlink_to("/proc/self/environ")  # the ingest's own environment, where credentials live
    (folder / "env.txt.meta.json").write_text(json.dumps({"acl": ["public"]}))
    os.mkfifo(folder / "pipe.md")
    env = {**os.environ, "QUARRY_CANARY": canary.split("=", 1)[1]}
    out = quarry("ingest", str(folder), "--index", str(tmp_path / "index"), "--default-acl", "public", "--no-progress",
                 env=env)
    assert out.returncode == 0, out.stderr
    assert f"skipped {folder / 'env.txt'}: link: a symbolic link (to /proc/self/environ)" in out.stderr
    assert f"skipped {folder / 'pipe.md'}: special_file: a FIFO" in out.stderr
    printed = json.loads(out.stdout)
    assert printed["counts"]["documents"] == 1
    assert sorted(s["reason"] for s in printed["skipped_files"]) == ["link", "special_file"]
    cat = Catalog(current_snapshot_path(tmp_path / "index") / "catalog.duckdb")
    try:
        docs = {d.id: d.text for d, _ in cat.documents()}
    finally:
        cat.close()
    assert list(docs) == ["Q3_report"] and canary not in docs["Q3_report"] and canary not in out.stdout + out.stderr


@pytest.mark.slow
def test_serve_without_an_active_key_refuses_to_start_and_says_how_to_create_one(mini_index, tmp_path):
    from auth.keys import KeyStore

    revoked = KeyStore(tmp_path / "revoked.json")
    revoked.revoke(revoked.add("erin")[1].key_id)
    for keys in ([], ["--keys", str(tmp_path / "missing.json")], ["--keys", str(revoked.path)]):
        out = quarry("serve", "--index", str(mini_index), "--port", "0", *keys)  # a server would not exit
        assert out.returncode == 2
        error = one_line_error(out)
        assert error["code"] == "invalid_request" and "quarry keys add --principal ID --keys FILE" in error["message"]


@pytest.mark.slow
def test_serve_and_query_on_a_directory_without_a_snapshot_print_one_line_and_exit_2(tmp_path):
    from auth.keys import KeyStore

    KeyStore(tmp_path / "keys.json").add("erin")
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in (["query", "carrier webhook retries", "--principal", "erin"],
                    ["serve", "--keys", str(tmp_path / "keys.json"), "--port", "0"]):
        out = quarry(*command, "--index", str(empty))
        assert out.returncode == 2, out.stderr
        error = one_line_error(out)
        assert error["code"] == "not_found" and f"run `quarry ingest SOURCES --index {empty}`" in error["message"]


@pytest.mark.slow
def test_ingest_refuses_a_default_acl_that_would_silently_hide_documents(tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "text": "the carrier webhook retries five times"}\n')
    for acl in (["everyone"], ["all"], ["Public"], ["none"], ["private"], ["alice", "world"], ["*"], ["group:"],
                ["groups:sre"], ["group:sre,group:ops"]):
        out = quarry("ingest", str(docs), "--index", str(tmp_path / "index"), "--default-acl", *acl)
        assert out.returncode == 2, (acl, out.stderr)
        error = one_line_error(out)
        assert error["code"] == "invalid_request" and "group:NAME" in error["message"]
    assert not (tmp_path / "index").exists()


def test_a_cluster_ingest_refuses_its_flags_without_a_cluster_or_with_bad_sizes_before_reaching_ray(tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "text": "the carrier webhook retries five times"}\n')
    index = tmp_path / "index"
    for flags, said in ((["--shards", "2", "--actors", "2"], "--cluster"), (["--shards", "2", "--batch", "8"], "--cluster"),
                        (["--shards", "2", "--cluster", "127.0.0.1:1", "--batch", "0"], "--batch must be at least 1"),
                        (["--shards", "2", "--cluster", "127.0.0.1:1", "--actors", "0"], "--actors must be at least 1"),
                        (["--cluster", "127.0.0.1:1"], "--shards N with N >= 2")):
        out = quarry("ingest", str(docs), "--index", str(index), *flags)
        assert out.returncode == 2, (flags, out.stderr)
        error = one_line_error(out)
        assert error["code"] == "invalid_request" and said in error["message"], (flags, error)
    assert not index.exists()


@pytest.mark.slow
def test_ingest_prints_the_effective_default_acl(tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "text": "the carrier webhook retries five times"}\n')
    out = quarry("ingest", str(docs), "--index", str(tmp_path / "index"), "--default-acl", "group:sre", "alice")
    assert out.returncode == 0, out.stderr
    assert "default ACL of documents and tables without one: group:sre alice" in out.stderr


def _files_of_at_most_64_kib() -> None:
    """In the child: the kernel refuses to grow any file past 64 KiB (EFBIG), as a full disk
    refuses with ENOSPC; Python ignores SIGXFSZ, so the write itself fails."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def test_an_ingest_the_disk_refuses_is_one_typed_path_free_line_and_keeps_the_snapshot_serving(mini_index, tmp_path):
    from indexes.snapshot_load import current_snapshot_path

    index = tmp_path / "index"
    shutil.copytree(mini_index, index)
    before = current_snapshot_path(index)
    out = quarry("ingest", str(ROOT / "tests" / "fixtures" / "mini"), "--index", str(index), preexec_fn=_files_of_at_most_64_kib)
    assert out.returncode == 1, out.stderr
    error = one_line_error(out)
    assert error["code"] == "internal" and "File too large" in error["message"] and str(tmp_path) not in error["message"]
    assert current_snapshot_path(index) == before
    assert sorted(p.name for p in (index / "snapshots").iterdir()) == [before.name]  # nothing half-written left


@pytest.mark.slow
def test_a_binary_current_file_is_a_typed_error_and_the_next_ingest_replaces_it(mini_index, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(mini_index, index)
    (index / "CURRENT").write_bytes(b"\xff\xfe\x00garbage\n")
    out = quarry("query", "carrier webhook retries", "--index", str(index), "--principal", "erin")
    assert out.returncode == 1
    error = one_line_error(out)
    assert error["code"] == "internal" and "CURRENT" in error["message"] and str(tmp_path) not in error["message"]
    assert quarry("ingest", str(ROOT / "tests" / "fixtures" / "mini"), "--index", str(index)).returncode == 0
    assert quarry("query", "carrier webhook retries", "--index", str(index), "--principal", "erin").returncode == 0


def test_query_prints_its_answer_and_exits_0_while_a_table_profile_is_still_inside_the_database(
        tables_index, monkeypatch, capsys):
    """The question waits for a new scope's table profile at most half its deadline; here the
    profile (slowed down by a long statement before the real one) is still running in DuckDB
    when the command closes its engine. Closing stops it and waits; the answer is printed."""
    from retrieval.retrievers.sql import SqlRetriever
    from routes.cli.main import main

    real = SqlRetriever._profile
    started = []

    def slow_profile(self, principal, tables):
        started.append(True)
        self._backend.run("SELECT count(*) FROM data.incidents a, data.incidents b, data.incidents c, data.incidents d, "
                          "data.incidents e WHERE a.title || b.title <> c.title", 600.0, 1)
        return real(self, principal, tables)

    monkeypatch.setattr(SqlRetriever, "_profile", slow_profile)
    code = main(["query", "How many sev1 incidents were there?", "--index", str(tables_index), "--principal", "alice",
                 "--groups", "sre", "--deadline-ms", "400", "--set", "sql_timeout_s=600"])
    out = capsys.readouterr().out
    assert started and code == 0
    answer = json.loads(out)
    assert answer["status"] in ("answer_context", "evidence_gap") and answer["attempts"]


@pytest.mark.slow
def test_ingest_shows_its_progress_in_a_log_and_takes_no_progress(tmp_path):
    from tests.conftest import MINI

    shown = quarry("ingest", str(MINI), "--index", str(tmp_path / "a"))  # stderr is a pipe here, as in a log
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"embed: 100%.*\b\d+/\d+ \[\d\d:\d\d<\d\d:\d\d", shown.stderr), shown.stderr
    hidden = quarry("ingest", str(MINI), "--index", str(tmp_path / "b"), "--no-progress")
    assert hidden.returncode == 0, hidden.stderr
    assert "embed" not in hidden.stderr and "default ACL" in hidden.stderr


@pytest.mark.slow
def test_ingest_draws_its_progress_on_a_terminal_that_reports_no_width(tmp_path):
    """Some runners give a pseudo-terminal of 0 columns, where tqdm's own width draws nothing."""
    import os
    import pty

    from tests.conftest import MINI

    leader, follower = pty.openpty()  # never sized: 0 x 0
    assert os.get_terminal_size(follower).columns == 0
    proc = subprocess.Popen([sys.executable, "-m", "routes.cli.main", "ingest", str(MINI), "--index", str(tmp_path / "i")],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the last writer closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.wait(timeout=PATIENCE_S) == 0
    assert re.search(rb"embed: 100%\|.+\| \d+/\d+", seen), seen[-2000:]
