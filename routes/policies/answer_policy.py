"""The answer-level model as the loop's grader and reranker (`QUARRY_GRADER=answer`,
`QUARRY_RERANKER=answer`).

One model per engine, loaded on first use and shared by both (retrieval/answer_level.py
holds the policies; indexes/answer_model.py the model). The grader's combination,
calibration, threshold and cascade come from the index's tuned.json when `quarry tune` fitted
them with this same model (its sha256 is recorded there), else from the shipped defaults;
`QUARRY_ANSWER_THRESHOLD` and `QUARRY_ANSWER_PASSAGES` override them. The reranker's
candidates and rank prior are the ones `quarry tune` chose with this model, else 20 and 0;
`QUARRY_RERANK_TOP_N` and `QUARRY_RERANK_RANK_PRIOR` override them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from threading import Lock
from typing import Any, Sequence

from indexes.answer_model import AnswerModel, default_path
from retrieval.answer_level import AnswerConfig, AnswerGrader, AnswerReranker, AnswerScores, RerankConfig
from routes.service.view import IndexView
from routes.service.settings import Settings

log = logging.getLogger("quarry.answer")
_LOCK = Lock()

DEFAULTS_FILE = "grader_defaults.json"
DEFAULT_PASSAGES = AnswerConfig().passages
DEFAULT_TOP_N = 20


def shipped_defaults(folder: Path | None = None, checksum: str | None = None) -> AnswerConfig | None:
    """The grader defaults shipped beside the model: a fit of retrieval.tune.fit_answer_grader
    on demo *train* questions and SciFact *train* claims with half their gold hidden (first
    attempts at k = 8 under the default signal grader, target false-gap rate 5%), written by
    `benchmarks/answer_grader.py --only fit --save-defaults`. None when the folder has none,
    or they were fitted with another model than `checksum`."""
    path = (folder or default_path()) / DEFAULTS_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if checksum is not None and data.get("model_sha256") != checksum:
        return None
    return AnswerConfig.from_json(data["config"])


def shipped_cheap_grader(folder: Path | None = None) -> dict[str, Any] | None:
    """The signal grader (as JSON) whose scores the shipped answer-grader defaults combine,
    when the defaults file records it."""
    path = (folder or default_path()) / DEFAULTS_FILE
    if not path.is_file():
        return None
    recorded = json.loads(path.read_text(encoding="utf-8")).get("cheap_grader")
    return dict(recorded) if isinstance(recorded, dict) else None


class ModelScorer:
    """The model as an AnswerScorer: one pair per run, so each score depends on its pair only
    (dynamic int8 quantizes per batch; MODEL_CARD.md)."""

    def __init__(self, model: AnswerModel) -> None:
        self.model = model
        self.checksum = model.checksum

    def score(self, question: str, passages: Sequence[str]) -> Sequence[float]:
        return [float(p) for p in self.model.score(question, list(passages), batch_size=1)]


def configured(settings: Settings, *kinds: str) -> bool:
    """Whether the settings name the answer model as one of `kinds` (default: grader or reranker)."""
    return any((getattr(settings, kind) or "").strip() in ("answer", f"routes.policies.answer_policy:make_{kind}")
               for kind in kinds or ("grader", "reranker"))


def answer_scores(settings: Settings, engine: IndexView) -> AnswerScores:
    """The engine's answer scores, loading the model (checksum verified) on first use."""
    with _LOCK:
        if engine.answer is None:
            model = AnswerModel.load(settings.answer_model_path, threads=settings.answer_threads)
            recorded = (engine.snapshot.manifest.get("answer_model") or {}).get("sha256")
            if recorded and recorded != model.checksum:
                log.warning("index %s was built beside answer model %s..., this service loads %s...",
                            engine.snapshot.path, recorded[:12], model.checksum[:12])
            engine.answer = AnswerScores(ModelScorer(model), settings.answer_cache_size, settings.answer_cache_mb << 20)
        return engine.answer


def answer_config(settings: Settings, engine: IndexView, checksum: str | None) -> AnswerConfig:
    """Tuned (for the model with this checksum) or shipped, with the settings' overrides."""
    config: AnswerConfig | None = None
    if engine.policies.answer_model is not None:
        if engine.policies.answer_model == checksum:
            config = engine.policies.answer
        else:
            log.warning("tuned.json's answer grader was fitted with another answer model; using the shipped defaults "
                        "(run `quarry tune` again)")
    if config is None:
        config = shipped_defaults(settings.answer_model_path, checksum)
        if config is None:
            log.warning("no grader defaults fitted for this answer model; run `quarry tune` with QUARRY_GRADER=answer")
            config = AnswerConfig()
        elif shipped_cheap_grader(settings.answer_model_path) not in (None, engine.policies.grader.to_json()):
            log.warning("the answer grader's shipped defaults were fitted on another signal grader's scores than "
                        "this index uses: run `quarry tune` with QUARRY_GRADER=answer")
    if settings.answer_threshold is not None:
        config = replace(config, threshold=settings.answer_threshold)
    if settings.answer_passages is not None:
        config = replace(config, passages=settings.answer_passages)
    if not settings.answer_cascade:
        config = replace(config, skip_below=0.0, skip_above=1.0)
    return config


def make_grader(settings: Settings, engine: IndexView) -> AnswerGrader:
    scores = answer_scores(settings, engine)
    return AnswerGrader(scores, engine.policies.grader, answer_config(settings, engine, scores.checksum))


def make_reranker(settings: Settings, engine: IndexView) -> AnswerReranker:
    """The reranker `quarry tune` chose for this index (if it was tuned with this model), else
    20 candidates and no rank prior; the settings override either."""
    scores = answer_scores(settings, engine)
    tuned = engine.policies.rerank if engine.policies.rerank_model == scores.checksum else None
    base = tuned or RerankConfig(DEFAULT_TOP_N, 0.0, "defaults")
    top_n = base.top_n if settings.rerank_top_n is None else settings.rerank_top_n
    prior = base.rank_prior if settings.rerank_rank_prior is None else settings.rerank_rank_prior
    return AnswerReranker(scores, RerankConfig(top_n, prior, base.source))
