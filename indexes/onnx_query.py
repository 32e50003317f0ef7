"""Query embeddings through onnxruntime: the same weights, exported once to ONNX.

One short query through PyTorch costs 12-20 ms on this 2-core VM, most of it framework
overhead; the exported graph under onnxruntime takes about 6 ms and gives the same vector
(largest difference per component about 2e-7). Every load checks that on probe texts
against the PyTorch pipeline; a mismatch, a failed export or a missing runtime leaves
queries on PyTorch. Passages are always embedded by PyTorch, in batches.

The export is cached by the weights' digest in a cache folder (settings `cache_dir`, default
~/.cache/quarry/onnx); a cached file that fails to load or to match is exported again once.
Settings `onnx` and `onnx_threads` (QUARRY_ONNX, QUARRY_ONNX_THREADS) switch the path off
and set its intra-op threads.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
import warnings
from pathlib import Path
from threading import Lock
from typing import Any, Callable, Sequence

import numpy as np

from indexes.tables import file_digest

log = logging.getLogger("quarry.embedder")
EXPORT_VERSION = 1
PROBES = ("warm up", "What does error E4012 mean?", "rotate the signing keys " * 120)
TOLERANCE = 1e-4


class OnnxQueryEncoder:
    """Tokenizer + exported transformer + mean pooling + L2 normalisation."""

    def __init__(self, session: Any, tokenizer: Any, max_length: int) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._max_length = max_length
        self._inputs = [i.name for i in session.get_inputs()]
        self._lock = Lock()  # a fast tokenizer must not be driven from two threads at once

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            batch = self._tokenizer(list(texts), return_tensors="np", padding=True, truncation=True,
                                    max_length=self._max_length)
        feeds = {name: batch[name].astype(np.int64) for name in self._inputs}
        hidden = self._session.run(None, feeds)[0]
        mask = batch["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(pooled, dtype=np.float32)


def load_onnx_encoder(model: Any, model_path: Path, reference: Callable[[list[str]], np.ndarray],
                      threads: int, cache: Path) -> OnnxQueryEncoder | None:
    """The ONNX query encoder for a loaded sentence-transformers `model` whose pipeline is
    Transformer, Pooling [, Normalize] (the embedder checks that), or None when the pooling is
    not a mean, or the encoder cannot be built or does not match `reference`."""
    if not _mean_pooling(model):
        return None
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        log.warning("onnxruntime is not installed; queries are embedded by PyTorch")
        return None
    problem = ""
    for fresh in (False, True):  # a cached export that fails is replaced once
        try:
            encoder = _session(model, _exported(model, model_path, cache, fresh), threads)
            gap = float(np.abs(encoder.encode(list(PROBES)) - reference(list(PROBES))).max())
            if gap <= TOLERANCE:
                return encoder
            problem = f"vectors differ from PyTorch by {gap:.2g}"
        except Exception as e:  # noqa: BLE001 - any failure keeps queries on the PyTorch path
            problem = f"{type(e).__name__}: {str(e)[:200]}"
    log.warning("onnxruntime query path unavailable (%s); using PyTorch", problem)
    return None


def _session(model: Any, path: Path, threads: int) -> OnnxQueryEncoder:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no spin-wait on 2 cores
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return OnnxQueryEncoder(session, model.tokenizer, int(model.max_seq_length))


def _mean_pooling(model: Any) -> bool:
    """The pipeline's pooling (module 1, after the transformer) is a plain mean over tokens."""
    config = list(model)[1].get_config_dict()
    return config.get("pooling_mode") == "mean" or (
        config.get("pooling_mode_mean_tokens") is True
        and not any(v for k, v in config.items() if k.startswith("pooling_mode_") and k != "pooling_mode_mean_tokens"))


def _exported(model: Any, model_path: Path, cache: Path, fresh: bool = False) -> Path:
    """Path of the cached ONNX export of the model's transformer, exporting it when missing
    (or when `fresh`)."""
    weights = sorted(p for p in model_path.rglob("*") if p.suffix in (".safetensors", ".bin") and p.is_file())
    digest = hashlib.sha256(" ".join([f"v{EXPORT_VERSION}", *map(file_digest, weights)]).encode())
    target = cache / f"{digest.hexdigest()[:32]}.onnx"
    if target.is_file() and not fresh:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    for stale in cache.glob("*.onnx.tmp"):  # left by an export that was killed
        if time.time() - stale.stat().st_mtime > 3600:
            stale.unlink(missing_ok=True)
    import torch

    sample = model.tokenizer(["an example query"], return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]

    class Hidden(torch.nn.Module):
        """The transformer by keyword, returning only the token states (what pooling needs)."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *tensors: Any) -> Any:
            return self.inner(**dict(zip(names, tensors, strict=True))).last_hidden_state

    transformer = Hidden(model[0].auto_model).eval()
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"last_hidden_state": {0: "batch", 1: "tokens"}}
    fd, tmp = tempfile.mkstemp(dir=cache, suffix=".onnx.tmp")
    os.close(fd)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(transformer, tuple(sample[n] for n in names), tmp, input_names=names,
                              output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)
        os.chmod(tmp, 0o644)  # readable by other users of a shared cache, like any model file
        os.replace(tmp, target)  # atomic: a concurrent loader sees a whole file or none
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
