"""Can a write key time its way to whether an id exists? Median latency per timing class.

    .venv/bin/python benchmarks/write_oracle.py [--rounds 5]

A real uvicorn server on loopback serves the small test corpus plus 35 documents only
`group:vault` reads (ids vault-00..34); vault-35..69 never exist. A key whose write prefixes
exclude them sends PUT (JSON), DELETE and PATCH acl for all 70 ids, in a shuffled order, each
round; the answer is decided before any lookup, so the two classes should not differ beyond
noise. The baseline, in the same process against the same server: a key whose prefixes hold
the ids, whose DELETE and PATCH look each id up (both classes are a 404). Prints the median
(and p90) per method and class, their difference, and writes benchmarks/results/write_oracle.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import random
import socket
import statistics
import tempfile
import threading
import time
from typing import Any

from benchmarks.common import ROOT, machine, make_embedder, write_json

HIDDEN = [f"vault-{i:02d}" for i in range(35)]
MISSING = [f"vault-{i:02d}" for i in range(35, 70)]
MINI = ROOT / "tests" / "fixtures" / "mini"


class Server:
    """The app under uvicorn in a thread of this process."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def measure(client: Any, url: str, key: str, rounds: int, methods: tuple[str, ...], seed: int) -> dict[str, Any]:
    """Per method: each class's latencies (ms) and the set of distinct (status, body) answers."""
    rng = random.Random(seed)
    times: dict[str, dict[str, list[float]]] = {m: {"existing": [], "missing": []} for m in methods}
    answers: dict[str, dict[str, set[tuple[int, str]]]] = {m: {"existing": set(), "missing": set()} for m in methods}
    headers = {"Authorization": f"Bearer {key}"}
    for _ in range(rounds):
        jobs = [(m, i) for m in methods for i in HIDDEN + MISSING]
        rng.shuffle(jobs)
        for method, doc_id in jobs:
            target = f"{url}/v1/documents/{doc_id}"
            t0 = time.perf_counter()
            if method == "PUT":
                r = client.put(target, json={"text": "Replaced.", "acl": ["group:content"]}, headers=headers)
            elif method == "DELETE":
                r = client.delete(target, headers=headers)
            else:
                r = client.patch(target + "/acl", json={"acl": ["group:content"]}, headers=headers)
            ms = (time.perf_counter() - t0) * 1000.0
            cls = "existing" if doc_id in HIDDEN else "missing"
            times[method][cls].append(ms)
            answers[method][cls].add((r.status_code, r.text.replace(doc_id, "<id>")))
    out: dict[str, Any] = {}
    for method in methods:
        row: dict[str, Any] = {}
        for cls in ("existing", "missing"):
            xs = sorted(times[method][cls])
            row[cls] = {"n": len(xs), "median_ms": round(statistics.median(xs), 3),
                        "p90_ms": round(xs[int(0.9 * (len(xs) - 1))], 3),
                        "answers": sorted({f"{s} {b[:120]}" for s, b in answers[method][cls]})}
        row["median_diff_ms"] = round(row["existing"]["median_ms"] - row["missing"]["median_ms"], 3)
        row["same_answer"] = answers[method]["existing"] == answers[method]["missing"]
        out[method] = row
    return out


def main() -> None:
    import httpx

    from indexes.snapshot_build import build_snapshot
    from routes.server.app import create_app
    from auth.keys import KeyStore
    from routes.service.settings import Settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="passes over the 70 ids per method")
    args = ap.parse_args()
    embedder = make_embedder()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "vault").mkdir()
        (root / "vault" / "vault.jsonl").write_text("".join(
            json.dumps({"id": i, "text": f"Vault ledger entry {i}: sealed.", "acl": ["group:vault"]}) + "\n" for i in HIDDEN))
        build_snapshot([MINI, root / "vault"], root / "index", embedder)
        store = KeyStore(root / "keys.json")
        outside = store.add("cms", ["content"], ["query", "write"], ["team-a-"])[0]
        inside = store.add("intruder", ["content"], ["query", "write"], ["vault-"])[0]
        settings = Settings(index_dir=root / "index", rate_per_second=100_000.0, burst=100_000, max_concurrent_per_key=64,
                            reload_interval_s=0)
        with Server(create_app(settings, keys=store)) as server, httpx.Client(timeout=60) as client:
            measure(client, server.url, outside, 1, ("DELETE",), 0)  # warm the connection and the handlers
            results = {
                "outside_prefixes": measure(client, server.url, outside, args.rounds, ("PUT", "DELETE", "PATCH"), 1),
                "baseline_inside_prefixes": measure(client, server.url, inside, args.rounds, ("DELETE", "PATCH"), 2),
            }
    print(f"{'key':26} {'method':7} {'existing ms':>12} {'missing ms':>11} {'diff ms':>8}  same answer")
    for label, rows in results.items():
        for method, row in rows.items():
            print(f"{label:26} {method:7} {row['existing']['median_ms']:12.2f} {row['missing']['median_ms']:11.2f} "
                  f"{row['median_diff_ms']:8.2f}  {row['same_answer']}  {row['existing']['answers'][0][:60]}")
    write_json("write_oracle", {"machine": machine(), "rounds": args.rounds, "ids_per_class": len(HIDDEN), **results})


if __name__ == "__main__":
    main()
