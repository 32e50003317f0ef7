"""The embedding journal: what a killed ingest leaves, and what the next run may trust."""

from __future__ import annotations

import numpy as np

from indexes.embed_journal import JOURNAL_DIR, META_FILE, EmbedJournal


def _batch(seed: int, n: int = 3) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    return [f"{seed:02d}{i:038d}" for i in range(n)], rng.standard_normal((n, 4)).astype(np.float32)


def test_a_new_run_reads_every_finished_batch_and_numbers_after_them(tmp_path):
    first = EmbedJournal(tmp_path, "m")
    batches = [_batch(1), _batch(2)]
    for keys, vectors in batches:
        first.append(keys, vectors)
    second = EmbedJournal(tmp_path, "m")
    got = second.load()
    assert sorted(got) == sorted(k for keys, _ in batches for k in keys)
    np.testing.assert_array_equal(got[batches[1][0][2]], batches[1][1][2])
    second.append(*_batch(3))
    names = sorted(p.name for p in (tmp_path / JOURNAL_DIR).glob("batch-*.npz"))
    assert names == ["batch-0000000.npz", "batch-0000001.npz", "batch-0000002.npz"]  # nothing overwritten
    assert len(EmbedJournal(tmp_path, "m").load()) == 9


def test_a_damaged_batch_is_skipped_and_its_number_not_reused(tmp_path):
    journal = EmbedJournal(tmp_path, "m")
    journal.append(*_batch(1))
    journal.append(*_batch(2))
    damaged = tmp_path / JOURNAL_DIR / "batch-0000000.npz"
    damaged.write_bytes(damaged.read_bytes()[:40])
    again = EmbedJournal(tmp_path, "m")
    assert sorted(again.load()) == sorted(_batch(2)[0])
    again.append(*_batch(3))
    assert (tmp_path / JOURNAL_DIR / "batch-0000002.npz").exists()


def test_a_journal_of_another_model_or_without_its_model_is_dropped(tmp_path):
    EmbedJournal(tmp_path, "m").append(*_batch(1))
    assert EmbedJournal(tmp_path, "other").load() == {}
    assert not (tmp_path / JOURNAL_DIR).exists()
    EmbedJournal(tmp_path, "m").append(*_batch(1))
    (tmp_path / JOURNAL_DIR / META_FILE).unlink()  # killed between the folder and its model file
    assert EmbedJournal(tmp_path, "m").load() == {}
    assert not (tmp_path / JOURNAL_DIR).exists()
    fresh = EmbedJournal(tmp_path, "m")
    fresh.append(*_batch(2))
    assert sorted(EmbedJournal(tmp_path, "m").load()) == sorted(_batch(2)[0])
