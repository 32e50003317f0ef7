"""The shard deployments of a sharded index on Ray Serve, and the front's handles to them.

Each shard is its own Serve application, `quarry-shard-NN`, of `replicas` replicas of
`ShardReplica` (routes/cluster/replica.py), at most one per node (`max_replicas_per_node`),
so losing one node costs a shard one replica, never all. A replica asks for no CPU of its
own (`num_cpus=0`): it is idle but for the calls it serves. Every node must see the index
directory at the same path (a shared file system, or the same copy on each machine).
"""

from __future__ import annotations

from pathlib import Path

from ray import serve

from indexes.shards import read_cluster
from retrieval.errors import SnapshotError
from routes.cluster.remote import RemoteShard
from routes.cluster.replica import ShardReplica
from routes.service.process import PROCESS_ENV

# A replica serves its calls on several threads, each a few milliseconds of numpy and FAISS:
# one OpenMP thread each, waiting passively, or the pools of every replica on a node spin
# against one another (on 2 cores a call then took seconds). Its replies (up to `depth` hits
# with their text, a few hundred KB) go back inline in the call's reply: past Ray's default
# of 100 KB they went through the object store, and under 8 concurrent clients calls stalled
# for 5 to 13 s (0.7-1.6 questions/s instead of about 20).
REPLY_INLINE_BYTES = 16 << 20
REPLICA_ENV = {**PROCESS_ENV, "OMP_NUM_THREADS": "1", "RAY_max_direct_call_object_size": str(REPLY_INLINE_BYTES)}

APP_PREFIX = "quarry-shard-"


def shard_app_name(shard: int) -> str:
    return f"{APP_PREFIX}{shard:02d}"


def deploy_shards(index_dir: Path, replicas: int = 2, retry_s: float = 10.0, model: str | None = None,
                  max_ongoing: int = 32, model_id: str | None = None) -> list[RemoteShard]:
    """Run one Serve application per shard of the sharded index at `index_dir` (on the Ray
    cluster this process is connected to) and return the front's handles, in shard order.
    A replica takes up to `max_ongoing` calls at once (they run on its threads; each is a
    few milliseconds of index work), so a front's concurrent questions queue in the replica
    rather than in Serve's router, which backs off when every replica is full. `model_id`, the
    front's embedding model, must be the one the index was built with (the front encodes the
    questions the shards' vectors are compared with)."""
    manifest = read_cluster(index_dir)
    if model_id is not None and manifest["model"]["id"] != model_id:
        raise SnapshotError(f"the sharded index was built with {manifest['model']['id']}, not the front's {model_id}; "
                            "serve it with the same model or ingest again")
    shards: list[RemoteShard] = []
    try:
        for shard in range(manifest["shards"]):
            deployment = serve.deployment(name=f"shard-{shard:02d}", num_replicas=replicas, max_replicas_per_node=1,
                                          max_ongoing_requests=max_ongoing,
                                          ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": REPLICA_ENV}}
                                          )(ShardReplica)
            handle = serve.run(deployment.bind(str(index_dir.resolve()), manifest, shard, model),
                               name=shard_app_name(shard), route_prefix=None)
            shards.append(RemoteShard(handle, shard, retry_s))
    except BaseException:
        for shard in range(len(shards) + 1):  # the ones deployed, and the one that failed
            serve.delete(shard_app_name(shard))
        raise
    return shards
