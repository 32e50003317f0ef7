"""Serving a sharded index on Ray Serve: shard replicas and the front's handles to them."""
