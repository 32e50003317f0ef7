"""Helpers shared by the benchmark scripts: paths, cached index builds, timing, JSON output."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATASETS = ROOT.parent / "shared" / "datasets"
RESULTS = ROOT / "benchmarks" / "results"
CACHE = ROOT / "var" / "bench"

from routes.service.process import configure_process  # noqa: E402

configure_process()


def build_or_reuse(name: str, sources: list[Path], embedder, rebuild: bool = False, **options: Any) -> tuple[Path, dict]:
    """Build the benchmark index once (or again with rebuild=True); returns (index dir, manifest).
    A cached index is used only while it holds the corpus the sources give now (its content
    hash: documents with every field and region, tables), so a change to the data or to how
    files are read rebuilds it."""
    from indexes.corpus import ADMIN_ONLY
    from indexes.snapshot_build import BuildOptions, build_snapshot, corpus_digest
    from indexes.snapshot_load import FORMAT_VERSION, current_snapshot_path, read_manifest

    index = CACHE / name
    if not rebuild:
        try:
            manifest = read_manifest(current_snapshot_path(index))
            if (manifest.get("format_version") == FORMAT_VERSION
                    and manifest.get("content_hash") == corpus_digest(sources, options.get("default_acl", ADMIN_ONLY),
                                                                      options.get("markdown_sections", False))):
                return index, manifest
        except Exception:
            pass
    t0 = time.perf_counter()
    manifest = build_snapshot(sources, index, embedder, BuildOptions(reuse_embeddings=False, **options))
    manifest["timings_s"]["wall_total"] = round(time.perf_counter() - t0, 3)
    (index / "last_build.json").write_text(json.dumps(manifest["timings_s"]))
    return index, manifest


def make_embedder() -> Any:
    """The embedder `quarry serve` would build here, so QUARRY_ONNX, QUARRY_ONNX_THREADS,
    QUARRY_CACHE_DIR and QUARRY_MODEL_PATH apply to benchmarks too."""
    from routes.service.settings import Settings

    return Settings.load().embedder()


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1000.0


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}


def peak_rss_mb(reset: bool = False) -> float:
    """This process's peak resident memory (VmHWM) in MB; `reset` starts a new peak from now
    (Linux: /proc/self/clear_refs), so one stage's peak can be read on its own."""
    if reset:
        Path("/proc/self/clear_refs").write_text("5")
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_json(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {path.relative_to(ROOT)}")
    return path
