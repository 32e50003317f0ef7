"""The runtime: what one process serves an index with, opened once from settings and closed
once. It owns the threads and caches every view uses (routes/service/resources.py), the
served generations (each an index view, routes/service/view.py), the writer of the index's
write-ahead log when this process holds it, and the reloader that follows CURRENT. The
edges never see it: they receive a `Service` (routes/service/service.py) built over it.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from retrieval.errors import Conflict, RetrievalError
from routes.service.generations import Generations, View
from routes.service.reload import Reloader, serves_from
from routes.service.resources import Resources
from routes.service.settings import Settings
from routes.service.sharded_writes import NO_COMPACTION, ShardedWriter
from routes.service.view import IndexView, open_view
from routes.service.writes import Writer

log = logging.getLogger("quarry.runtime")
READ_ONLY = "this server serves its index read-only (it does not own the index's write-ahead log)"


class Runtime:
    """Generations, writer and reloader of one index in one process (see the module docstring)."""

    def __init__(self, settings: Settings, view: View | None = None, own_view: bool = False) -> None:
        """`view`, when given, is served first and stays its caller's to close unless
        `own_view`; without it `start` (a server) or `open_runtime` (a command) loads the
        index of `settings`."""
        self.settings = settings
        self.resources = Resources.open(settings)
        self.generations = Generations(view, owned=own_view, grace_s=settings.reload_grace_s)
        self.writer: Writer | ShardedWriter | None = None  # a front's writes go to the shards' logs
        self.writer_error: RetrievalError | None = None  # why this process could not take the log
        self.reloader: Reloader | None = None

    @contextmanager
    def lease(self) -> Iterator[View]:
        """The view current now, held (never closed under its user) until the block ends."""
        with self.generations.lease() as generation:
            yield generation.engine

    def load(self) -> None:
        """Serve the index of the settings when no view is served yet (blocking: loads models)."""
        if self.generations.current is None:
            self.generations.install(self.open_view(self.settings.index_dir), owned=True)

    def owns_index(self) -> bool:
        """Whether the served view is the settings' index (only then are its log and CURRENT followed)."""
        served = self.generations.current
        return served is not None and serves_from(served.engine, self.settings.index_dir)

    def reopen(self) -> IndexView:
        """A view over the index's CURRENT with the models the served one has loaded."""
        served = self.generations.current
        assert served is not None
        return self.open_view(self.settings.index_dir, embedder=served.engine.embedder, warm=False,
                              answer=served.engine.answer)

    def open_view(self, index_dir: Path, **options: Any) -> IndexView:
        """A view of `index_dir` on this runtime's threads and caches (options: `open_view`'s)."""
        return open_view(index_dir, settings=self.settings, resources=self.resources, **options)

    def open_writer(self, rebase: bool = True) -> Writer | None:
        """Own the index's write-ahead log; the writer, or None. Another process holding it
        leaves this one read-only (its writes answer that process's Conflict; a reloader
        tries again at each poll and meanwhile replays that process's records). A write that
        landed before the log was taken is served before the next request (`rebase`)."""
        settings = self.settings
        try:
            writer = Writer(settings.index_dir, self.generations, settings.write_batch_max,
                            compact_after=settings.compact_after,
                            opener=None if settings.reload_interval_s > 0 else self.reopen,
                            max_key_bytes=settings.write_max_key_bytes)
        except RetrievalError as e:
            if self.writer_error is None:
                log.warning("this server serves %s read-only: %s", settings.index_dir, e.message)
            self.writer_error = e
            return None
        self.writer_error, self.writer = None, writer
        current = self.generations.current
        if current is not None:
            node = current.node()
            writer.start_at(int((node.base or node.snapshot).manifest.get("wal_seq", 0)))
            if rebase and writer.behind(node):
                writer.rebase(self.reopen)
        return writer

    def writable(self) -> Writer | ShardedWriter:
        """The writer, or the Conflict that says why this process has none."""
        if self.writer is None:
            raise self.writer_error or Conflict(READ_ONLY)
        return self.writer

    def compactable(self) -> Writer:
        """The writer of one node's log (a sharded index's shards have no compaction yet)."""
        writer = self.writable()
        if not isinstance(writer, Writer):
            raise Conflict(NO_COMPACTION)
        return writer

    def start_reloader(self, on_outcome: Callable[[str], None] | None = None) -> None:
        """Follow CURRENT every `reload_interval_s` (on the running event loop)."""
        if self.settings.reload_interval_s > 0 and self.owns_index():
            self.reloader = Reloader(self.generations, self.settings, self.settings.index_dir, on_outcome,
                                     opener=lambda index_dir, serving: self.open_view(
                                         index_dir, embedder=serving.embedder, warm=False, answer=serving.answer),
                                     writer=self.writer, acquire_writer=self.open_writer)
            self.reloader.start()

    async def stop_reloader(self) -> None:
        if self.reloader is not None:
            await self.reloader.stop()
            self.reloader = None

    def close(self) -> None:
        """Close the served views (each once its last user is done), the writer, then the
        threads and caches they used. Idempotent."""
        self.generations.close()
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close()
        if self.generations.retired:  # still leased past the close timeout: its calls may still need the threads
            log.warning("%d generations still in use at close; their threads are left to end with the process",
                        len(self.generations.retired))
            return
        self.resources.shutdown()


def open_runtime(settings: Settings, index_dir: Path | None = None, writable: bool = False, **view_options: Any
                 ) -> Runtime:
    """A runtime for a command: the view of `index_dir` (default: the settings') loaded now.
    `writable` takes the write-ahead log first (another holder's Conflict costs no model
    load). `view_options` go to `open_view` (warm, plugins, embedder, policies, answer, limits, today)."""
    index = index_dir or settings.index_dir
    runtime = Runtime(settings)
    try:
        writer = runtime.writer = Writer(index, runtime.generations, settings.write_batch_max) if writable else None
        view = runtime.open_view(index, **view_options)
        runtime.generations.install(view, owned=True)
        if writer is not None:
            writer.start_at(int((view.base or view.snapshot).manifest.get("wal_seq", 0)))
    except BaseException:
        runtime.close()
        raise
    return runtime
