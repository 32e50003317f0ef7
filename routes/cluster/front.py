"""A front over a sharded index on Ray: the same HTTP API, MCP endpoint, tools and auth as one
node (routes/server/app.py), answered by the loop over the shards' Serve applications.

A front is a process, not a Serve deployment: it connects to the Ray cluster as a driver,
holds the handles of the shard applications, the embedding model (a question is encoded once,
here), the tables shard's catalog and the loop, and serves the app under uvicorn. Run as
many as the traffic needs, on any machines that see the index folder, behind any HTTP load
balancer: a front keeps no state of its own (keys come from the keys file, documents and
their ACLs from the shards), so every front answers alike.

The first front deploys the shard applications (`--replicas` each, at most one per node);
others attach to them (`--attach`) after checking that they serve the snapshots
`cluster.json` names now. A shard with no live replica makes a request a retryable 503
`retrieval_unavailable` naming it, and /readyz says the same.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

from ray import serve

from indexes.shards import read_cluster
from retrieval.errors import SnapshotError
from routes.cluster.app import deploy_shards, shard_app_name
from routes.cluster.remote import RemoteShard
from routes.service.runtime import Runtime
from routes.service.settings import Settings
from routes.service.sharded import open_sharded
from routes.service.sharded_writes import ShardedWriter

log = logging.getLogger("quarry.cluster")


def attach_shards(index_dir: Path, retry_s: float = 10.0) -> list[RemoteShard]:
    """Handles to the shard applications another front deployed, each checked to serve the
    snapshot the cluster manifest names (an ingest since then needs a new deployment)."""
    manifest = read_cluster(index_dir)
    shards = []
    for i in range(manifest["shards"]):
        shard = RemoteShard(serve.get_app_handle(shard_app_name(i)), i, retry_s)
        served, wanted = shard.describe()["snapshot"], manifest["members"][i]["snapshot"]
        if served != wanted:
            raise SnapshotError(f"shard {i:02d} serves snapshot {served}, not {wanted} as {index_dir}/cluster.json names; "
                                "start a front without --attach to deploy the new build")
        shards.append(shard)
    return shards


def open_front(settings: Settings, replicas: int = 2, retry_s: float = 10.0, attach: bool = False) -> Runtime:
    """A runtime serving the sharded index of `settings.index_dir` from the Ray cluster this
    process is connected to: the model loaded and warmed, the shards deployed (or attached
    to), the sharded view installed. Its caller closes it (the app does, when it stops)."""
    embedder = settings.embedder()
    embedder.load().encode_query("warm up")
    embedder.clear_cache()
    index_dir = settings.index_dir
    model = str(settings.model_path) if settings.model_path else None
    shards = attach_shards(index_dir, retry_s) if attach else deploy_shards(
        index_dir, replicas, retry_s, model=model, model_id=embedder.model_id)
    runtime = Runtime(settings)
    try:
        view = open_sharded(index_dir, shards, embedder, runtime.resources, settings, runtime.resources.shard_calls)
    except BaseException:
        runtime.close()
        raise
    runtime.generations.install(view, owned=True)
    runtime.writer = ShardedWriter(runtime.generations, settings.write_batch_max, settings.write_max_key_bytes)
    return runtime


def front_settings(settings: Settings) -> Settings:
    """A front's settings: its own audit database unless one is named (several fronts share
    the index folder, and one DuckDB file takes one writer)."""
    if settings.audit_path is not None:
        return settings
    name = f"audit-{socket.gethostname()}-{settings.port}.duckdb"
    return settings.model_copy(update={"audit_path": settings.index_dir / name})


def serve_front(settings: Settings, address: str, replicas: int = 2, retry_s: float = 10.0, attach: bool = False) -> None:
    """`quarry cluster serve`: connect to the Ray cluster at `address`, open the front and serve
    it under uvicorn until stopped (keys and the cluster are checked before it listens)."""
    import ray

    from routes.server.app import create_app
    from routes.server.serve import require_keys, run_app

    settings = front_settings(settings)
    keys = require_keys(settings)
    read_cluster(settings.index_dir)  # a folder that is no sharded index stops here, before Ray
    ray.init(address=address, logging_level=logging.WARNING)
    try:
        run_app(create_app(settings, keys=keys, runtime=open_front(settings, replicas, retry_s, attach)), settings)
    finally:
        ray.shutdown()
