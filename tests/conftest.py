"""Shared fixtures: the real offline model and a real snapshot of a small corpus, built once."""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import settings

# Deterministic property tests: the same examples on every machine, so CI cannot flake.
settings.register_profile("quarry", derandomize=True, database=None, deadline=None)
settings.load_profile("quarry")

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# How long a test waits for what only a hang would keep from happening (a server to start, a
# snapshot to switch, a subprocess or a thread to finish). Tests wait on readiness signals,
# never for a set time; this bound only ends a test that hangs, so it sits far above what a
# slow machine under load needs (a server started in over 120 s at a load average of 20).
# QUARRY_TEST_PATIENCE_S changes it.
PATIENCE_S = float(os.environ.get("QUARRY_TEST_PATIENCE_S", "1800"))


def write_readable_documents(principal, folder: Path) -> Path:
    """The demo documents `principal` may read, as a source folder `folder/docs` (an index of
    them is what the no-leak differentials compare against): each readable Markdown file
    copied as it is, so its id, source and sections are the full index's, and each JSONL file
    with only its readable lines."""
    import shutil

    from indexes.corpus import load_documents

    root = DEMO / "docs"
    out = folder / "docs"
    for ld in load_documents([root]):
        d = ld.doc
        if not principal.can_read(d.acl):
            continue
        path = Path(ld.origin.rpartition(":")[0])
        target = out / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix != ".jsonl":
            shutil.copyfile(path, target)
            continue
        with target.open("a") as f:
            f.write(json.dumps({"id": d.id, "text": d.text, "title": d.title, "source": d.source,
                                "date": d.date.isoformat() if d.date else None,
                                "metadata": dict(d.metadata), "acl": list(d.acl)}) + "\n")
    return out


SCIFACT_ACLS = (["public"], ["group:sre"], ["group:finance"], ["group:admin"], ["group:sre", "group:finance"])


def write_scifact_sample(folder: Path, claims: int = 30, distractors: int = 250) -> tuple[Path, list[str]]:
    """A corpus written apart from the demo, from BEIR SciFact (../shared/datasets): the
    abstracts relevant to the first `claims` test claims plus the first `distractors` others,
    each with an ACL drawn by its id from SCIFACT_ACLS (the dataset has none), as a JSONL
    source in `folder`; returns it and the claims. Skips when the dataset is not beside the
    repository."""
    import hashlib

    from indexes.beir import load_qrels, load_queries

    root = ROOT.parent / "shared" / "datasets" / "scifact"
    if not (root / "corpus.jsonl").is_file():
        pytest.skip(f"BEIR SciFact is not at {root}")
    qrels, queries = load_qrels(root), load_queries(root)
    chosen = [q for q in qrels if q in queries][:claims]
    wanted = {d for q in chosen for d in qrels[q]}
    path, taken = folder / "scifact.jsonl", 0
    with (root / "corpus.jsonl").open(encoding="utf-8") as src, path.open("w") as out:
        for line in src:
            doc = json.loads(line)
            if doc["_id"] not in wanted:
                if taken >= distractors:
                    continue
                taken += 1
            acl = SCIFACT_ACLS[hashlib.sha256(doc["_id"].encode()).digest()[0] % len(SCIFACT_ACLS)]
            out.write(json.dumps({"id": doc["_id"], "title": doc["title"], "text": doc["text"], "acl": acl}) + "\n")
    return path, [queries[q] for q in chosen]


ANSWER_VOLATILE = ("trace_id", "elapsed_ms", "ms", "scores", "generation", "index_generation", "loop_overhead_ms")


def stable_answer(value):
    """An answer without what differs between two runs of one question (ids, timings, router scores)."""
    if isinstance(value, dict):
        return {k: stable_answer(v) for k, v in value.items() if k not in ANSWER_VOLATILE}
    if isinstance(value, list):
        return [stable_answer(v) for v in value]
    return value


def assert_alike(a, b, where: str = "") -> None:
    """Two answers agree: the same shape and values, numbers within 1e-4."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), (where, sorted(a.keys() ^ b.keys()))
        for k in a:
            assert_alike(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_alike(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= 1e-4, (where, a, b)
    else:
        assert a == b, (where, a, b)


def wait_until(ready, what: str, alive=None, poll: float = 0.05) -> float:
    """Poll `ready()` until it holds, and return the seconds it took (a figure to print, never
    to assert on). Fails at once when `alive()` says the thing waited on has ended, and after
    PATIENCE_S, which only a hang reaches."""
    started = time.monotonic()
    while not ready():
        assert alive is None or alive(), f"{what}: it ended before it was ready"
        assert time.monotonic() - started < PATIENCE_S, f"{what}: not after {PATIENCE_S:.0f} s, so it hangs"
        time.sleep(poll)
    return time.monotonic() - started


ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "tests" / "fixtures" / "mini"
TRIAL = ROOT / "tests" / "fixtures" / "trial"  # a second domain (hospital IT), written apart from the demo
DEMO = ROOT / "eval_data" / "demo"
# Figures that only the private note-finance-q3-2025-budget holds: seeing one is a leak.
FINANCE_FACTS = ("9,400,000", "8,900,000", "9,050,000", "+16.7%", "Q3 2025 budget vs actuals")


class TablesProbe:
    """Wraps a table backend: counts statements and can hold each until the test releases
    it, make it take a while, or fail it (a large, slow or broken database)."""

    def __init__(self, inner, *, held: bool = False, seconds: float = 0.0, error: Exception | None = None) -> None:
        self.inner, self.seconds, self.error, self.statements = inner, seconds, error, 0
        self.entered, self.release = threading.Event(), threading.Event()
        if not held:
            self.release.set()

    def tables(self):
        return self.inner.tables()

    def acl_tokens(self):
        return self.inner.acl_tokens()

    def run(self, *args):
        self.entered.set()
        if not self.release.wait(timeout=PATIENCE_S):
            raise RuntimeError("the test never released the statement")
        self.statements += 1
        time.sleep(self.seconds)
        if self.error is not None:
            raise self.error
        return self.inner.run(*args)

    def close(self) -> None:
        """The wrapped backend belongs to its fixture, which closes it."""


class StatementLog:
    """Records every statement a catalog runs through its cursors, with its parameters (the
    catalog and DuckDB do the work; this only watches which reads happen)."""

    def __init__(self, catalog) -> None:
        self.catalog = catalog
        self.statements: list[tuple[str, tuple]] = []

    def __enter__(self) -> "StatementLog":
        real, log = type(self.catalog).cursor.__get__(self.catalog), self.statements

        class Recording:
            def __init__(self, cur) -> None:
                self.cur = cur

            def execute(self, sql, params=()):
                log.append((sql, tuple(params or ())))
                return self.cur.execute(sql, params)

            def __getattr__(self, name):
                return getattr(self.cur, name)

        self.catalog.cursor = lambda: Recording(real())
        return self

    def __exit__(self, *exc) -> None:
        del self.catalog.cursor

    def with_param(self, value) -> list[str]:
        return [sql for sql, params in self.statements if value in params]


@pytest.fixture
def quarry_in_process(monkeypatch, capsys):
    """`quarry ARGS` run in this process through `routes.cli.main.main`, for tests about what a
    command does rather than about its process (each command family keeps a test that runs
    `python -m routes.cli.main` itself). Returns a CompletedProcess with the exit code and
    what the command wrote to stdout and stderr. `env` sets variables for that run only, and
    the variables the command sets for its process (routes/service/process.py) are put back
    as they were, so no later test sees them."""
    import subprocess

    from routes.cli.main import main
    from routes.service.process import PROCESS_ENV

    def run(*args, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        argv = [str(a) for a in args]
        before = {name: os.environ.get(name) for name in (*PROCESS_ENV, "OMP_NUM_THREADS")}
        capsys.readouterr()  # what the test printed before is not the command's
        try:
            with monkeypatch.context() as m:
                for name, value in (env or {}).items():
                    m.setenv(name, value)
                code = main(argv)
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        out = capsys.readouterr()
        return subprocess.CompletedProcess(["quarry", *argv], code, out.out, out.err)

    return run


@pytest.fixture(scope="session")
def threads():
    """Threads for the parts tests build without open_view (SQL watchdogs and table profile
    builds), as the runtime gives an engine its own; enough that none waits for another."""
    pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="quarry-test")
    yield pool
    pool.shutdown(wait=False, cancel_futures=True)


@pytest.fixture(scope="session")
def embedder():
    from indexes.embedder import Embedder

    return Embedder().load()


@pytest.fixture(scope="session")
def mini_index(tmp_path_factory, embedder) -> Path:
    from indexes.snapshot_build import build_snapshot

    index = tmp_path_factory.mktemp("mini-index")
    build_snapshot([MINI], index, embedder)
    return index


@pytest.fixture(scope="session")
def engine(mini_index, embedder):
    from routes.service.view import open_view

    eng = open_view(mini_index, embedder)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def trial_engine(tmp_path_factory, embedder):
    from datetime import date

    from indexes.snapshot_build import build_snapshot
    from routes.service.view import open_view

    index = tmp_path_factory.mktemp("trial-index")
    build_snapshot([TRIAL], index, embedder)
    eng = open_view(index, embedder, today=date(2025, 11, 1))
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def tables_index(tmp_path_factory, embedder) -> Path:
    """A snapshot of the demo tables alone (no documents, so nothing to embed)."""
    from indexes.snapshot_build import build_snapshot

    index = tmp_path_factory.mktemp("tables-index")
    build_snapshot([DEMO / "tables"], index, embedder)
    return index


@pytest.fixture(scope="session")
def sql_retriever(tables_index, threads):
    from indexes.catalog import Catalog
    from indexes.sql_runner import SqlRunner
    from indexes.snapshot_load import current_snapshot_path
    from retrieval.retrievers.sql import SqlLimits, SqlRetriever

    catalog = Catalog(current_snapshot_path(tables_index) / "catalog.duckdb")
    retriever = SqlRetriever(SqlRunner(catalog, watchdogs=threads), SqlLimits(max_rows=1000, timeout_s=5.0), builder=threads)
    yield retriever
    retriever.close()
    catalog.close()


@pytest.fixture(scope="session")
def scifact_sample(tmp_path_factory, embedder) -> tuple[Path, list[str], Path]:
    """(source, claims, one-node index) of the SciFact sample (write_scifact_sample), built once
    for the tests that shard it; a test that writes to the index works on a copy."""
    from indexes.snapshot_build import build_snapshot

    source, claims = write_scifact_sample(tmp_path_factory.mktemp("scifact-sample"))
    index = tmp_path_factory.mktemp("scifact-single")
    build_snapshot([source], index, embedder)
    return source, claims, index


@pytest.fixture(scope="session")
def demo_index(tmp_path_factory, embedder) -> Path:
    from indexes.snapshot_build import build_snapshot

    index = tmp_path_factory.mktemp("demo-index")
    build_snapshot([DEMO / "docs", DEMO / "tables"], index, embedder)
    return index


@pytest.fixture(scope="session")
def demo_engine(demo_index, embedder):
    from datetime import date

    from routes.service.view import open_view

    eng = open_view(demo_index, embedder, today=date(2025, 11, 1))
    yield eng
    eng.close()


def free_port() -> int:
    """A loopback port nothing listens on now (for a server whose URL must be known before it starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A real uvicorn server on a loopback port (a free one unless given), in a thread of the test process."""

    def __init__(self, app, graceful_s: float | None = None, port: int | None = None) -> None:
        """`graceful_s` bounds how long shutdown waits for requests still in flight; `port`, when
        the app must know its own URL (e.g. as a token audience), comes from `free_port()`."""
        import threading

        import uvicorn

        self.port = port if port is not None else free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on",
                                                   timeout_graceful_shutdown=graceful_s))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        wait_until(lambda: self.server.started, "the server's startup", alive=self.thread.is_alive, poll=0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=PATIENCE_S)


def metrics_text(live) -> str:
    """/metrics as the `ops` key (admin scope) of `live` reads it."""
    import httpx

    r = httpx.get(live.url + "/metrics", headers={"Authorization": f"Bearer {live.keys['ops']}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.text


def counter(live, family: str, label: str) -> dict[str, float]:
    """One counter of /metrics, summed by the value of `label`."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(metrics_text(live)):
        for s in fam.samples if fam.name == family else ():
            if s.name == f"{family}_total":
                out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
    return out


def grew(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


@pytest.fixture(scope="session")
def http_keys(tmp_path_factory):
    from auth.keys import KeyStore

    store = KeyStore(tmp_path_factory.mktemp("keys") / "keys.json")
    keys = {
        "alice": store.add("alice", ["sre"], ["query", "sql"])[0],
        "bob": store.add("bob", ["finance"], ["query"])[0],
        "erin": store.add("erin", [], ["query"])[0],
        "ops": store.add("prometheus", [], ["admin"])[0],
    }
    return store, keys


@pytest.fixture(scope="session")
def live(demo_engine, http_keys, tmp_path_factory):

    from routes.server.app import create_app
    from routes.service.settings import Settings

    store, keys = http_keys
    settings = Settings(index_dir=tmp_path_factory.mktemp("srv"), rate_per_second=1000.0, burst=1000,
                       max_concurrent_per_key=64)
    app = create_app(settings, engine=demo_engine, keys=store)
    with LiveServer(app) as server:
        server.keys = keys
        server.store = store
        server.app = app
        yield server


@pytest.fixture(scope="module")
def oidc_provider(tmp_path_factory):
    """A started OpenID Connect provider (tests/idp_provider.py: standard_provider), one per test
    module and shared by its tests, so a test must leave it as it found it (one that rotates keys
    or adds resources starts its own)."""
    from tests.idp_provider import standard_provider

    with standard_provider(tmp_path_factory.mktemp("idp")) as idp:
        yield idp
