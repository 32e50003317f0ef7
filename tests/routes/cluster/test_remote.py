"""The front's handle to a shard: what it retries, what it never retries, and what it raises
when no replica answers, over a stand-in for Serve's handle (the real one is exercised on a
real cluster in tests/system/test_cluster.py)."""

from __future__ import annotations

import pytest

ray_exceptions = pytest.importorskip("ray.exceptions", reason="the cluster extra is not installed")

from retrieval.errors import InvalidRequest, RetrievalUnavailable, ServerFault  # noqa: E402
from routes.cluster.remote import RemoteShard  # noqa: E402


class Handle:
    """Answers each `method.remote(...).result()` with the next of `outcomes` (raised when an
    exception), counting the calls sent."""

    def __init__(self, *outcomes) -> None:
        self.outcomes, self.sent = list(outcomes), 0

    def __getattr__(self, method: str):
        handle = self

        class Method:
            def remote(self, *args):
                handle.sent += 1
                outcome = handle.outcomes.pop(0) if len(handle.outcomes) > 1 else handle.outcomes[0]

                class Response:
                    def result(self, timeout_s=None):
                        if isinstance(outcome, BaseException):
                            raise outcome
                        return outcome

                return Response()

        return Method()


def task_error(cause: BaseException):
    return ray_exceptions.RayTaskError("describe", "Traceback: ...", cause)


def test_a_call_a_dead_replica_dropped_is_sent_again_and_answers():
    handle = Handle(ray_exceptions.ActorDiedError(), {"shard": 0})
    shard = RemoteShard(handle, 0, retry_s=30.0)
    assert shard.describe() == {"shard": 0}
    assert (handle.sent, shard.retried) == (2, 1)
    assert shard.stats() == {"calls": 1, "retried": 1, "unavailable": 0}


def test_the_shards_own_typed_error_is_the_answer_and_is_not_retried():
    handle = Handle(task_error(InvalidRequest("bad filter")))
    shard = RemoteShard(handle, 3, retry_s=30.0)
    with pytest.raises(InvalidRequest, match="bad filter"):
        shard.describe()
    assert (handle.sent, shard.retried) == (1, 0)


def test_a_bug_in_the_shard_is_a_server_fault_not_a_retry_or_unavailability():
    handle = Handle(task_error(ValueError("boom")))
    with pytest.raises(ServerFault, match="shard 02 failed: ValueError"):
        RemoteShard(handle, 2, retry_s=30.0).describe()
    assert handle.sent == 1


def test_no_live_replica_within_the_deadline_is_a_typed_retryable_unavailable_naming_the_shard():
    handle = Handle(ray_exceptions.ActorDiedError())
    shard = RemoteShard(handle, 1, retry_s=0.3)
    with pytest.raises(RetrievalUnavailable, match="shard 01 has no live replica") as err:
        shard.describe()
    assert err.value.retryable and handle.sent >= 2 and shard.retried == handle.sent - 1
    assert shard.stats() == {"calls": 1, "retried": handle.sent - 1, "unavailable": 1}


def _calls(klass: type) -> dict[str, list[str]]:
    """A class's public methods and their parameter names."""
    import inspect

    return {name: list(inspect.signature(fn).parameters)[1:] for name, fn in vars(klass).items()
            if callable(fn) and not name.startswith("_")}


def test_the_front_handle_and_the_replica_forward_exactly_the_shard_protocol():
    from retrieval.shard import SHARD_CALLS, ShardService
    from routes.cluster.replica import ShardReplica

    protocol = {name: params for klass in ShardService.__mro__ if klass.__dict__.get("_is_protocol")
                for name, params in _calls(klass).items()}
    assert set(protocol) == SHARD_CALLS
    replica = _calls(ShardReplica)
    remote = {name: params for name, params in _calls(RemoteShard).items() if name != "stats"}  # the handle's own counters
    assert replica == protocol, set(replica) ^ set(protocol)
    assert remote == protocol, set(remote) ^ set(protocol)
