"""Fine-tuning the answer model in PyTorch (driven by training/answer_train.py): the network,
optimizer and schedule, the training loop with its checkpoints, and fp32 scoring.

A checkpoint holds weights, optimizer, scheduler, the Python/NumPy/torch RNG states, the
step, the run's settings and the batch order; resuming from it continues bit for bit (torch
runs deterministic algorithms on a fixed thread count, and only dropout draws random numbers
during training).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from indexes.answer_model import encode_pairs, pad_batch
from training.answer_data import Pair

log = logging.getLogger("quarry.answer_train")


def build_model(base: Path, seed: int, span_head: bool = False) -> Any:
    """The MiniLM transformer plus a fresh dropout + linear head on [CLS]; with `span_head`
    also a start/end head over the tokens, trained as an auxiliary task and not exported."""
    import torch
    from transformers import AutoModel

    torch.manual_seed(seed)
    encoder = AutoModel.from_pretrained(str(base), local_files_only=True, add_pooling_layer=False,
                                        attn_implementation="eager")
    head = torch.nn.Linear(encoder.config.hidden_size, 1)
    torch.nn.init.normal_(head.weight, std=encoder.config.initializer_range)
    torch.nn.init.zeros_(head.bias)
    parts = {"encoder": encoder, "dropout": torch.nn.Dropout(encoder.config.hidden_dropout_prob), "head": head}
    if span_head:
        span = torch.nn.Linear(encoder.config.hidden_size, 2)
        torch.nn.init.normal_(span.weight, std=encoder.config.initializer_range)
        torch.nn.init.zeros_(span.bias)
        parts["span"] = span
    return torch.nn.ModuleDict(parts)


def logits(model: Any, feeds: dict[str, Any]) -> Any:
    """One logit per pair from the [CLS] state."""
    hidden = model["encoder"](**feeds).last_hidden_state[:, 0]
    return model["head"](model["dropout"](hidden)).squeeze(-1)


def training_loss(model: Any, batch: dict[str, Any], labels: Any, spans: Any | None, span_weight: float) -> Any:
    """Binary cross-entropy of the [CLS] logit, plus, with a span head, `span_weight` times
    the SQuAD 2.0 span loss: cross-entropy of the answer's start and end token, or of [CLS]
    (position 0) when the passage does not answer; rows without a target (-100) are left out.
    Reading where the answer is teaches the encoder more than a yes/no label alone."""
    import torch

    hidden = model["encoder"](**batch).last_hidden_state
    loss = torch.nn.functional.binary_cross_entropy_with_logits(
        model["head"](model["dropout"](hidden[:, 0])).squeeze(-1), labels)
    if spans is None or "span" not in model or not bool((spans[:, 0] >= 0).any()):
        return loss
    se = model["span"](model["dropout"](hidden))  # batch x tokens x 2
    allowed = (batch["token_type_ids"] == 1) & (batch["attention_mask"] == 1)
    allowed[:, 0] = True  # [CLS]: "no answer here"
    se = se.masked_fill(~allowed.unsqueeze(-1), -1e4)
    start = torch.nn.functional.cross_entropy(se[..., 0], spans[:, 0], ignore_index=-100)
    end = torch.nn.functional.cross_entropy(se[..., 1], spans[:, 1], ignore_index=-100)
    return loss + span_weight * (start + end) / 2


def optimizer_and_schedule(model: Any, lr: float, weight_decay: float, warmup: float, steps: int) -> tuple[Any, Any]:
    """AdamW (no weight decay on biases and LayerNorm) with a `LinearSchedule` over `steps`."""
    import torch

    decay: list[Any] = []
    no_decay: list[Any] = []
    for name, param in model.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(param)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    warm = max(1, int(round(steps * warmup)))
    schedule = LinearSchedule(warm, steps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


class LinearSchedule:
    """Linear warmup to the peak learning rate, then linear decay to zero."""

    def __init__(self, warmup: int, total: int) -> None:
        self.warmup, self.total = warmup, total

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return max(0.0, (self.total - step) / max(1, self.total - self.warmup))


def feeds(enc: Any, idx: Sequence[int]) -> dict[str, Any]:
    """Pairs `idx` of `enc`, padded to the longest, as torch tensors."""
    import torch

    batch = pad_batch([enc.ids[i] for i in idx], [enc.type_ids[i] for i in idx])
    return {k: torch.from_numpy(v) for k, v in batch.items()}


def train(model: Any, optimizer: Any, scheduler: Any, enc: Any, batches: list[list[int]], pairs: Sequence[Pair],
          state: dict[str, Any], config: dict[str, Any], ckpt_path: Path, log_every: int, checkpoint_minutes: float,
          spans: np.ndarray | None = None, span_weight: float = 0.0) -> None:
    """Run the steps from `state["step"]` on, updating `state`; log every `log_every` steps,
    checkpoint every `checkpoint_minutes` and after the last step. `spans` (pairs x 2 token
    positions, see `training_loss`) switch the span loss on."""
    import torch

    labels = torch.tensor([float(p.label) for p in pairs])
    targets = None if spans is None else torch.from_numpy(spans.astype(np.int64))
    total = len(batches)
    model.train()
    last_ckpt = time.time()
    window_t, window_n, window_loss = time.time(), 0, []
    rate = None
    while state["step"] < total:
        step = state["step"]
        t0 = time.time()
        idx = batches[step]
        loss = training_loss(model, feeds(enc, idx), labels[idx], None if targets is None else targets[idx], span_weight)
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
        if state["step"] % log_every == 0 or state["step"] == total:
            now = time.time()
            current = window_n / max(now - window_t, 1e-9)
            rate = current if rate is None else 0.7 * rate + 0.3 * current
            left = sum(len(b) for b in batches[state["step"]:]) / max(rate, 1e-9)
            log.info("step %d/%d loss %.4f lr %.2e %.1f ex/s eta %s", state["step"], total, np.mean(window_loss),
                     scheduler.get_last_lr()[0], current, _hms(left))
            window_t, window_n, window_loss = now, 0, []
        if state["step"] == total or time.time() - last_ckpt >= checkpoint_minutes * 60:
            saving = time.time()
            save_checkpoint(ckpt_path, model, optimizer, scheduler, state, config, batches)
            last_ckpt = time.time()
            window_t += last_ckpt - saving  # saving time is not training time
    model.eval()


def save_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any, state: dict[str, Any],
                     config: dict[str, Any], batches: list[list[int]]) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
                "state": state, "config": config, "batches": batches}, tmp)
    os.replace(tmp, path)  # a crash mid-save leaves the previous checkpoint whole
    log.info("checkpoint at step %d -> %s", state["step"], path)


def load_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any, config: dict[str, Any],
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


def benchmark(model: Any, optimizer: Any, scheduler: Any, enc: Any, batches: list[list[int]],
              pairs: Sequence[Pair], steps: int) -> int:
    """Forward + backward + optimizer step on the first real batches; the first is warm-up."""
    import torch

    labels = torch.tensor([float(p.label) for p in pairs])
    model.train()
    rates = []
    for idx in batches[: steps + 1]:
        t0 = time.time()
        batch = feeds(enc, idx)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits(model, batch), labels[idx])
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        rates.append((len(idx) / (time.time() - t0), batch["input_ids"].shape[1]))
        log.info("benchmark batch %d: %d tokens wide, %.2f ex/s", len(rates), rates[-1][1], rates[-1][0])
    timed = rates[1:] or rates
    log.info("benchmark: median %.2f ex/s over %d batches (mean width %.0f tokens)",
             float(np.median([r for r, _ in timed])), len(timed), float(np.mean([w for _, w in timed])))
    return 0


def torch_logits(model: Any, tokenizer: Any, pairs: Sequence[Pair], max_length: int, max_question: int) -> np.ndarray:
    """PyTorch (fp32) logits of `pairs`, in eval mode, batches of 32 sorted by length."""
    import torch

    enc = encode_pairs(tokenizer, [p.question for p in pairs], [p.passage for p in pairs], max_length, max_question)
    order = sorted(range(len(pairs)), key=lambda i: len(enc.ids[i]))
    out = np.zeros(len(pairs), dtype=np.float32)
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), 32):
            idx = order[start : start + 32]
            out[idx] = logits(model, feeds(enc, idx)).numpy()
            if (start // 32) % 50 == 0:
                log.info("fp32 eval %d/%d", start + len(idx), len(order))
    return out


def state_digest(model: Any) -> str:
    """sha256 over the weights: equal digests mean bit-identical models."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
