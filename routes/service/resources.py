"""The threads, caches and extraction workers a process serves with: made by the runtime (or by a view opened
alone), sized by the settings, shut down once; the core and the indexes only use them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from indexes.dense_index import WALKERS
from indexes.extract.sandbox import Budget, ExtractorPool
from indexes.fair_slots import FairSlots
from retrieval.calls import CallPool, threads_needed
from retrieval.entities import key_memo
from retrieval.lru import Lru
from routes.service.settings import Settings


@dataclass(frozen=True, eq=False)
class Resources:
    """The threads and caches every view of one runtime shares (or of one view opened alone,
    which lets them go when its last derived view closes)."""

    calls: ThreadPoolExecutor  # retriever calls: CallPool's workers and spare threads
    side: ThreadPoolExecutor  # the dense half of hybrid calls, beside the BM25 half
    profiles: ThreadPoolExecutor  # table profile builds, apart from the retriever threads
    watchdogs: ThreadPoolExecutor  # one per SQL statement that may run at once
    sql_slots: FairSlots  # the SQL statements that may run at once across every view's runner, shared fairly by callers
    walkers: ThreadPoolExecutor  # the graph walks of one dense search
    name_keys: Lru[str, str]  # entity name keys, kept across the entity index builds of every view
    call_pool: CallPool  # at most `workers` retriever calls at once on `calls`, whichever view makes them
    extractors: ExtractorPool  # worker processes for PUT file bodies (started on first use)
    shard_calls: ThreadPoolExecutor  # a cluster front's concurrent calls to its shards (threads start on first use)

    @classmethod
    def open(cls, settings: Settings) -> Resources:
        calls = ThreadPoolExecutor(threads_needed(settings.workers, settings.spare_workers), thread_name_prefix="quarry-retrieve")
        return cls(
            calls,
            ThreadPoolExecutor(settings.side_workers, thread_name_prefix="quarry-dense"),
            ThreadPoolExecutor(settings.profile_workers, thread_name_prefix="quarry-profile"),
            ThreadPoolExecutor(settings.sql_max_concurrent, thread_name_prefix="quarry-sql-watchdog"),
            FairSlots(settings.sql_max_concurrent),
            ThreadPoolExecutor(WALKERS, thread_name_prefix="quarry-dense"),
            key_memo(),
            CallPool(settings.workers, settings.spare_workers, threads=calls),
            extraction_pool(settings),
            ThreadPoolExecutor(settings.shard_workers, thread_name_prefix="quarry-shards"),
        )

    def shutdown(self) -> None:
        """Cancel what is queued and let the threads end once idle (none is waited for); stop
        the extraction workers."""
        for pool in (self.calls, self.side, self.profiles, self.watchdogs, self.walkers, self.shard_calls):
            pool.shutdown(wait=False, cancel_futures=True)
        self.extractors.close()


def extraction_pool(settings: Settings, workers: int | None = None) -> ExtractorPool:
    """The extraction workers the settings describe (`workers` overrides their number)."""
    budget = Budget(settings.extract_timeout_s, settings.extract_memory_mb * 1024 * 1024)
    return ExtractorPool(workers or settings.extract_workers, settings.extract_per_key, budget, ocr=settings.ocr_scans)
