"""The policies an index is served with: router, grader and fusion parameters, the defaults or
what `quarry tune` fitted, kept and saved beside the snapshots (tuned.json).

A fit that `quarry tune` refused (worse, or not better beyond the noise, on the held-out
split) is written to tuned.refused.json, which nothing loads; a tuned.json marked
`"kept": false` (one copied over by hand) is refused at load with a clear error rather than
served."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from retrieval.answer_level import AnswerConfig, RerankConfig
from retrieval.errors import SnapshotError
from retrieval.grader import GraderConfig
from retrieval.retrievers.hybrid import FusionParams
from retrieval.router import RouterConfig

TUNED_CONFIG = "tuned.json"  # written by `quarry tune` into the index directory, only for a kept fit
TUNED_REFUSED = "tuned.refused.json"  # a fit `quarry tune` refused, for reading; never loaded


@dataclass(frozen=True)
class Policies:
    """Router, grader and fusion parameters: defaults, or what `quarry tune` fitted."""

    router: RouterConfig = field(default_factory=RouterConfig)
    grader: GraderConfig = field(default_factory=GraderConfig)
    fusion: FusionParams = field(default_factory=FusionParams)
    answer: AnswerConfig = field(default_factory=AnswerConfig)  # the answer grader's, when it is used
    answer_model: str | None = None  # sha256 of the answer model `answer` was fitted with
    rerank: RerankConfig | None = None  # what `quarry tune` chose for the answer reranker
    rerank_model: str | None = None  # sha256 of the answer model it was chosen with

    @classmethod
    def load(cls, index_dir: Path, fusion: FusionParams = FusionParams()) -> Policies:
        """What `quarry tune` saved in the index, else the defaults with `fusion` (the settings')."""
        path = index_dir / TUNED_CONFIG
        if not path.is_file():
            return cls(fusion=fusion)
        data = json.loads(path.read_text())
        if data.get("kept", True) is not True:  # files from before the keep rule carry no mark
            reason = (data.get("judgement") or {}).get("reason", "no reason recorded")
            raise SnapshotError(f"{TUNED_CONFIG} in the index directory holds a fit that `quarry tune` refused ({reason}); "
                                f"remove it (or restore {TUNED_CONFIG}.bak) to serve the policies in use")
        tuned = data.get("fusion") or {}
        answer, rerank = data.get("answer"), data.get("rerank")
        return cls(RouterConfig.from_json(data["router"]), GraderConfig.from_json(data["grader"]),
                   FusionParams(rrf_k=int(tuned.get("rrf_k", fusion.rrf_k)), depth=int(tuned.get("depth", fusion.depth)),
                                weights=dict(tuned.get("weights", fusion.weights)),
                                method=str(tuned.get("method", fusion.method))),
                   AnswerConfig.from_json(answer["config"]) if answer else AnswerConfig(),
                   answer["model_sha256"] if answer else None,
                   RerankConfig.from_json(rerank["config"]) if rerank else None, rerank["model_sha256"] if rerank else None)
