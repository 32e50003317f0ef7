"""From trained PyTorch weights to the shipped answer-model folder (training/answer_train.py).

ONNX export with dynamic batch and sequence axes, a check against PyTorch, int8 dynamic
quantization, the tokenizer and config files `AnswerModel.load` reads, SHA256SUMS, and the
int8 model's speed through that loader.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from indexes.answer_model import (CHECKED_FILES, CONFIG_FILE, INPUT_NAMES, MODEL_FILE, SUMS_FILE, AnswerModel,
                                  encode_pairs, pad_batch)
from training.answer_data import Pair

MODEL_ID = "quarry-answer-minilm-l6"
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def export_onnx(model: Any, logits: Callable[[Any, dict[str, Any]], Any], sample: dict[str, Any], path: Path) -> None:
    """Export `logits(model, feeds)` as an ONNX graph with dynamic batch and sequence axes,
    traced on `sample` (torch tensors named as the tokenizer's outputs)."""
    import torch

    class Export(torch.nn.Module):
        """input_ids, attention_mask, token_type_ids -> one logit per pair."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return logits(self.inner, {"input_ids": input_ids, "attention_mask": attention_mask,
                                       "token_type_ids": token_type_ids})

    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(INPUT_NAMES)
    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"logits": {0: "batch"}}
    with torch.no_grad():
        torch.onnx.export(Export(model).eval(), tuple(sample[n] for n in names), str(path), input_names=names,
                          output_names=["logits"], dynamic_axes=axes, opset_version=17, dynamo=False)


def onnx_gap_to(path: Path, tokenizer: Any, pairs: Sequence[Pair], ref: np.ndarray, max_length: int,
                max_question: int) -> float:
    """Largest difference between the fp32 export's logits on `pairs` and `ref` (PyTorch's)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    enc = encode_pairs(tokenizer, [p.question for p in pairs], [p.passage for p in pairs], max_length, max_question)
    logits = session.run(None, pad_batch(enc.ids, enc.type_ids))[0].reshape(-1)
    return float(np.abs(logits.astype(np.float64) - ref).max())


def write_artifacts(out: Path, fp32_onnx: Path, base: Path, tokenizer: Any, max_length: int, max_question: int) -> None:
    """model.int8.onnx (quantized from `fp32_onnx`), the tokenizer files, answer_config.json
    and SHA256SUMS into `out`: the folder `AnswerModel.load` reads."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from indexes.tables import file_digest

    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (MODEL_FILE + ".tmp")
    # Per-channel weight scales: about 4x smaller logit error than per-tensor ones for the
    # same size and speed (measured on this export).
    quantize_dynamic(str(fp32_onnx), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
    os.replace(tmp, out / MODEL_FILE)
    tokenizer.save(str(out / "tokenizer.json"))
    for name in TOKENIZER_FILES:
        shutil.copy2(base / name, out / name)
    config = {"model_id": MODEL_ID, "max_length": max_length, "max_question_tokens": max_question,
              "pad_token_id": tokenizer.token_to_id("[PAD]"), "pooling": "cls", "output": "logit",
              "inputs": list(INPUT_NAMES), "pair_order": "question, passage",
              "base_model": "sentence-transformers/all-MiniLM-L6-v2"}
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / SUMS_FILE).write_text("".join(f"{file_digest(out / name)}  {name}\n" for name in CHECKED_FILES), encoding="utf-8")


def int8_speed(out: Path, pairs: Sequence[Pair], n: int = 320, batch: int = 16) -> dict[str, Any]:
    """int8 ms per passage at batch 16 on 1 and 2 threads, tokenization included, over the
    first `n` held-out pairs (realistic lengths); the median of 3 passes after a warm-up."""
    sample = list(pairs[:n])
    qs, ps = [p.question for p in sample], [p.passage for p in sample]
    result: dict[str, Any] = {"pairs": len(sample), "batch_size": batch}
    for threads in (1, 2):
        model = AnswerModel.load(out, threads=threads)
        model.score_pairs(qs[:batch], ps[:batch], batch_size=batch)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            model.score_pairs(qs, ps, batch_size=batch)
            times.append(time.perf_counter() - t0)
        result[f"threads_{threads}"] = {"ms_per_passage": 1000 * float(np.median(times)) / max(1, len(sample))}
    return result
