"""A question's deadline bounds every shard call made for it: reading the question, the routes,
the evidence annotations and the grader's links, on the loop's thread, the retriever threads
and the fan-out threads alike. Real shards of the mini corpus serve in this process behind
the front's `RemoteShard`, over a stand-in for Serve's handle that forwards to them (or, for a
shard that is down, fails every try) and records the window each try was given; the real Ray
handle is exercised in tests/system/cluster_in_netns.py."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import date

import pytest

ray_exceptions = pytest.importorskip("ray.exceptions", reason="the cluster extra is not installed")

from indexes.shards import build_shards, load_cluster  # noqa: E402
from retrieval.question_scope import question_scope, time_left  # noqa: E402
from retrieval.errors import RetrievalUnavailable  # noqa: E402
from retrieval.limits import Limits  # noqa: E402
from retrieval.shard import LocalShard  # noqa: E402
from retrieval.types import NO_FILTERS, Principal  # noqa: E402
from routes.cluster.remote import MIN_CALL_S, RemoteShard  # noqa: E402
from routes.service.resources import Resources  # noqa: E402
from routes.service.settings import Settings  # noqa: E402
from routes.service.sharded import open_sharded  # noqa: E402
from tests.conftest import MINI  # noqa: E402

RETRY_S = 120.0  # a shard's own window: far longer than any deadline below
LIMITS = Limits(call_timeout_ms=60000, max_deadline_ms=120000)
READER = Principal("alice", frozenset({"security"}))


class Handle:
    """Serve's handle to one shard, standing in: `method.remote(*args).result(timeout_s)` runs
    the method on `shard` (None: the shard is down, every try fails as a dead replica does),
    recording each try's window and the cancelled tries."""

    def __init__(self, shard: LocalShard | None) -> None:
        self.shard, self.windows, self.cancelled = shard, [], 0
        self._lock = threading.Lock()

    def __getattr__(self, method: str):
        handle = self

        class Response:
            def __init__(self, args) -> None:
                self.args = args

            def result(self, timeout_s=None):
                with handle._lock:
                    handle.windows.append(timeout_s)
                if handle.shard is None:
                    raise ray_exceptions.ActorDiedError()
                return getattr(handle.shard, method)(*self.args)

            def cancel(self) -> None:
                with handle._lock:
                    handle.cancelled += 1

        class Method:
            def remote(self, *args):
                return Response(args)

        return Method()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, embedder):
    """The mini corpus at 2 shards, as (index folder, shards in process, resources)."""
    index = tmp_path_factory.mktemp("mini-2-shards-deadline")
    build_shards([MINI], index, embedder, 2)
    resources = Resources.open(Settings())
    _, snapshots = load_cluster(index, embedder)
    shards = [LocalShard(s.chunks, s.bm25, s.dense, s.catalog, resources.name_keys) for s in snapshots]
    yield index, shards, resources
    resources.shutdown()
    for s in snapshots:
        s.close()


def front(cluster, embedder, handles):
    index, _, resources = cluster
    remote = [RemoteShard(h, i, retry_s=RETRY_S) for i, h in enumerate(handles)]
    return open_sharded(index, remote, embedder, resources, Settings(), resources.shard_calls, LIMITS, date(2025, 11, 1))


def test_every_shard_call_of_a_question_is_bounded_by_its_deadline(cluster, embedder):
    handles = [Handle(s) for s in cluster[1]]
    view = front(cluster, embedder, handles)
    try:
        result = view.query("How do I rotate the signing keys?", READER, deadline_ms=20000)
    finally:
        view.close()
    assert result.status in ("answer_context", "evidence_gap") and result.attempts
    windows = [w for h in handles for w in h.windows]
    # reading the question, the routes, annotations and links: dozens of calls, on several threads
    assert len(windows) >= 10, windows
    assert all(w is not None and w <= 20.0 for w in windows), max(windows)


def test_with_a_shard_down_a_short_question_fails_within_its_deadline_not_the_shards_window(cluster, embedder):
    live, dead = Handle(cluster[1][0]), Handle(None)
    view = front(cluster, embedder, [live, dead])
    try:
        with pytest.raises(RetrievalUnavailable, match="shard 01 has no live replica") as err:
            view.query("How do I rotate the signing keys?", READER, deadline_ms=1500)
    finally:
        view.close()
    assert err.value.retryable
    assert dead.windows and all(w <= 1.5 for w in dead.windows + live.windows), (max(dead.windows), max(live.windows))


def test_a_search_outside_any_question_keeps_the_shards_own_window(cluster, embedder):
    handle = Handle(cluster[1][0])
    shard = RemoteShard(handle, 0, retry_s=RETRY_S)
    shard.dense(embedder.encode_query("signing keys"), READER.access_scope(), 3, NO_FILTERS)
    assert handle.windows and handle.windows[0] > 60.0


def test_a_call_made_as_the_deadline_ends_still_gets_one_short_try(cluster, embedder):
    dead = Handle(None)
    with question_scope(0.0), pytest.raises(RetrievalUnavailable, match=f"within {MIN_CALL_S:g} s"):
        RemoteShard(dead, 1, retry_s=RETRY_S).describe()
    assert dead.windows and dead.windows[0] > 0 and max(dead.windows) <= MIN_CALL_S


def test_a_try_that_runs_out_of_its_window_is_cancelled_on_the_replica():
    class Slow(Handle):
        def __getattr__(self, method):
            handle = self

            class Response:
                def result(self, timeout_s=None):
                    handle.windows.append(timeout_s)
                    raise TimeoutError()

                def cancel(self):
                    handle.cancelled += 1

            class Method:
                def remote(self, *args):
                    return Response()

            return Method()

    slow = Slow(None)
    with question_scope(0.3), pytest.raises(RetrievalUnavailable):
        RemoteShard(slow, 0, retry_s=RETRY_S).describe()
    assert slow.cancelled == len(slow.windows) >= 1


def test_fan_out_threads_and_retriever_threads_see_the_question_scope():
    from retrieval.calls import CallPool
    from retrieval.scatter import each

    with ThreadPoolExecutor(4) as threads:
        pool = CallPool(2, threads=threads)
        with question_scope(5.0):
            seen = each([1, 2, 3], lambda _: (time_left(), threading.current_thread().name), threads)
            submitted = pool.submit(time_left).result()
        after = pool.submit(time_left).result()
    assert len({name for _, name in seen}) >= 1 and all(left is not None and 0 < left <= 5.0 for left, _ in seen)
    assert submitted is not None and 0 < submitted <= 5.0
    assert after is None  # a question's deadline does not outlive it on the pool's threads
