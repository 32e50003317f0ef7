"""A retriever served by another process: the test backend that proves the access-scope seam
(retrieval/retrievers/__init__.py). It is a test fixture, not a product feature.

The server is a separate process (started with `spawn`, so it shares nothing with the test
process) that loads the snapshot directory itself (indexes/snapshot_load.py) and runs a real
retriever over it (bm25, dense or hybrid). It receives plain JSON: the query, k, the filters
and the caller's `AccessScope`, and enforces access itself, through its own
`ChunkTable.mask(scope, filters)`, before ranking. It counts the searches it serves and the
scopes it was sent, so a test can tell that the route really ran there.

`RemoteRetriever` is the client: it implements the `Retriever` protocol in the test process
(returns `Hit`s), so the loop uses it for a route without knowing where it runs. Each call is
one `multiprocessing.connection` exchange over 127.0.0.1 with an authkey; messages are JSON
bytes (`send_bytes`), never pickles, so nothing but data crosses.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from dataclasses import asdict
from datetime import date
from multiprocessing.connection import Client, Connection, Listener, wait
from pathlib import Path
from typing import Any

from retrieval.errors import RetrievalError, RetrievalUnavailable
from retrieval.types import AccessScope, Filters, Hit

ROUTES = ("bm25", "dense", "hybrid")


def filters_to_json(filters: Filters) -> dict[str, Any]:
    return {"sources": list(filters.sources) if filters.sources is not None else None,
            "date_from": filters.date_from.isoformat() if filters.date_from else None,
            "date_to": filters.date_to.isoformat() if filters.date_to else None,
            "doc_ids": list(filters.doc_ids) if filters.doc_ids is not None else None}


def filters_from_json(data: dict[str, Any]) -> Filters:
    return Filters(sources=tuple(data["sources"]) if data["sources"] is not None else None,
                   date_from=date.fromisoformat(data["date_from"]) if data["date_from"] else None,
                   date_to=date.fromisoformat(data["date_to"]) if data["date_to"] else None,
                   doc_ids=tuple(data["doc_ids"]) if data["doc_ids"] is not None else None)


def hit_to_json(hit: Hit) -> dict[str, Any]:
    return asdict(hit)  # json writes floats with repr, so scores come back bit for bit


def hit_from_json(data: dict[str, Any]) -> Hit:
    return Hit(**{**data, "retrievers": tuple(data["retrievers"]),
                  "signals": tuple((name, float(value)) for name, value in data["signals"]),
                  "section": tuple(data["section"])})


# --- the server process ---------------------------------------------------------------------

class _Served:
    """The retriever the server runs, and what it has served (shared by its connection threads)."""

    def __init__(self, retriever: Any) -> None:
        self.retriever = retriever
        self.calls = 0
        self.scopes: set[tuple[str, ...]] = set()
        self.lock = threading.Lock()

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") == "stats":
            with self.lock:
                return {"calls": self.calls, "scopes": sorted(map(list, self.scopes))}
        if request.get("op") != "search":
            return {"error": {"code": "invalid_request", "message": f"unknown op {request.get('op')!r}"}}
        scope = AccessScope.from_json(request["scope"])
        with self.lock:  # counted on receipt: a call the client gave up on was still sent here
            self.calls += 1
            self.scopes.add(tuple(sorted(scope.tokens)))
        # The ACL is applied here, inside this process, by the retriever's own mask of the scope.
        hits = self.retriever.search(request["query"], scope, int(request["k"]), filters_from_json(request["filters"]))
        return {"hits": [hit_to_json(h) for h in hits]}

    def handle(self, conn: Connection) -> None:
        with conn:
            try:
                request = json.loads(conn.recv_bytes())
                try:
                    reply = self.answer(request)
                except RetrievalError as e:
                    reply = {"error": {"code": e.code, "message": str(e)}}
                except Exception as e:  # noqa: BLE001 - reported to the client, which raises it there
                    reply = {"error": {"code": "retrieval_unavailable", "message": f"{type(e).__name__}: {e}"}}
                conn.send_bytes(json.dumps(reply).encode())
            except (EOFError, OSError):
                pass  # the client went away (a call it abandoned)


def serve(index_dir: str, route: str, fusion: dict[str, Any], authkey: bytes, ready: Connection) -> None:
    """The server process: load the snapshot, build the route's retriever, listen, then send
    the address on `ready` (the readiness signal) and serve until killed."""
    from indexes.embedder import Embedder
    from indexes.snapshot_load import load_snapshot
    from retrieval.retrievers.bm25 import Bm25Retriever
    from retrieval.retrievers.dense import DenseRetriever
    from retrieval.retrievers.hybrid import FusionParams, HybridRetriever

    embedder = Embedder()
    snapshot = load_snapshot(Path(index_dir), embedder)
    bm25 = Bm25Retriever(snapshot.bm25, snapshot.chunks)
    dense = DenseRetriever(snapshot.dense, embedder.encode_query, snapshot.chunks)
    retriever = {"bm25": bm25, "dense": dense, "hybrid": HybridRetriever(bm25, dense, FusionParams(**fusion))}[route]
    if route != "bm25":
        embedder.load().encode_query("warm up")  # the first question should not pay for loading the model
        embedder.clear_cache()
    served = _Served(retriever)
    with Listener(("127.0.0.1", 0), authkey=authkey) as listener:
        ready.send(listener.address)
        ready.close()
        while True:
            conn = listener.accept()
            threading.Thread(target=served.handle, args=(conn,), daemon=True).start()


# --- the test process -----------------------------------------------------------------------

class RemoteRetriever:
    """The client side: the `Retriever` protocol over the server's socket."""

    def __init__(self, name: str, address: tuple[str, int], authkey: bytes) -> None:
        self.name, self._address, self._authkey = name, address, authkey

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        reply = self._ask({"op": "search", "query": query, "scope": access.to_json(), "k": k,
                           "filters": filters_to_json(filters)})
        return [hit_from_json(h) for h in reply["hits"]]

    def stats(self) -> dict[str, Any]:
        """What the server has served: `calls` (searches) and the `scopes` (sorted tokens) it was sent."""
        return self._ask({"op": "stats"})

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            with Client(self._address, authkey=self._authkey) as conn:
                conn.send_bytes(json.dumps(request).encode())
                reply: dict[str, Any] = json.loads(conn.recv_bytes())
        except (OSError, EOFError) as e:
            raise RetrievalUnavailable(f"the remote {self.name} retriever is unreachable ({type(e).__name__})") from None
        if "error" in reply:
            raise RetrievalUnavailable(f"the remote {self.name} retriever failed: {reply['error']['message']}")
        return reply


class RemoteBackend:
    """Start the server process for one route of a snapshot, wait until it is ready, and kill
    it on exit. Readiness is the address the server sends once its snapshot is loaded, or
    the process's end (then this fails at once with its exit code); the wait is bounded only
    by `patience_s`, which only a hang reaches."""

    def __init__(self, index_dir: Path, route: str, fusion: dict[str, Any], patience_s: float) -> None:
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}")
        self.index_dir, self.route, self.fusion, self.patience_s = index_dir, route, fusion, patience_s
        self.process: multiprocessing.process.BaseProcess | None = None

    def __enter__(self) -> RemoteRetriever:
        ctx = multiprocessing.get_context("spawn")
        authkey = os.urandom(32)
        ours, theirs = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=serve, args=(str(self.index_dir), self.route, self.fusion, authkey, theirs),
                                   name=f"remote-{self.route}", daemon=True)
        self.process.start()
        theirs.close()
        try:
            if not wait([ours, self.process.sentinel], timeout=self.patience_s):
                raise AssertionError(f"the remote {self.route} server was not ready after {self.patience_s:.0f} s, so it hangs")
            try:
                address = ours.recv()
            except EOFError:
                self.process.join(self.patience_s)
                raise AssertionError(f"the remote {self.route} server ended before it was ready "
                                     f"(exit code {self.process.exitcode})") from None
        except BaseException:
            self.__exit__()
            raise
        finally:
            ours.close()
        return RemoteRetriever(self.route, address, authkey)

    def __exit__(self, *exc: object) -> None:
        if self.process is None:
            return
        self.process.kill()
        self.process.join(self.patience_s)
        assert not self.process.is_alive(), "the remote server survived its kill"
        self.process.close()
        self.process = None
