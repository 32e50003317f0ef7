"""File extraction off the serving path: a bounded pool of worker processes.

A hostile file (a page of angle brackets, a zip that lies about its sizes, a Word body of
millions of empty paragraphs, a PDF holding one endless word) costs its extractor time and
memory that grow faster than its bytes. Parsing it in the server's own process held the GIL
and PDFium's one lock for every other caller, and its memory was the server's. Here each
file is extracted in a worker process (indexes/extract/worker.py) that:

- has its own memory limit (its data segment: past it the extraction is a `too_large` bad
  file and the server's memory is untouched);
- is killed when the file's time budget runs out (a `too_slow` bad file), and replaced by a
  fresh worker on the next file;
- runs at a lower priority, and holds none of the server's locks or threads but the one
  waiting for its answer.

At most `workers` files are extracted at once, as many more wait, and one owner (a principal,
for the server) has at most `per_owner` of them in the pool; an owner over its share, a file
past the waiting ones, or one that finds no free worker within its wait, gets a retryable
`RateLimited`, decided before any work. So files hold at most 2 x `workers` request threads. The same pool
serves a live PUT and an ingest (one worker, files in order).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import date
from typing import IO, Any, cast

from indexes.extract.grids import Grid
from indexes.extract.record import MAX_TEXT_CHARS, BadFile, Extracted
from indexes.extract.worker import HEADER, REPLY
from retrieval.errors import RateLimited
from retrieval.types import Region

MAX_REPLY_BYTES = 256 * 1024 * 1024  # a reply past this is no extraction of a bounded file


@dataclass(frozen=True)
class Budget:
    """What one file may cost its extraction."""

    seconds: float = 20.0  # wall-clock time, the worker killed past it
    memory_bytes: int = 512 * 1024 * 1024  # the worker's data segment
    max_chars: int = MAX_TEXT_CHARS  # characters of extracted text


def extracted_of(record: dict[str, Any]) -> Extracted:
    """A worker's JSON reply as an Extracted."""
    regions = tuple(Region(int(start), int(end), page, tuple(section)) for start, end, page, section in record["regions"])
    return Extracted(text=record["text"], regions=regions, title=record["title"],
                     date=date.fromisoformat(record["date"]) if record["date"] else None,
                     metadata=dict(record["metadata"]), pages=record["pages"],
                     tables=tuple(Grid.from_json(g) for g in record.get("tables", ())))


class _Worker:
    """One worker process, started on first use and again after it was killed."""

    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes = memory_bytes
        self.proc: subprocess.Popen[bytes] | None = None

    def _started(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
            self.proc = subprocess.Popen([sys.executable, "-m", "indexes.extract.worker", str(self.memory_bytes)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         env=env, close_fds=True, start_new_session=True)
        return self.proc

    def run(self, data: bytes, kind: str, budget: Budget, ocr: bool = False) -> Extracted:
        proc = self._started()
        deadline = time.monotonic() + budget.seconds
        meta = json.dumps({"kind": kind, "max_chars": budget.max_chars, "cpu_s": budget.seconds, "ocr": ocr}).encode()
        try:
            stdin = cast(IO[bytes], proc.stdin)
            stdin.write(HEADER.pack(len(meta), len(data)) + meta)
            stdin.write(data)
            stdin.flush()
            size = REPLY.unpack(self._read(REPLY.size, deadline))[0]
            if size > MAX_REPLY_BYTES:
                raise OSError("reply too large")
            reply = json.loads(self._read(size, deadline))
        except TimeoutError:
            self.kill()
            raise BadFile("too_slow", f"extracting it takes longer than {budget.seconds:g} s") from None
        except (OSError, ValueError):
            code = self.kill()
            raise BadFile("too_large", f"the extraction stopped ({_exit(code)}): the file needs more than the "
                                       f"{budget.memory_bytes >> 20} MiB or {budget.seconds:g} s an extraction may use, "
                                       "or crashes its parser") from None
        if "bad" in reply:
            raise BadFile(reply["bad"]["reason"], reply["bad"]["message"])
        return extracted_of(reply["ok"])

    def _read(self, size: int, deadline: float) -> bytes:
        """`size` bytes of the reply, waiting at most until `deadline` (TimeoutError)."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        parts: list[bytes] = []
        left = size
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise OSError("the worker closed its output")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def kill(self) -> int | None:
        """Stop the process (the next file starts another); its exit code."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        proc.kill()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        return proc.wait()


def _exit(code: int | None) -> str:
    if code is None:
        return "no process"
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


@dataclass
class ExtractorPool:
    """At most `workers` extractions at once, `per_owner` of one owner (see the module docstring)."""

    workers: int = 2
    per_owner: int = 2
    budget: Budget = Budget()
    ocr: bool = False  # a PDF page without a text layer is read by OCR (indexes/extract/ocr.py), within the budget
    _idle: list[_Worker] = field(default_factory=list, repr=False)
    _owners: dict[str, int] = field(default_factory=dict, repr=False)
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _closed: bool = field(default=False, repr=False)
    _waiting: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        self._idle = [_Worker(self.budget.memory_bytes) for _ in range(self.workers)]
        self._all = list(self._idle)
        weakref.finalize(self, _kill_all, self._all)

    def extract(self, data: bytes, kind: str, owner: str | None = None, max_chars: int | None = None,
                wait_s: float | None = None) -> Extracted:
        """The file's extraction within the budget (`max_chars` may lower its text bound);
        raises BadFile for a bad, too large or too slow file, and RateLimited when `owner`
        already has `per_owner` files in the pool or no worker frees up within `wait_s`
        (default: the budget's seconds). None as owner is the local operator: no share."""
        budget = self.budget if max_chars is None else Budget(self.budget.seconds, self.budget.memory_bytes,
                                                              min(max_chars, self.budget.max_chars))
        with self._cond:
            if owner is not None:
                if self._owners.get(owner, 0) >= self.per_owner:
                    raise RateLimited(f"this key already has {self.per_owner} files being extracted; retry once they are "
                                      "answered", retry_after=1)
                self._owners[owner] = self._owners.get(owner, 0) + 1
        try:
            worker = self._take(self.budget.seconds if wait_s is None else wait_s)
            try:
                return worker.run(data, kind, budget, self.ocr)
            finally:
                with self._cond:
                    self._idle.append(worker)
                    self._cond.notify()
        finally:
            if owner is not None:
                with self._cond:
                    self._owners[owner] -= 1
                    if not self._owners[owner]:
                        del self._owners[owner]

    def _take(self, wait_s: float) -> _Worker:
        """A free worker; at most `workers` files wait for one (each holds a request thread),
        more are turned away at once."""
        with self._cond:
            if not self._idle and self._waiting >= self.workers:
                raise RateLimited(f"all {self.workers} file extraction workers are busy and as many files wait; "
                                  "retry shortly", retry_after=1)
            self._waiting += 1
            try:
                if not self._cond.wait_for(lambda: self._closed or bool(self._idle), timeout=wait_s):
                    raise RateLimited(f"all {self.workers} file extraction workers are busy; retry shortly", retry_after=1)
            finally:
                self._waiting -= 1
            if self._closed:
                raise RateLimited("the server is shutting down", retry_after=1)
            return self._idle.pop()

    def busy(self, owner: str) -> int:
        """Files of `owner` in the pool now."""
        with self._cond:
            return self._owners.get(owner, 0)

    def close(self) -> None:
        """Stop every worker; extractions in flight end as bad files."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        _kill_all(self._all)


def _kill_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.kill()
