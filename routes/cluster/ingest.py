"""A sharded ingest on a Ray cluster (`quarry ingest SOURCES --index DIR --shards N --cluster ADDR`).

Embedding is nearly all of an ingest, so that is what runs across the cluster:

1. **Validation**, on this process, as strict as a local ingest (indexes/shards.py
   `plan_shards`): a bad line stops everything with file:line before anything is written.
2. **The work.** For each shard, the index texts of its chunks whose vectors neither its
   previous snapshot nor its embedding journal holds, each text once, written to files of
   one batch each under `DIR/.cluster-ingest/` (the nodes read them there: every node sees
   the index folder at the same path, as serving needs).
3. **Embedding** with Ray Data: `read_json` of the work files, then `map_batches` over an
   actor pool of `actors` actors, each loading the model once. This process receives each
   embedded batch and writes it durably to its shard's journal (indexes/embed_journal.py)
   before it counts it done. Progress: chunks per second, in all and per node.
4. **Publishing.** One Ray task per shard, spread over the nodes, builds and publishes that
   shard's snapshot (`build_member`): catalog, BM25 and FAISS from the journal, with nothing
   left to embed. This process then writes `cluster.json` once every shard is complete
   (`publish_shards`), so readers switch atomically.

**Resuming.** A killed worker costs Ray Data's retry of its batches; a killed run (this
process, or a cluster that lost too much) leaves the journals, and the next run of the same
ingest embeds only the texts no journaled batch holds: at most the batches in flight are
embedded twice. The journals go when their snapshots are published.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from datetime import date
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import ray

from indexes.embed_journal import EmbedJournal
from indexes.embedder import Embedder
from indexes.files import date_warnings
from indexes.shards import ShardPlan, build_member, plan_shards, publish_shards, unembedded
from indexes.snapshot_build import BuildOptions
from indexes.snapshot_load import read_manifest
from retrieval.errors import IngestError
from routes.service.process import PROCESS_ENV

log = logging.getLogger("quarry.cluster")
WORK_DIR = ".cluster-ingest"
BATCH = 256  # texts per Ray Data batch: each is one journal file, and what a lost actor embeds again
WORKER_ENV = {**PROCESS_ENV, "OMP_NUM_THREADS": "1"}
Report = Callable[[str], None]


@dataclass
class IngestStats:
    """What a cluster ingest did (for the command's output and the tests)."""

    pending: int = 0  # texts that needed a vector at the start of this run
    embedded: int = 0  # texts embedded by the actors and journaled in this run
    finished_on_actors: int = 0  # texts whose batch an actor finished (a lost node's finished batches are done again)
    actors_used: int = 0  # actors that started and loaded the model
    encode_s: float = 0.0  # seconds the actors spent embedding, all together
    load_s: float = 0.0  # the longest model load of an actor
    per_node: Counter[str] = field(default_factory=Counter)
    built_on: dict[int, str] = field(default_factory=dict)  # shard -> node that built its snapshot
    computed_at_build: int = 0  # vectors the shard builds still had to embed (0 unless a journal was damaged)
    seconds: dict[str, float] = field(default_factory=dict)


class _Embed:
    """One actor of the pool: the model, loaded once, embedding a batch of texts. The model's
    load and each finished batch are tallied in `tally` (a file per actor in the work folder),
    so a run can say how much work was done twice after a node was lost, and what one actor
    embeds per second of its own time."""

    def __init__(self, model: str | None, tally: str) -> None:
        t0 = time.perf_counter()
        self.embedder = Embedder(Path(model) if model else None).load()
        self.node = ray.get_runtime_context().get_node_id()
        self.tally = Path(tally) / f"{self.node}-{os.getpid()}.tally"
        with self.tally.open("a") as f:
            f.write(f"load 0 {time.perf_counter() - t0:.3f}\n")

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        t0 = time.perf_counter()
        vectors = self.embedder.encode([str(t) for t in batch["t"]])
        with self.tally.open("a") as f:
            f.write(f"batch {len(vectors)} {time.perf_counter() - t0:.3f}\n")
        return {"k": batch["k"], "s": batch["s"], "v": vectors, "node": np.full(len(vectors), self.node)}


def _tallied(tally: Path, stats: IngestStats) -> None:
    """The actors' tallies into `stats` (lines `load 0 SECONDS` and `batch TEXTS SECONDS`)."""
    for path in tally.glob("*.tally"):
        stats.actors_used += 1
        for line in path.read_text().splitlines(keepends=True):
            fields = line.split()
            if not line.endswith("\n") or len(fields) != 3:
                continue  # cut short by the actor's death
            kind, n, seconds = fields
            if kind == "batch":
                stats.finished_on_actors += int(n)
                stats.encode_s += float(seconds)
            else:
                stats.load_s = max(stats.load_s, float(seconds))


def _write_work(rows: Iterator[dict[str, Any]], folder: Path, batch: int) -> tuple[list[str], int]:
    """`rows` in files of exactly `batch` lines (the last one shorter): each file is one block
    of Ray Data's, and one batch of an actor's. Returns the files and the rows written."""
    paths: list[str] = []
    written = 0
    while chunk := list(islice(rows, batch)):
        path = folder / f"{len(paths):07d}.jsonl"
        path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in chunk), encoding="utf-8")
        paths.append(str(path))
        written += len(chunk)
    return paths, written


def _build_on_node(plan: ShardPlan, i: int, index_dir: str, model: str | None, protect: frozenset[str],
                   reuse_previous: bool) -> tuple[dict[str, Any], str]:
    """A Ray task: publish shard `i`'s snapshot on the node it runs on."""
    member = build_member(plan, i, Path(index_dir), Embedder(Path(model) if model else None), None, protect,
                          reuse_previous=reuse_previous)
    return member, ray.get_runtime_context().get_node_id()


class _Progress:
    """Chunks per second, in all and per node, at most every `every_s` seconds."""

    def __init__(self, total: int, report: Report | None, every_s: float = 2.0) -> None:
        self.total, self.report, self.every_s = total, report, every_s
        self.t0 = self.last = time.monotonic()
        self.per_node: Counter[str] = Counter()

    def add(self, node: str, n: int) -> None:
        self.per_node[node] += n
        now = time.monotonic()
        if self.report is not None and (now - self.last >= self.every_s or sum(self.per_node.values()) == self.total):
            self.last = now
            elapsed = max(now - self.t0, 1e-9)
            done = sum(self.per_node.values())
            nodes = ", ".join(f"node {k[:8]} {v / elapsed:.1f}/s" for k, v in sorted(self.per_node.items()))
            self.report(f"embed {done}/{self.total} chunks, {done / elapsed:.1f}/s ({nodes})")


def _embed(files: list[str], journals: dict[int, EmbedJournal], model: str | None, actors: int, batch: int,
           tally: str, progress: _Progress, stats: IngestStats) -> None:
    """Ray Data over the work files; each embedded batch journaled here as it arrives."""
    # One block per file, one file per batch: Ray Data hands an actor blocks until they hold a
    # batch, so larger blocks would leave one actor working through the last ones alone.
    data = ray.data.read_json(files, lines=True, override_num_blocks=len(files)).map_batches(
        _Embed, fn_constructor_args=(model, tally), batch_size=batch, batch_format="numpy", num_cpus=1,
        compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
        runtime_env={"env_vars": WORKER_ENV})
    for out in data.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=0):
        for s in np.unique(out["s"]):
            mine = out["s"] == s
            journals[int(s)].append([str(k) for k in out["k"][mine]], np.asarray(out["v"][mine], dtype=np.float32))
        for node, n in Counter(str(x) for x in out["node"]).items():
            progress.add(node, n)
            stats.per_node[node] += n
        stats.embedded += len(out["k"])


def cluster_ingest(sources: Sequence[Path], index_dir: Path, shards: int, options: BuildOptions | None = None,
                   model: str | None = None, actors: int = 2, batch: int = BATCH,
                   report: Report | None = None, stats: IngestStats | None = None) -> tuple[dict[str, Any], IngestStats]:
    """Ingest `sources` into `shards` shard snapshots on the Ray cluster this process is
    connected to (see the module docstring); returns the cluster manifest and what was done
    (`stats`, when given, is filled as the run goes: what a failed run did)."""
    options = options or BuildOptions()
    if actors < 1 or batch < 1:
        raise IngestError(f"--actors and the batch size must be at least 1, not {actors} and {batch}")
    stats, t0 = stats or IngestStats(), time.perf_counter()
    reader = options.file_reader()
    plan = plan_shards(sources, shards, options, reader)
    embedder = Embedder(Path(model) if model else None)
    stats.seconds["validate"] = round(time.perf_counter() - t0, 3)

    t1 = time.perf_counter()
    work = index_dir / WORK_DIR
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    journals: dict[int, EmbedJournal] = {}

    def rows() -> Iterator[dict[str, Any]]:
        for i in range(shards):
            journals[i], texts = unembedded(plan, i, index_dir, embedder.model_id, reader)
            yield from ({"k": key, "t": text, "s": i} for key, text in texts)

    files, stats.pending = _write_work(rows(), work, batch)
    stats.seconds["plan"] = round(time.perf_counter() - t1, 3)

    t1 = time.perf_counter()
    tally = work / "tally"
    tally.mkdir()
    try:
        if files:
            _embed(files, journals, model, actors, batch, str(tally), _Progress(stats.pending, report), stats)
    finally:
        _tallied(tally, stats)
    stats.seconds["embed"] = round(time.perf_counter() - t1, 3)

    t1 = time.perf_counter()
    build = ray.remote(_build_on_node).options(num_cpus=1, scheduling_strategy="SPREAD",
                                                runtime_env={"env_vars": WORKER_ENV})
    journal_plan = replace(plan, options=replace(options, reuse_embeddings=True))  # the journal holds this run's vectors

    def on_nodes(_plan: ShardPlan, protect: dict[int, frozenset[str]]) -> list[dict[str, Any]]:
        refs = [build.remote(journal_plan, i, str(index_dir), model, protect.get(i, frozenset()), options.reuse_embeddings)
                for i in range(shards)]
        members = []
        for member, node in ray.get(refs):
            members.append(member)
            stats.built_on[member["shard"]] = node
            if report is not None:
                report(f"shard {member['shard']:02d} published on node {node[:8]}: {member['counts']['chunks']} chunks")
        return members

    manifest = publish_shards(plan, index_dir, embedder, on_nodes)
    stats.seconds["publish"] = round(time.perf_counter() - t1, 3)
    for m in manifest["members"]:
        snap = read_manifest(index_dir / m["path"] / "snapshots" / m["snapshot"])
        stats.computed_at_build += int(snap.get("embeddings", {}).get("computed", 0))
    shutil.rmtree(work, ignore_errors=True)
    return {**manifest, "skipped_files": [s.to_json() for s in reader.skipped.values()],
            "date_warnings": date_warnings(reader.file_dates, date.today())}, stats


def stderr_report(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
