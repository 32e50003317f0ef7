"""The untuned grader on domains it was not fitted on: leave one domain out.

    .venv/bin/python benchmarks/domains.py [--domains demo,waterworks,contracts,product,retail]
                                           [--target 0.2] [--features z_top,...] [--sweep 0.05,0.1]

Each domain is a folder of eval_data/ (documents, tables, labeled questions). For every
domain D, a grader is fitted across all the other domains (retrieval.tune.fit_domains_grader
on their first attempts, each domain weighing the same) and the whole loop is run on D's
questions with it, untuned, beside the grader of the previous release (`PREVIOUS`, the
hand-set weights) in the same process. Per domain and pooled:

- false gaps: answerable text questions that ended as an evidence gap;
- table false gaps: answerable table questions that ended as a gap (the SQL route's share);
- gap recall: unanswerable and forbidden-only questions that ended as a gap; forbidden-only
  (bait) recall on its own;
- leakage: documents returned that the asker may not read (must be 0);
- nDCG@10 over answerable questions with relevant documents.

The fit on every domain together is what the service ships (`GraderConfig()`); the run says
whether the shipped defaults equal it. Every question runs with a 30 s deadline, so a busy
machine does not turn a slow question into a gap. Writes benchmarks/results/domains.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
from datetime import date
from typing import Any, Sequence

from benchmarks.common import ROOT, build_or_reuse, machine, make_embedder, write_json
from retrieval.evaluate import Label, Record, summarize
from benchmarks.grader_signals import auc
from retrieval.answer_level import AnswerScores
from retrieval.grader import GraderConfig, relevance
from retrieval.limits import Limits
from retrieval.tune import SCALE_FREE_FEATURES, DomainRows, fit_domains_grader
from routes.service.view import open_view
from routes.service.tuned import Policies
from routes.eval.evaluation import load_label_file, run_labels
from routes.eval.tuning import GradeRows, grade_rows
from routes.service.service import Service

DOMAINS = ("demo", "waterworks", "contracts", "product", "retail")
TODAY = date(2025, 11, 1)
LIMITS = Limits(default_deadline_ms=30000)
# The grader of the previous release: hand-set on demo questions and SciFact train claims.
PREVIOUS = GraderConfig(bias=-3.0, weights={
    "top_dense": 0.6, "dense_margin": 2.7, "mean_dense_top3": 0.0, "top_coverage": 1.0, "agreement": 0.0,
    "top_bm25": 1.7, "top_qcov": 0.0, "qcov_dense": 3.5, "literal_share": 3.0}, threshold=0.55, source="previous")


def sources_of(folder: Path) -> list[Path]:
    """A domain folder's documents, and its tables when it has any."""
    return [folder / "docs"] + ([folder / "tables"] if (folder / "tables").is_dir() else [])


def kind(label: Label) -> str:
    if "bait" in label.tags:
        return "bait"
    if label.route == "sql" or label.answer_rows is not None:
        return "table"
    return "answerable" if label.answerable else "unanswerable"


def sufficient(label: Label, docs: list[str]) -> bool:
    return label.answerable and bool(set(label.relevant) & set(docs))


def outcome(records: Sequence[Record]) -> dict[str, Any]:
    """False gaps, gap recall, bait recall, leakage and nDCG@10 of one run (see the docstring)."""
    def share(kinds: tuple[str, ...]) -> tuple[int, int]:
        rs = [r for r in records if kind(r.label) in kinds]
        return sum(r.status == "evidence_gap" for r in rs), len(rs)

    fg, ans = share(("answerable",))
    tfg, tables = share(("table",))
    caught, gaps = share(("unanswerable", "bait"))
    bait, baits = share(("bait",))
    summary = summarize(records, 8)
    return {"false_gaps": fg, "answerable": ans, "table_false_gaps": tfg, "tables": tables, "gaps_caught": caught,
            "gap_questions": gaps, "bait_caught": bait, "bait": baits, "leakage": summary["leakage"],
            "ndcg@10": summary["ndcg@10"], "latency_p50_ms": summary["latency_p50_ms"],
            "errors": sum(bool(r.error) for r in records)}


def rates(o: dict[str, Any]) -> str:
    return (f"false gaps {o['false_gaps']}/{o['answerable']} ({o['false_gaps'] / max(1, o['answerable']):.3f}), "
            f"gap recall {o['gaps_caught']}/{o['gap_questions']} ({o['gaps_caught'] / max(1, o['gap_questions']):.3f}), "
            f"bait {o['bait_caught']}/{o['bait']}, tables gapped {o['table_false_gaps']}/{o['tables']}, "
            f"leakage {o['leakage']}, nDCG@10 {o['ndcg@10']}")


def pooled(outs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    keys = ("false_gaps", "answerable", "table_false_gaps", "tables", "gaps_caught", "gap_questions", "bait_caught", "bait",
            "leakage", "errors")
    out: dict[str, Any] = {k: sum(o[k] for o in outs) for k in keys}
    out["false_gap_rate"] = round(out["false_gaps"] / max(1, out["answerable"]), 4)
    out["gap_recall"] = round(out["gaps_caught"] / max(1, out["gap_questions"]), 4)
    out["bait_recall"] = round(out["bait_caught"] / max(1, out["bait"]), 4)
    return out


def signal_aucs(names: Sequence[str], rows: dict[str, DomainRows], graded: dict[str, GradeRows], target: float,
                features: Sequence[str]) -> dict[str, dict[str, float]]:
    """AUC for "this first attempt was sufficient", per domain, of the previous default's score,
    the score fitted on the other domains, and the answer model's best probability over the
    top 3 passages (the shipped model, one pair per run)."""
    from indexes.answer_model import AnswerModel
    from routes.policies.answer_policy import ModelScorer

    scores = AnswerScores(ModelScorer(AnswerModel.load()))
    out = {}
    for held in names:
        fitted = fit_domains_grader([rows[d] for d in names if d != held], target, features)
        g = graded[held]
        y = list(g.sufficient)
        model = [max(scores.of(q, t[:3])) for q, t in zip(g.questions, g.tops, strict=True)]
        out[held] = {"previous": round(auc([relevance(r, PREVIOUS) for r in g.rows], y), 4),
                     "left_out_fit": round(auc([relevance(r, fitted) for r in g.rows], y), 4),
                     "answer_model": round(auc(model, y), 4), "first_attempts": len(y)}
        print(f"{held}: first-attempt AUC {out[held]}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", default=",".join(DOMAINS))
    ap.add_argument("--target", type=float, default=0.2, help="false-gap rate the fit's threshold aims at")
    ap.add_argument("--features", default=",".join(SCALE_FREE_FEATURES))
    ap.add_argument("--sweep", default="", help="more targets (comma-separated) to run leave-one-domain-out, pooled only")
    ap.add_argument("--auc", action="store_true", help="also the AUC of each signal on each domain's first attempts "
                    "(previous score, left-out fit, answer model over the top 3 passages)")
    ap.add_argument("--markdown-sections", action="store_true", help="ingest with Markdown headings as sections")
    args = ap.parse_args()
    names = [d for d in args.domains.split(",") if d]
    features = [f for f in args.features.split(",") if f]
    embedder = make_embedder()
    indexes, labels, rows, graded = {}, {}, {}, {}
    for name in names:
        folder = ROOT / "eval_data" / name
        indexes[name] = (build_or_reuse(f"{name}-sections", sources_of(folder), embedder, markdown_sections=True)[0]
                         if args.markdown_sections else build_or_reuse(name, sources_of(folder), embedder)[0])
        labels[name] = load_label_file(folder / "questions.jsonl")
        engine = open_view(indexes[name], embedder, LIMITS, TODAY, Policies(grader=PREVIOUS))
        try:
            g = grade_rows(Service.serving(engine), labels[name], sufficient)
        finally:
            engine.close()
        rows[name] = DomainRows(name, g.rows, g.sufficient)
        graded[name] = g
        print(f"{name}: {len(labels[name])} questions, {len(g.rows)} first attempts, {sum(g.sufficient)} sufficient", flush=True)

    def run(name: str, config: GraderConfig) -> dict[str, Any]:
        engine = open_view(indexes[name], embedder, LIMITS, TODAY, Policies(grader=config))
        try:
            return outcome(run_labels(Service.serving(engine), labels[name], 8))
        finally:
            engine.close()

    result: dict[str, Any] = {"machine": machine(), "target_false_gap": args.target, "features": features, "domains": {}}
    for held in names:
        fitted = fit_domains_grader([rows[d] for d in names if d != held], args.target, features)
        before, after = run(held, PREVIOUS), run(held, fitted)
        result["domains"][held] = {"before": before, "after": after, "config": fitted.to_json()}
        others = ", ".join(d for d in names if d != held)
        print(f"\n{held} (fitted on {others})\n  before: {rates(before)}\n  after:  {rates(after)}", flush=True)
    for when in ("before", "after"):
        result[f"pooled_{when}"] = pooled([result["domains"][d][when] for d in names])
        p = result[f"pooled_{when}"]
        print(f"\npooled {when}: false-gap rate {p['false_gap_rate']}, gap recall {p['gap_recall']}, bait recall "
              f"{p['bait_recall']}, leakage {p['leakage']}")
    if args.auc:
        result["auc"] = signal_aucs(names, rows, graded, args.target, features)
    result["sweep"] = {}
    for target in (float(t) for t in args.sweep.split(",") if t):
        p = pooled([run(held, fit_domains_grader([rows[d] for d in names if d != held], target, features)) for held in names])
        result["sweep"][str(target)] = p
        print(f"target {target}: pooled false-gap rate {p['false_gap_rate']}, gap recall {p['gap_recall']}, "
              f"bait recall {p['bait_recall']}, leakage {p['leakage']}", flush=True)
    shipped = fit_domains_grader([rows[d] for d in names], args.target, features)
    result["fit_all"] = shipped.to_json()
    current = GraderConfig()
    names_weighted = {*current.weights, *shipped.weights}
    same = all(abs(current.weights.get(f, 0.0) - shipped.weights.get(f, 0.0)) < 1e-4 for f in names_weighted) \
        and abs(current.bias - shipped.bias) < 1e-4 and abs(current.threshold - shipped.threshold) < 1e-4
    result["shipped_defaults_equal_fit"] = same
    print(f"\nfit on every domain ({'equal to' if same else 'DIFFERS from'} the shipped GraderConfig()):\n  {shipped.to_json()}")
    write_json("domains", result)


if __name__ == "__main__":
    main()
