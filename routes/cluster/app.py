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
from routes.cluster.remote import RemoteShard
from routes.cluster.replica import ShardReplica

APP_PREFIX = "quarry-shard-"


def shard_app_name(shard: int) -> str:
    return f"{APP_PREFIX}{shard:02d}"


def deploy_shards(index_dir: Path, replicas: int = 2, retry_s: float = 10.0, model: str | None = None,
                  max_ongoing: int = 32) -> list[RemoteShard]:
    """Run one Serve application per shard of the sharded index at `index_dir` (on the Ray
    cluster this process is connected to) and return the front's handles, in shard order.
    A replica takes up to `max_ongoing` calls at once (they run on its threads; each is a
    few milliseconds of index work), so a front's concurrent questions queue in the replica
    rather than in Serve's router, which backs off when every replica is full."""
    manifest = read_cluster(index_dir)
    shards = []
    for shard in range(manifest["shards"]):
        deployment = serve.deployment(name=f"shard-{shard:02d}", num_replicas=replicas, max_replicas_per_node=1,
                                      max_ongoing_requests=max_ongoing, ray_actor_options={"num_cpus": 0})(ShardReplica)
        handle = serve.run(deployment.bind(str(index_dir.resolve()), shard, model), name=shard_app_name(shard),
                           route_prefix=None)
        shards.append(RemoteShard(handle, shard, retry_s))
    return shards
