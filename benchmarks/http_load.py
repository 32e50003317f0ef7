"""HTTP load against a real `quarry serve` process on loopback (the demo index).

    .venv/bin/python benchmarks/http_load.py [--seconds 30] [--clients 16]

For the bm25 route (POST /v1/search) and auto routing (POST /v1/query): 16 concurrent
clients for 30 s each, throughput, latency p50/p95/p99 and errors. HTTP overhead is measured
without queueing: one client, sequential requests, server p50 minus the p50 of the same
calls made in-process on the same index, the two interleaved call by call (and the median
of the per-call differences). Writes benchmarks/results/http_load.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import time
from datetime import date

import httpx

from benchmarks.common import CACHE, ROOT, machine, make_embedder, write_json
from retrieval.metrics import percentile
from retrieval.search import search
from retrieval.types import Filters, Principal
from routes.cli.demo import ensure_demo_index
from routes.service.view import open_view
from auth.keys import KeyStore

QUESTIONS = [json.loads(line)["question"] for line in (ROOT / "eval_data" / "demo" / "questions.jsonl").read_text().splitlines()
             if line.strip()]


def start_server(index: Path, keys: Path, port: int, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    env = dict(os.environ, QUARRY_RATE_PER_SECOND="100000", QUARRY_BURST="100000", QUARRY_MAX_CONCURRENT_PER_KEY="1000",
               QUARRY_TODAY="2025-11-01")
    proc = subprocess.Popen([sys.executable, "-m", "routes.cli.main", "serve", "--index", str(index), "--keys", str(keys),
                             "--port", str(port), *extra], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not become ready")


def bodies(route: str) -> list[dict]:
    rng = random.Random(3)
    qs = QUESTIONS[:]
    rng.shuffle(qs)
    if route == "bm25":
        return [{"query": q, "retriever": "bm25", "k": 8} for q in qs]
    return [{"question": q, "k": 8} for q in qs]


async def load(url: str, path: str, key: str, payloads: list[dict], clients: int, seconds: float) -> dict:
    latencies: list[float] = []
    errors = 0
    stop = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {key}"}

    async def client(i: int) -> None:
        nonlocal errors
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            n = i
            while time.monotonic() < stop:
                body = payloads[n % len(payloads)]
                n += clients
                t0 = time.perf_counter()
                try:
                    r = await http.post(path, json=body)
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies.append((time.perf_counter() - t0) * 1000)
                errors += not ok

    t0 = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.monotonic() - t0
    return {"requests": len(latencies), "errors": errors, "throughput_rps": round(len(latencies) / wall, 1),
            "p50_ms": round(percentile(latencies, 50), 2), "p95_ms": round(percentile(latencies, 95), 2),
            "p99_ms": round(percentile(latencies, 99), 2)}


def paired(url: str, path: str, key: str, payloads: list[dict], local, n: int) -> tuple[float, float, float]:
    """p50 of sequential HTTP calls (one keep-alive connection, the standard library client)
    and of the same calls in-process, interleaved so that drift of the machine cancels out."""
    import http.client

    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    remote, inproc = [], []
    try:
        for i, body in enumerate(payloads[: n + 20]):
            data = json.dumps(body)
            t0 = time.perf_counter()
            local(body)
            t1 = time.perf_counter()
            conn.request("POST", path, body=data, headers=headers)
            conn.getresponse().read()
            t2 = time.perf_counter()
            if i >= 20:  # the first calls warm both sides
                inproc.append((t1 - t0) * 1000)
                remote.append((t2 - t1) * 1000)
    finally:
        conn.close()
    # Also the median of the per-call differences: the same question both ways, so the spread
    # between questions (one attempt or three) cancels out.
    return percentile(remote, 50), percentile(inproc, 50), percentile([r - i for r, i in zip(remote, inproc, strict=True)], 50)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args()

    index = CACHE / "demo"
    embedder = make_embedder()
    ensure_demo_index(index, embedder)
    keys_path = CACHE / "http-load-keys.json"
    keys_path.unlink(missing_ok=True)
    key, _ = KeyStore(keys_path).add("erin", [], ["query"])
    url = f"http://127.0.0.1:{args.port}"
    results: dict = {"machine": machine(), "clients": args.clients, "seconds": args.seconds}

    engine = open_view(index, embedder, today=date(2025, 11, 1))
    erin = Principal("erin")

    def in_process(route: str, body: dict) -> None:
        if route == "bm25":
            search(engine.retrievers, "bm25", body["query"], erin, 8, Filters(), engine.limits)
        else:
            engine.query(body["question"], erin, k=8)

    proc = start_server(index, keys_path, args.port)
    try:
        for route, path in (("bm25", "/v1/search"), ("auto", "/v1/query")):
            payloads = bodies(route)
            seq, local, diff = paired(url, path, key, payloads, lambda body: in_process(route, body), 250)  # noqa: B023 - used at once
            out = asyncio.run(load(url, path, key, payloads, args.clients, args.seconds))
            out["sequential_http_p50_ms"] = round(seq, 3)
            out["in_process_p50_ms"] = round(local, 3)
            out["http_overhead_p50_ms"] = round(seq - local, 3)
            out["http_overhead_paired_median_ms"] = round(diff, 3)
            results[route] = out
            print(f"{route:>5}: {out['throughput_rps']} req/s with {args.clients} clients, p50 {out['p50_ms']} ms, "
                  f"p95 {out['p95_ms']} ms, p99 {out['p99_ms']} ms, errors {out['errors']}/{out['requests']}; "
                  f"HTTP overhead p50 {out['http_overhead_p50_ms']} ms (sequential {out['sequential_http_p50_ms']} "
                  f"vs in-process {out['in_process_p50_ms']}; median of paired differences "
                  f"{out['http_overhead_paired_median_ms']} ms)")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        engine.close()
    write_json("http_load", results)


if __name__ == "__main__":
    main()
