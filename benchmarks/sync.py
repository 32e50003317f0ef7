"""`quarry sync` on a folder of 1,000 files: after 50 edits, 10 deletions and 5 ACL changes, is
the synced index a full ingest of the folder's new state, and what did the sync touch?

    .venv/bin/python benchmarks/sync.py [--files 1000] [--changes 50] [--deletions 10] [--acl-changes 5]

A generated folder of Markdown notes (each a few made-up sentences, in 10 subfolders; each note's
ACL in its sidecar, one of four groups or public) is ingested; then notes are edited, deleted
and re-permissioned (sidecar only), and `quarry sync` (the real command, a subprocess, batches
of `write_batch_max` 20) brings the index in step. The same is done again with the sync
killed (SIGKILL) once its first batch is durable, then run again. Each result is compared with
a full ingest of the new folder: every document's fields, ACL and regions, and the ranked
documents of 30 questions on the bm25, dense and hybrid routes for four principals. The plan
says what was embedded (puts only: an ACL change re-embeds nothing), and the sync's last line
how many files it read (a file whose stamps and sidecar and manifests' stamps are those the
ingest or the last sync saw is not opened: indexes/sync_state.py). The generated files are
dated a day back, as a team's folder is older than its index, and the sync starts 2.5 s after
the edits. Writes
benchmarks/results/sync.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import os
import random
import signal
import subprocess
import tempfile
import time
from typing import Any

from benchmarks.common import machine, make_embedder, write_json
from indexes.live import current_documents
from indexes.snapshot_build import BuildOptions, build_snapshot
from retrieval.search import search
from retrieval.types import Document, Filters, Principal
from routes.service.view import open_view

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("ops", "finance", "hr", "eng")
PRINCIPALS = (Principal("ann"), Principal("olga", ("ops",)), Principal("fay", ("finance", "hr")),
              Principal("root", GROUPS))
WORDS = ("pump", "valve", "seal", "gasket", "boiler", "rotor", "filter", "relay", "sensor", "intake", "bearing", "panel",
         "Larkspur", "Corvane", "Ormsby", "Tessaly", "Brambling", "Quillon", "Marrow", "Sedge", "Kestrel", "Yarrow")


def _note(rng: random.Random, n: int) -> str:
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + "." for _ in range(3)]
    return f"# Note {n}\n{' '.join(sentences)} Reference N-{n:04d}.\n"


def _acl(rng: random.Random) -> list[str]:
    return ["public"] if rng.random() < 0.3 else [f"group:{rng.choice(GROUPS)}"]


def write_folder(root: Path, files: int, rng: random.Random) -> list[Path]:
    paths = []
    for n in range(files):
        folder = root / f"area-{n % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"note-{n:04d}.md"
        path.write_text(_note(rng, n))
        path.with_name(path.name + ".meta.json").write_text(json.dumps({"acl": _acl(rng)}))
        paths.append(path)
    return paths


def change_folder(paths: list[Path], rng: random.Random, changes: int, deletions: int, acl_changes: int) -> dict[str, int]:
    picked = rng.sample(paths, changes + deletions + acl_changes)
    for path in picked[:changes]:
        path.write_text(path.read_text() + f"Revised: the {rng.choice(WORDS)} was replaced.\n")
    for path in picked[changes:changes + deletions]:
        path.unlink()
        path.with_name(path.name + ".meta.json").unlink()
    for path in picked[changes + deletions:]:
        sidecar = path.with_name(path.name + ".meta.json")
        old = json.loads(sidecar.read_text())["acl"]
        sidecar.write_text(json.dumps({"acl": [g for g in (f"group:{x}" for x in GROUPS) if [g] != old][:1]}))
    return {"changed": changes, "deleted": deletions, "acl_changed": acl_changes}


def quarry(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "routes.cli.main", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def sync(folder: Path, index: Path, env: dict[str, str], kill_after_first_batch: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = quarry("sync", str(folder), "--index", str(index), env=env)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        if line.strip():
            lines.append(json.loads(line))
            if kill_after_first_batch and "generation" in lines[-1]:
                proc.send_signal(signal.SIGKILL)
                break
    code = proc.wait()
    seconds = time.perf_counter() - t0
    if kill_after_first_batch:
        return {"killed_after_batches": len(lines), "exit": code, "seconds": round(seconds, 2)}
    if code != 0:
        raise RuntimeError(proc.stderr.read() if proc.stderr else "sync failed")
    return {"plan": lines[-1]["sync"], "files": lines[-1]["files"], "batches": len(lines) - 1, "seconds": round(seconds, 2)}


def _fields(doc: Document) -> tuple:
    return (doc.id, doc.text, doc.title, doc.source, doc.date, tuple(sorted(doc.metadata.items())), tuple(sorted(doc.acl)),
            tuple(doc.regions))


def compare(synced: Path, full: Path, embedder: Any, questions: list[str]) -> dict[str, Any]:
    a, b = open_view(synced, embedder, plugins=False), open_view(full, embedder, plugins=False)
    try:
        docs_a = {d.id: _fields(d) for d, _ in current_documents(a.base or a.snapshot, a.live)}
        docs_b = {d.id: _fields(d) for d, _ in current_documents(b.base or b.snapshot, b.live)}
        differ = sorted(i for i in set(docs_a) | set(docs_b) if docs_a.get(i) != docs_b.get(i))
        answers = answers_differ = 0
        for p in PRINCIPALS:
            for q in questions:
                for route in ("bm25", "dense", "hybrid"):
                    ha = [(h.doc_id, round(h.score, 4)) for h in search(a.retrievers, route, q, p, 10, Filters(), a.limits)]
                    hb = [(h.doc_id, round(h.score, 4)) for h in search(b.retrievers, route, q, p, 10, Filters(), b.limits)]
                    answers += 1
                    answers_differ += ha != hb
        return {"documents": len(docs_a), "documents_full_ingest": len(docs_b), "documents_differ": differ[:10],
                "n_documents_differ": len(differ), "ranked_lists": answers, "ranked_lists_differ": answers_differ}
    finally:
        a.close()
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--changes", type=int, default=50)
    ap.add_argument("--deletions", type=int, default=10)
    ap.add_argument("--acl-changes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    embedder = make_embedder()
    env = {**os.environ, "QUARRY_WRITE_BATCH_MAX": "20", "PYTHONPATH": str(ROOT)}
    result: dict[str, Any] = {"command": "benchmarks/sync.py " + " ".join(sys.argv[1:]), "files": args.files}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rng = random.Random(args.seed)
        folder = root / "notes"
        paths = write_folder(folder, args.files, rng)
        day_ago = time.time_ns() - 86_400_000_000_000  # a team's folder is older than its index
        for path in folder.rglob("*"):
            os.utime(path, ns=(day_ago, day_ago))
        questions = [f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)}" for _ in range(27)]
        questions += ["Reference N-0007", "Revised: the pump was replaced", "Larkspur seal"]
        t0 = time.perf_counter()
        build_snapshot([folder], root / "synced", embedder)
        result["initial_ingest_s"] = round(time.perf_counter() - t0, 2)
        subprocess.run(["cp", "-a", str(root / "synced"), str(root / "killed")], check=True)
        result["edits"] = change_folder(paths, rng, args.changes, args.deletions, args.acl_changes)
        time.sleep(2.5)  # the edits a few seconds old: past the window in which a stamp is not trusted (RACY_NS)
        result["sync"] = sync(folder, root / "synced", env)
        result["killed"] = sync(folder, root / "killed", env, kill_after_first_batch=True)
        result["killed"]["second_run"] = sync(folder, root / "killed", env)
        t0 = time.perf_counter()
        build_snapshot([folder], root / "full", embedder, BuildOptions(reuse_embeddings=False))
        result["full_ingest_s"] = round(time.perf_counter() - t0, 2)
        result["synced_vs_full"] = compare(root / "synced", root / "full", embedder, questions)
        result["killed_vs_full"] = compare(root / "killed", root / "full", embedder, questions)
        result["again"] = sync(folder, root / "synced", env)
    result["machine"] = machine()
    plan = result["sync"]["plan"]
    print(f"{args.files} files; edits {result['edits']}; files read by the sync {result['sync']['files']}, "
          f"by the killed sync's second run {result['killed']['second_run']['files']}, "
          f"by a sync of the index in step {result['again']['files']}")
    print(f"sync: put {len(plan['put'])}, acl {len(plan['acl'])}, delete {len(plan['delete'])}, unchanged "
          f"{plan['unchanged']}, {result['sync']['batches']} batches, {result['sync']['seconds']} s "
          f"(initial ingest {result['initial_ingest_s']} s, full ingest of the new state {result['full_ingest_s']} s)")
    for name in ("synced_vs_full", "killed_vs_full"):
        r = result[name]
        print(f"{name}: documents {r['documents']} vs {r['documents_full_ingest']}, differ {r['n_documents_differ']}; "
              f"ranked lists differ {r['ranked_lists_differ']} of {r['ranked_lists']}")
    k = result["killed"]
    print(f"killed after {k['killed_after_batches']} batch line(s) (exit {k['exit']}); second run: "
          f"put {len(k['second_run']['plan']['put'])}, acl {len(k['second_run']['plan']['acl'])}, "
          f"delete {len(k['second_run']['plan']['delete'])}")
    print(f"a sync of the index in step: {result['again']['plan'] | {'put': len(result['again']['plan']['put'])}}")
    write_json("sync", result)


if __name__ == "__main__":
    main()
