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
from typing import Sequence

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
        try:
            meta = json.loads((self.path / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if meta.get("model_id") != self.model_id:
            log.info("embedding journal of another model (%s) dropped", meta.get("model_id"))
            self.clear()
            return {}
        out: dict[str, np.ndarray] = {}
        for batch in sorted(self.path.glob("batch-*.npz")):
            try:
                with np.load(batch) as f:
                    keys, vectors = f["keys"], f["vectors"]
            except Exception:  # noqa: BLE001 - any unreadable batch only means more to embed
                log.warning("embedding journal batch %s is unreadable; its texts are embedded again", batch.name)
                continue
            if vectors.ndim != 2 or len(keys) != len(vectors) or not np.isfinite(vectors).all():
                continue
            out.update(zip((k.decode("ascii") for k in keys.tolist()), vectors, strict=True))
            self._next = max(self._next, int(batch.stem.split("-")[1]) + 1)
        return out

    def append(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        """Write one finished batch durably (after this returns, a crash does not lose it)."""
        if not len(keys):
            return
        if not self.path.exists():
            self.path.mkdir(parents=True)
            (self.path / META_FILE).write_text(json.dumps({"model_id": self.model_id}), encoding="utf-8")
            fsync_dir(self.path.parent)
        final = self.path / f"batch-{self._next:07d}.npz"
        tmp = self.path / f".{final.name}.tmp"
        with tmp.open("wb") as f:
            np.savez(f, keys=np.asarray([k.encode("ascii") for k in keys]), vectors=vectors.astype(np.float32))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        fsync_dir(self.path)
        self._next += 1

    def clear(self) -> None:
        """Remove the journal (its snapshot is published, or its model changed)."""
        shutil.rmtree(self.path, ignore_errors=True)
