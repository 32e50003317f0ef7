"""Finished embedding batches of an ingest, kept so that a killed ingest resumes.

Embedding dominates a large ingest (hours for millions of chunks on a CPU). Each batch the
build embeds is written here as its own file (temporary name, fsync, rename), keyed by the
hash of the text embedded, before the next batch starts. A build that dies, by a crash,
`kill -9` or a full disk, leaves the journal behind; the next ingest of the same index with
the same model takes those vectors and embeds only the rest. A build that publishes its
snapshot removes the journal. Vectors are keyed by text, not by position, so a corpus that
changed between the two runs still reuses exactly the texts that are the same.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import BinaryIO, Callable, Sequence

import numpy as np

from indexes.tables import fsync_dir

log = logging.getLogger("quarry.ingest")

JOURNAL_DIR = ".embed-journal"
META_FILE = "model.json"


class EmbedJournal:
    """The journal of one index directory for one embedding model."""

    def __init__(self, index_dir: Path, model_id: str) -> None:
        self.path = index_dir / JOURNAL_DIR
        self.model_id = model_id
        self._next = 0

    def load(self) -> dict[str, np.ndarray]:
        """Vectors of the batches a previous build finished, by text key; nothing when the
        journal belongs to another model. A damaged batch file (cut short by the crash
        itself) is skipped: its texts are embedded again."""
        if not self.path.exists():
            return {}
        try:
            meta = json.loads((self.path / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = {}
        if not isinstance(meta, dict) or meta.get("model_id") != self.model_id:
            log.info("embedding journal of another model (%s), or without its model, dropped",
                     meta.get("model_id") if isinstance(meta, dict) else None)
            self.clear()
            return {}
        out: dict[str, np.ndarray] = {}
        for batch in sorted(self.path.glob("batch-*.npz")):
            self._next = max(self._next, int(batch.stem.split("-")[1]) + 1)  # never reuse a number, readable or not
            try:
                with np.load(batch) as f:
                    keys, vectors = f["keys"], f["vectors"]
            except Exception:  # noqa: BLE001 - any unreadable batch only means more to embed
                log.warning("embedding journal batch %s is unreadable; its texts are embedded again", batch.name)
                continue
            if vectors.ndim != 2 or len(keys) != len(vectors) or not np.isfinite(vectors).all():
                continue
            out.update(zip((k.decode("ascii") for k in keys.tolist()), vectors, strict=True))
        return out

    def append(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        """Write one finished batch durably (after this returns, a crash does not lose it)."""
        if not len(keys):
            return
        if not (self.path / META_FILE).exists():  # first batch: the model the journal is of, durably first
            self.path.mkdir(parents=True, exist_ok=True)
            self._write(META_FILE, lambda f: f.write(json.dumps({"model_id": self.model_id}).encode()))
            fsync_dir(self.path.parent)
        name = f"batch-{self._next:07d}.npz"
        self._write(name, lambda f: np.savez(f, keys=np.asarray([k.encode("ascii") for k in keys]),
                                             vectors=vectors.astype(np.float32)))
        self._next += 1

    def _write(self, name: str, fill: Callable[[BinaryIO], object]) -> None:
        """A file whole or not at all: temporary name, fsync, rename, fsync of the folder."""
        tmp = self.path / f".{name}.tmp"
        with tmp.open("wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path / name)
        fsync_dir(self.path)

    def clear(self) -> None:
        """Remove the journal (its snapshot is published, or its model changed)."""
        shutil.rmtree(self.path, ignore_errors=True)
