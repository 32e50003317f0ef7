"""Answer-level scores: P(this passage answers the question) from a small cross-encoder.

The model is all-MiniLM-L6-v2's transformer fine-tuned as a cross-encoder on SQuAD 2.0
(`training/answer_train.py`; recipe, data, licenses and held-out figures in
`indexes/models/answer-minilm-l6/MODEL_CARD.md`), exported to ONNX and quantized to int8.
It runs on onnxruntime with the `tokenizers` library: no PyTorch at query time, nothing
downloaded. Loading checks the weights against the folder's SHA256SUMS, so a partial copy
or a swapped file fails loudly instead of scoring quietly wrong.

Pairs are encoded as BERT pairs, `[CLS] question [SEP] passage [SEP]`, question first and
clipped to `max_question_tokens`, the passage truncated to fit `max_length`. Training and
serving share `encode_pairs`, so the model sees at run time exactly what it was trained on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from threading import Lock
from typing import Any, Sequence

import numpy as np

from indexes.tables import file_digest
from retrieval.errors import SnapshotError

MODEL_FILE = "model.int8.onnx"
CONFIG_FILE = "answer_config.json"
SUMS_FILE = "SHA256SUMS"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# what scoring depends on: the weights, the vocabulary and the encoding settings
CHECKED_FILES = (MODEL_FILE, "tokenizer.json", CONFIG_FILE)


def default_path() -> Path:
    """The model folder shipped inside the package."""
    return Path(__file__).resolve().parent / "models" / "answer-minilm-l6"


@dataclass(frozen=True)
class PairEncoding:
    """Token ids of a list of pairs, before padding; `type_ids` mark the passage (1)."""

    ids: list[list[int]]
    type_ids: list[list[int]]


def encode_pairs(tokenizer: Any, questions: Sequence[str], passages: Sequence[str], max_length: int = 256,
                 max_question_tokens: int = 64) -> PairEncoding:
    """Encode (question, passage) pairs with a `tokenizers.Tokenizer` of a BERT vocabulary.

    Equivalent to a Hugging Face BERT tokenizer's `tok(q, p, truncation="only_second")`,
    except that an over-long question is clipped first (there it would raise) so the passage
    keeps at least `max_length - max_question_tokens - 3` tokens.
    """
    if len(questions) != len(passages):
        raise ValueError(f"{len(questions)} questions for {len(passages)} passages")
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    q_enc = tokenizer.encode_batch(list(questions), add_special_tokens=False)
    p_enc = tokenizer.encode_batch(list(passages), add_special_tokens=False)
    ids, types = [], []
    for q, p in zip(q_enc, p_enc, strict=True):
        q_ids = q.ids[:max_question_tokens]
        p_ids = p.ids[: max(0, max_length - 3 - len(q_ids))]
        ids.append([cls, *q_ids, sep, *p_ids, sep])
        types.append([0] * (len(q_ids) + 2) + [1] * (len(p_ids) + 1))
    return PairEncoding(ids, types)


def pad_batch(ids: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]], pad_id: int = 0) -> dict[str, np.ndarray]:
    """Right-pad to the longest row (dynamic padding); int64 feeds named as the export's inputs."""
    width = max((len(r) for r in ids), default=0)
    out = {name: np.full((len(ids), width), pad_id if name == "input_ids" else 0, dtype=np.int64) for name in INPUT_NAMES}
    for i, (row, types) in enumerate(zip(ids, type_ids, strict=True)):
        out["input_ids"][i, : len(row)] = row
        out["attention_mask"][i, : len(row)] = 1
        out["token_type_ids"][i, : len(types)] = types
    return out


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function."""
    z = np.exp(-np.abs(logits))
    return np.where(logits >= 0, 1.0 / (1.0 + z), z / (1.0 + z)).astype(np.float32)


def read_checksums(folder: Path) -> dict[str, str]:
    """`sha256sum`-format lines (`<hex>  <name>`) as {name: hex}."""
    sums: dict[str, str] = {}
    for line in (folder / SUMS_FILE).read_text(encoding="utf-8").splitlines():
        if line.strip():
            digest, _, name = line.strip().partition("  ")
            sums[name.lstrip("*")] = digest.lower()
    return sums


def shipped_identity(path: Path | None = None) -> dict[str, str] | None:
    """{"id", "sha256"} of the model folder as its files declare them (no hashing: an index
    build records which model it was built beside; loading verifies the bytes). None when
    the folder is incomplete."""
    folder = Path(path) if path is not None else default_path()
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        digest = read_checksums(folder)[MODEL_FILE]
    except (OSError, ValueError, KeyError):
        return None
    return {"id": str(config.get("model_id", "")), "sha256": digest}


class AnswerModel:
    """Scores (question, passage) pairs with the bundled int8 cross-encoder on onnxruntime.

    Build it once at startup (`AnswerModel.load()`) and pass it to whatever needs it; `score`
    may be called from several threads.
    """

    def __init__(self, session: Any, tokenizer: Any, config: dict[str, Any], checksum: str, path: Path) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._max_length = int(config["max_length"])
        self._max_question = int(config["max_question_tokens"])
        self._pad_id = int(config.get("pad_token_id", 0))
        self._inputs = [i.name for i in session.get_inputs()]
        self._lock = Lock()  # one tokenizer shared by all callers
        self.checksum = checksum
        self.model_id: str = str(config["model_id"])
        self.path = path

    @classmethod
    def load(cls, path: Path | None = None, threads: int | None = None) -> AnswerModel:
        """Load the model folder (default: the bundled one), checking the sha256 of every file
        SHA256SUMS names first (the weights, the tokenizer and the encoding settings).

        `threads` sets onnxruntime's intra-op threads (None: onnxruntime's default, one per
        core). Raises SnapshotError when a file is missing or the checksum does not match.
        """
        folder = Path(path) if path is not None else default_path()
        model_file = folder / MODEL_FILE
        for needed in (folder / SUMS_FILE, *(folder / name for name in CHECKED_FILES)):
            if not needed.is_file():
                raise SnapshotError(f"answer model file {needed.name} is missing from {folder}")
        sums = read_checksums(folder)
        if MODEL_FILE not in sums:
            raise SnapshotError(f"{SUMS_FILE} in {folder} has no line for {MODEL_FILE}")
        digests = {}
        for name, expected in sums.items():  # every file the sums name: weights, vocabulary, settings
            actual = file_digest(folder / name) if (folder / name).is_file() else "missing"
            if actual != expected:
                raise SnapshotError(f"answer model file {folder / name} has sha256 {actual[:16]}..., "
                                    f"{SUMS_FILE} says {expected[:16]}...: the file is damaged or was replaced")
            digests[name] = actual
        actual = digests[MODEL_FILE]
        import onnxruntime as ort
        from tokenizers import Tokenizer

        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_truncation()  # encode_pairs truncates; padding is per batch
        tokenizer.no_padding()
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = max(1, int(threads))
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no spin-wait on 2 cores
        options.log_severity_level = 3
        session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        return cls(session, tokenizer, config, actual, folder)

    def score(self, question: str, passages: Sequence[str], batch_size: int = 16) -> np.ndarray:
        """P(passage answers `question`) for each passage, float32 in [0, 1], in input order.

        Deterministic for the same inputs and batch size. The int8 graph quantizes
        activations with one scale per batch, so within a batch a score also depends a
        little on its companions (held out: mean 0.013, rarely up to 0.5 between batch sizes
        1 and 16); `batch_size=1` makes each score a function of its pair alone and, on 2
        cores, was not slower per passage (MODEL_CARD.md, Speed).
        """
        return self.score_pairs([question] * len(passages), passages, batch_size)

    def score_pairs(self, questions: Sequence[str], passages: Sequence[str], batch_size: int = 16) -> np.ndarray:
        """Like `score` for arbitrary (question, passage) pairs. Pairs are batched by length
        so short passages are not padded to the longest one."""
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if not passages:
            return np.zeros(0, dtype=np.float32)
        with self._lock:
            enc = encode_pairs(self._tokenizer, questions, passages, self._max_length, self._max_question)
        order = sorted(range(len(enc.ids)), key=lambda i: len(enc.ids[i]))
        logits = np.zeros(len(order), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            feeds = pad_batch([enc.ids[i] for i in idx], [enc.type_ids[i] for i in idx], self._pad_id)
            logits[idx] = self._session.run(None, {n: feeds[n] for n in self._inputs})[0].reshape(-1)
        return sigmoid(logits)
