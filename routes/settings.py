"""One typed settings object: every budget and limit has a name, a default and a line of help.

Values come from defaults, then `QUARRY_<NAME>` environment variables, then command-line
flags. This module is the only place that reads the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from datetime import date
from pathlib import Path
from typing import Any

from retrieval.limits import Limits

HELP = {
    "index_dir": "Index directory (holds the snapshots and the audit log).",
    "keys_file": "API keys file (hashed keys; see `quarry keys`).",
    "host": "Interface to listen on.",
    "port": "TCP port to listen on.",
    "model_path": "Local sentence-transformers folder (default: the bundled all-MiniLM-L6-v2).",
    "max_body_bytes": "Largest accepted request body; larger bodies get 413.",
    "rate_per_second": "Requests per second one key may make on average (token bucket).",
    "burst": "Requests one key may make at once above its average rate.",
    "max_concurrent_per_key": "Requests one key may have in flight; more get 429.",
    "audit_questions": "Store question text in the audit log (off: only its length).",
    "audit_path": "Audit database (default: <index_dir>/audit.duckdb).",
    "audit_fail_closed": "Answer a /v1 or /mcp request only once its audit row is written (else a retryable 503); "
                         "off: answer anyway and count the dropped row.",
    "today": "Date that 'last quarter' and other relative dates refer to (default: the real date).",
    "workers": "Threads that run retriever calls.",
    "threads": "Torch and OpenMP threads for query embedding.",
    "onnx": "Embed queries through onnxruntime (the same weights exported once, checked against PyTorch at load).",
    "onnx_threads": "onnxruntime intra-op threads for query embedding (default: the PyTorch thread count).",
    "cache_dir": "Where derived model files, such as the ONNX export, are cached (default: ~/.cache/quarry).",
    "mcp_allowed_origins": "Origins allowed to call /mcp from a browser (comma-separated; empty: none).",
    "mcp_stream_idle_seconds": "A GET /mcp event stream that carries no message for this long is closed "
                               "(it never holds one of the key's request slots).",
    **{name: f"Import path `module:factory` of a {name} to use instead of the built-in one; the factory is "
              "called with (settings, engine) and returns the policy (retrieval/policy.py)." for name in
       ("router", "grader", "rewriter", "reranker")},
}


@dataclass(frozen=True)
class Settings:
    index_dir: Path = Path("var/demo-index")
    keys_file: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    model_path: Path | None = None
    max_body_bytes: int = 64 * 1024
    rate_per_second: float = 50.0
    burst: int = 100
    max_concurrent_per_key: int = 16
    audit_questions: bool = False
    audit_path: Path | None = None
    audit_fail_closed: bool = False
    today: date | None = None
    workers: int = 4
    threads: int | None = None
    onnx: bool = True
    onnx_threads: int | None = None
    cache_dir: Path | None = None
    mcp_allowed_origins: tuple[str, ...] = ()
    mcp_stream_idle_seconds: float = 30.0
    router: str = ""
    grader: str = ""
    rewriter: str = ""
    reranker: str = ""
    limits: Limits = field(default_factory=Limits)

    def embedder(self) -> Any:
        """The embedder these settings describe (model folder, query runtime, cache)."""
        from indexes.embedder import Embedder

        return Embedder(self.model_path, query_runtime="onnx" if self.onnx else "torch",
                        onnx_threads=self.onnx_threads, cache_dir=self.cache_dir)

    def with_env(self, env: dict[str, str] | None = None) -> Settings:
        """Apply `QUARRY_<NAME>` variables (limits too: `QUARRY_MAX_K=20`)."""
        env = dict(os.environ if env is None else env)
        changes: dict[str, Any] = {}
        for f in fields(self):
            raw = env.get(f"QUARRY_{f.name.upper()}")
            if raw is not None and f.name != "limits":
                changes[f.name] = _parse(raw, getattr(self, f.name), f.type)
        limit_changes = {}
        for f in fields(Limits):
            raw = env.get(f"QUARRY_{f.name.upper()}")
            if raw is not None:
                limit_changes[f.name] = int(raw)
        out = replace(self, **changes)
        return replace(out, limits=replace(out.limits, **limit_changes)) if limit_changes else out


def _parse(raw: str, current: Any, type_name: Any) -> Any:
    text = str(type_name)
    if "bool" in text:
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if "Path" in text:
        return Path(raw) if raw else None
    if "date" in text:
        return date.fromisoformat(raw) if raw else None
    if "tuple" in text:
        return tuple(x.strip() for x in raw.split(",") if x.strip())
    if "float" in text:
        return float(raw)
    if "int" in text:
        return int(raw) if raw else None
    return raw


assert set(HELP) == {f.name for f in fields(Settings)} - {"limits"}
