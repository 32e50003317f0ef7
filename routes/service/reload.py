"""Hot reload: `serve` follows INDEX/CURRENT without a restart.

A watcher task on the event loop reads CURRENT every `reload_interval_s` seconds. When it
names a snapshot other than the one last seen, a thread opens a new engine over it (the
same settings, tuned policies and plug-ins, and the embedding and answer models already
loaded, so a snapshot of another embedding model is refused by its manifest check) and installs it as a new
generation (routes/service/generations.py): requests that started before keep their engine until
they finish, the ones after get the new one. A snapshot that fails to load (a broken file, a
wrong model or format, a plug-in that refuses it) is logged and counted, the serving
generation stays, `/readyz` stays ready, and that snapshot is not tried again until CURRENT
names another one (or the server restarts).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any, Callable

from indexes.live import wal_path
from indexes.snapshot_load import current_snapshot_path
from indexes.wal import log_end
from retrieval.errors import SnapshotError
from routes.service.view import IndexView, open_view
from routes.service.generations import Generations, View
from routes.service.settings import Settings

log = logging.getLogger("quarry.reload")

Opener = Callable[[Path, IndexView], IndexView]  # (index directory, serving engine) -> a new engine over CURRENT


def _log_stat(index_dir: Path) -> tuple[int, int] | None:
    try:
        st = wal_path(index_dir).stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def current_name(index_dir: Path) -> str | None:
    """The snapshot CURRENT names now, or None when there is none readable."""
    try:
        return current_snapshot_path(index_dir).name
    except SnapshotError:
        return None


def serves_from(engine: View, index_dir: Path) -> bool:
    """Whether `engine` is one node's view of `index_dir` (only then is its CURRENT followed
    and its log written: a sharded index's shards own theirs)."""
    try:
        return isinstance(engine, IndexView) and engine.index_dir.samefile(index_dir)
    except OSError:
        return False


class Reloader:
    """Follows CURRENT of `index_dir` and installs each new snapshot into `generations`."""

    def __init__(self, generations: Generations, settings: Settings, index_dir: Path,
                 on_outcome: Callable[[str], None] | None = None, opener: Opener | None = None,
                 writer: Any = None, acquire_writer: Callable[[], Any] | None = None) -> None:
        self.generations = generations
        self.writer = writer  # routes.service.writes.Writer: a reload replays its log under its lock
        self.acquire_writer = acquire_writer  # tries to take the log when this server does not hold it
        self._log_seen: tuple[int, int] | None = _log_stat(index_dir)
        self.settings = settings
        self.index_dir = index_dir
        self.interval_s = settings.reload_interval_s
        self.on_outcome = on_outcome or (lambda outcome: None)
        self.opener = opener or self._open
        served = generations.current
        self.seen = served.snapshot if served is not None else None  # the CURRENT content last acted on
        self.failed: dict[str, str] | None = None  # the snapshot last refused, and why
        self._lock = threading.Lock()
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self._checking = asyncio.Lock()

    def _open(self, index_dir: Path, serving: IndexView) -> IndexView:
        # The models already in memory (and their caches, keyed by the text they read) serve on.
        return open_view(index_dir, embedder=serving.embedder, settings=self.settings, warm=False,
                           answer=serving.answer)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="quarry-reload")

    async def stop(self) -> None:
        """Stop watching. A load still running finishes on its thread and closes what it built."""
        with self._lock:
            self._stopped = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _watch(self) -> None:
        while not self._stopped:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check()
            except Exception:  # noqa: BLE001 - the watcher outlives any one failure
                log.exception("the reload watcher failed; it keeps watching")

    async def check(self) -> bool:
        """One poll: install the snapshot CURRENT names if it is new; True when one was installed.
        Polls run one at a time: a caller that asks for one (after a compaction) returns once
        the poll already loading the same snapshot has installed it."""
        async with self._checking:
            return await self._check()

    async def _check(self) -> bool:
        if self.writer is None and self.acquire_writer is not None:
            self.writer = await asyncio.to_thread(self.acquire_writer)  # the log's owner may have let it go
        name = await asyncio.to_thread(current_name, self.index_dir)
        if name is None:
            return False
        if name == self.seen:
            return await self._follow_log()
        self.seen = name
        serving = self.generations.current
        if serving is None:
            return False
        log.info("CURRENT names snapshot %s; loading it beside generation %d (%s)", name, serving.number, serving.snapshot)
        try:
            installed = await asyncio.to_thread(self._load_and_install, serving.node())
        except Exception as e:  # noqa: BLE001 - a snapshot that cannot serve leaves the old one serving
            message = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
            self.failed = {"snapshot": name, "error": message}
            self.on_outcome("failed")
            log.error("snapshot %s cannot be served, generation %d (%s) keeps serving: %s", name, serving.number,
                      serving.snapshot, message)
            return False
        if installed is None:  # the server stopped while it loaded
            return False
        self.seen = installed  # CURRENT may have moved on while it loaded
        self.failed = None
        self.on_outcome("switched")
        return True

    async def _follow_log(self) -> bool:
        """Without the log (another process writes this index): reload when the log holds
        records the served view lacks, so another writer's deletes and revocations reach this
        server within one poll."""
        if self.writer is not None:
            return False  # this process writes: its views already hold every record
        stat = await asyncio.to_thread(_log_stat, self.index_dir)
        if stat == self._log_seen:
            return False
        serving = self.generations.current
        if serving is None:
            return False
        end = await asyncio.to_thread(log_end, wal_path(self.index_dir))
        self._log_seen = stat
        if end <= serving.node().live.seq:
            return False
        log.info("the write-ahead log holds records through %d, generation %d serves %d; reloading", end,
                 serving.number, serving.node().live.seq)
        try:
            installed = await asyncio.to_thread(self._load_and_install, serving.node())
        except Exception as e:  # noqa: BLE001 - the served view stays; the next poll tries again
            self._log_seen = None
            log.error("replaying the write-ahead log failed, generation %d keeps serving: %s", serving.number,
                      getattr(e, "message", None) or type(e).__name__)
            self.on_outcome("failed")
            return False
        if installed is not None:
            self.on_outcome("switched")
        return installed is not None

    def _load_and_install(self, serving: IndexView) -> str | None:
        """On a worker thread: open the new engine and install it, unless the server stopped
        meanwhile (then nobody would serve or close it: it is closed here)."""
        if self.writer is None:
            return self._open_and_install(serving)
        with self.writer.lock:  # no write may land between the log's replay and the install
            name = self._open_and_install(serving)
            if name is not None:
                current = self.generations.current
                if current is not None:
                    self.writer.fold(int(current.node().snapshot.manifest.get("wal_seq", 0)))
            return name

    def _open_and_install(self, serving: IndexView) -> str | None:
        engine = self.opener(self.index_dir, serving)
        with self._lock:
            if not self._stopped:
                self.generations.install(engine, owned=True)
                return engine.snapshot.path.name
        engine.close()
        return None

    def describe(self) -> dict[str, Any]:
        """What /readyz shows an admin key about reloading."""
        return {"interval_s": self.interval_s, "failed": self.failed}
