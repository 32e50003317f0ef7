"""`quarry eval` and `quarry tune`: run labeled questions (or a BEIR folder) through the loop,
score them, write JSON, a readable report and plots; fit and save tuned policies."""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from indexes.beir import load_qrels, load_queries
from indexes.embedder import Embedder
from indexes.snapshot import BuildOptions, build_snapshot, current_snapshot_path
from retrieval.constraints import Constraints, extract
from retrieval.evaluate import Label, Record, breakdown, confusion, parse_labels, record_for, summarize
from retrieval.fusion import rrf
from retrieval.grader import evidence_features
from retrieval.metrics import doc_ranking, mean, ndcg_at_k
from retrieval.retrievers.hybrid import FusionParams
from retrieval.retrievers.sql import compare_rows
from retrieval.router import features, route
from retrieval.tune import best_fusion, fit_grader, fit_router
from retrieval.types import Filters, Hit, Principal
from routes.engine import TUNED_CONFIG, Engine, Policies, open_engine

READER = Principal("eval-reader")
FUSION_GRID = [(k, w) for k in (10, 30, 60, 100) for w in (0.6, 0.8, 1.0, 1.25, 1.5)]


# -- running ----------------------------------------------------------------------------------

def run_labels(engine: Engine, labels: Sequence[Label], k: int, progress: Callable[[int], None] | None = None) -> list[Record]:
    catalog = engine.snapshot.catalog
    acl_cache: dict[str, tuple[str, ...] | None] = {}

    def acl_of(doc_id: str) -> tuple[str, ...] | None:
        if doc_id not in acl_cache:
            doc = catalog.document(doc_id)
            acl_cache[doc_id] = doc.acl if doc else None
        return acl_cache[doc_id]

    records = []
    for i, label in enumerate(labels):
        principal = label.principal_obj()
        t0 = time.perf_counter()
        try:
            result = engine.query(label.question, principal, k=k)
        except Exception as e:  # noqa: BLE001 - an error is a scored outcome, not a crash of the run
            records.append(Record(label, None, None, None, [], 0, (time.perf_counter() - t0) * 1000, error=type(e).__name__))
            continue
        ms = (time.perf_counter() - t0) * 1000
        records.append(record_for(label, result, ms, lambda d: principal.can_read(acl_of(d) or ()), compare_rows))
        if progress:
            progress(i + 1)
    return records


def beir_labels(root: Path, split: str) -> list[Label]:
    queries, qrels = load_queries(root), load_qrels(root, split)
    return [Label(id=qid, question=queries[qid], principal=READER.id, relevant=tuple(sorted(rel)), answerable=True,
                  split=split) for qid, rel in qrels.items() if qid in queries]


def beir_index(root: Path, embedder: Embedder, cache: Path) -> Path:
    """A cached index of a BEIR corpus (public documents), rebuilt when the corpus changes."""
    corpus = root / "corpus.jsonl"
    stat = corpus.stat()
    tag = hashlib.sha1(f"{corpus.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:10]
    index = cache / f"{root.name}-{tag}"
    try:
        current_snapshot_path(index)
    except Exception:  # noqa: BLE001 - missing or broken: build it
        build_snapshot([corpus], index, embedder, BuildOptions(default_acl=("public",)))
    return index


def evaluate(engine: Engine, labels: Sequence[Label], k: int, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    records = run_labels(engine, labels, k, progress)
    out = summarize(records, k)
    out["confusion"] = confusion(records)
    out.update(breakdown(records, k))
    out["policies"] = {"router": engine.policies.router.source, "grader": engine.policies.grader.source}
    out["leaks"] = [{"id": r.label.id, "principal": r.label.principal, "docs": r.leaked} for r in records if r.leaked]
    out["failures"] = [{"id": r.label.id, "error": r.error} for r in records if r.error]
    return out


# -- report ---------------------------------------------------------------------------------

TOP = ("route_accuracy", "gap_precision", "gap_recall", "gap_f1", "leakage", "ndcg@10", "recall@k", "mrr", "full_support@k",
       "sql_exact", "constraint_preservation", "mean_attempts", "latency_p50_ms", "latency_p95_ms")


def write_report(result: dict[str, Any], directory: Path, title: str) -> list[Path]:
    """metrics.json, report.md and three PNG plots (confusion matrix, quality per route, latency)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "metrics.json", directory / "report.md"]
    paths[0].write_text(json.dumps(result, indent=2))
    lines = [f"# {title}", "", "| metric | value |", "|---|---|"]
    lines += [f"| {m} | {result.get(m)} |" for m in TOP if m in result]
    if result.get("confusion"):
        routes = sorted({p for row in result["confusion"].values() for p in row} | set(result["confusion"]))
        lines += ["", "## Route confusion (rows: labeled, columns: chosen)", "",
                  "| labeled | " + " | ".join(routes) + " |", "|---|" + "---|" * len(routes)]
        for gold in routes:
            row = result["confusion"].get(gold, {})
            if row:
                lines.append(f"| {gold} | " + " | ".join(str(row.get(p, 0)) for p in routes) + " |")
    for section in ("per_route", "per_tag"):
        if result.get(section):
            lines += ["", f"## {section.replace('_', ' ')}", "", "| group | n | route acc | gap F1 | nDCG@10 | recall@k | attempts | p50 ms |",
                      "|---|---|---|---|---|---|---|---|"]
            for name, m in result[section].items():
                lines.append(f"| {name} | {m['questions']} | {m['route_accuracy']} | {m['gap_f1']} | {m['ndcg@10']} | "
                             f"{m['recall@k']} | {m['mean_attempts']} | {m['latency_p50_ms']} |")
    if result.get("leaks"):
        lines += ["", "## LEAKS", ""] + [f"- {x}" for x in result["leaks"]]
    paths[1].write_text("\n".join(lines) + "\n")

    if result.get("confusion"):
        routes = sorted({p for row in result["confusion"].values() for p in row} | set(result["confusion"]))
        grid = [[result["confusion"].get(g, {}).get(p, 0) for p in routes] for g in routes]
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.imshow(grid, cmap="Blues")
        ax.set_xticks(range(len(routes)), routes, rotation=45)
        ax.set_yticks(range(len(routes)), routes)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, str(v), ha="center", va="center")
        ax.set_xlabel("chosen route")
        ax.set_ylabel("labeled route")
        paths.append(_save(fig, ax, "Route confusion", directory / "confusion.png"))
    if result.get("per_route"):
        names = list(result["per_route"])
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for offset, metric in enumerate(("ndcg@10", "recall@k", "gap_f1")):
            vals = [result["per_route"][n].get(metric) or 0.0 for n in names]
            ax.bar([i + 0.27 * offset for i in range(len(names))], vals, width=0.27, label=metric)
        ax.set_xticks([i + 0.27 for i in range(len(names))], names)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
        paths.append(_save(fig, ax, "Quality per labeled route", directory / "quality_per_route.png"))
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.bar(names, [result["per_route"][n]["latency_p50_ms"] for n in names], label="p50")
        ax.bar(names, [result["per_route"][n]["latency_p95_ms"] - result["per_route"][n]["latency_p50_ms"] for n in names],
               bottom=[result["per_route"][n]["latency_p50_ms"] for n in names], label="p95", alpha=0.5)
        ax.set_ylabel("ms")
        ax.legend(fontsize=8)
        paths.append(_save(fig, ax, "Latency per labeled route", directory / "latency.png"))
    return paths


def _save(fig: Any, ax: Any, title: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- tuning ---------------------------------------------------------------------------------

def _fusion_scores(engine: Engine, labels: Sequence[Label]) -> dict[tuple[int, float], float]:
    ranked = [lb for lb in labels if lb.answerable and lb.relevant]
    lists = []
    for lb in ranked:
        p = lb.principal_obj()
        lists.append((engine.retrievers["bm25"].search(lb.question, p, 100, Filters()),
                      engine.retrievers["dense"].search(lb.question, p, 100, Filters()), lb))
    scores = {}
    for rrf_k, w in FUSION_GRID:
        scores[(rrf_k, w)] = mean(ndcg_at_k(doc_ranking(rrf({"bm25": b, "dense": d}, k=rrf_k, weights={"bm25": w, "dense": 1.0},
                                                            limit=100)), {x: 1.0 for x in lb.relevant}, 10)
                                  for b, d, lb in lists) if lists else 0.0
    return scores


def question_features(engine: Engine, question: str, principal: Principal) -> tuple[Constraints, dict[str, float]]:
    """A question's constraints and route features, as the loop computes them."""
    deps = engine.deps
    constraints = extract(question, deps.today(), engine.find_entities(question, principal))
    linked = deps.sql_rows is not None and deps.sql_linked(question, principal, None)
    stats = deps.term_stats(question, principal) if deps.term_stats else None
    return constraints, features(question, constraints, linked, stats)


def first_attempt_evidence(engine: Engine, question: str, principal: Principal, k: int = 8
                           ) -> tuple[Constraints, list[Hit]]:
    """The scored hits of a question's first attempt on the text route the router picks."""
    deps = engine.deps
    constraints, feats = question_features(engine, question, principal)
    chosen = route(feats, deps.router, list(deps.retrievers)).chosen
    return constraints, deps.annotate(question, deps.retrievers[chosen].search(question, principal, k, Filters()), principal)


def _route_rows(engine: Engine, labels: Sequence[Label]) -> tuple[list[dict[str, float]], list[str]]:
    labeled = [lb for lb in labels if lb.route]
    return [question_features(engine, lb.question, lb.principal_obj())[1] for lb in labeled], [lb.route for lb in labeled]


def _grade_rows(engine: Engine, labels: Sequence[Label], sufficient_of: Callable[[Label, list[str]], bool]
                ) -> tuple[list[dict[str, float]], list[bool]]:
    """Evidence features of each question's first attempt on its routed text retriever."""
    rows, ys = [], []
    for lb in labels:
        if lb.route == "sql" or lb.answer_rows is not None:
            continue
        constraints, hits = first_attempt_evidence(engine, lb.question, lb.principal_obj())
        if not hits:
            continue
        rows.append(evidence_features(lb.question, hits, constraints))
        ys.append(sufficient_of(lb, [h.doc_id for h in hits]))
    return rows, ys


def fit_policies(engine: Engine, train: Sequence[Label], seed: int, tune_router: bool = True,
                 grader_engine: Engine | None = None, sufficient_of: Callable[[Label, list[str]], bool] | None = None,
                 grader_labels: Sequence[Label] | None = None) -> tuple[Policies, dict[str, Any]]:
    """Fusion, then router, then grader (each fitted with the previous ones in place)."""
    notes: dict[str, Any] = {}
    scores = _fusion_scores(engine, train)
    rrf_k, w = best_fusion(scores)
    fusion = FusionParams(rrf_k=rrf_k, depth=100, weights={"bm25": w, "dense": 1.0})
    notes["fusion"] = {"rrf_k": rrf_k, "bm25_weight": w, "train_ndcg@10": round(scores[(rrf_k, w)], 4),
                       "train_ndcg@10_default": round(scores.get((60, 1.0), 0.0), 4)}
    router = engine.policies.router
    if tune_router:
        rows, routes = _route_rows(engine, train)
        if rows:
            router = fit_router(rows, routes, seed)
            notes["router_train_examples"] = len(rows)
    policies = Policies(router, engine.policies.grader, fusion)
    g_engine = grader_engine or engine
    tuned_g = open_engine(g_engine.snapshot.path.parent.parent, g_engine.embedder, g_engine.limits, g_engine.today, policies)
    try:
        suff = sufficient_of or (lambda lb, docs: lb.answerable and bool(set(lb.relevant) & set(docs)))
        rows, ys = _grade_rows(tuned_g, grader_labels or train, suff)
    finally:
        tuned_g.close()
    fit = fit_grader(rows, ys, engine.policies.grader, seed)
    notes["grader"] = {"train_examples": len(ys), "train_sufficient": int(sum(ys)),
                       "train_balanced_accuracy": round(fit.train_balanced_accuracy, 4), "threshold": fit.config.threshold}
    return Policies(router, fit.config, fusion), notes


def save_policies(index_dir: Path, policies: Policies, notes: dict[str, Any], seed: int) -> Path:
    """Write tuned.json atomically; serve, query and mcp load it from the index directory."""
    data = {"router": policies.router.to_json(), "grader": policies.grader.to_json(),
            "fusion": {"rrf_k": policies.fusion.rrf_k, "depth": policies.fusion.depth, "weights": dict(policies.fusion.weights)},
            "seed": seed, "notes": notes}
    path = index_dir / TUNED_CONFIG
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)
    return path


def split_labels(labels: Sequence[Label]) -> tuple[list[Label], list[Label]]:
    train = [lb for lb in labels if lb.split in (None, "train")]
    test = [lb for lb in labels if lb.split == "test"]
    return train, test


def ablate(labels: Sequence[Label], seed: int) -> tuple[set[str], set[str]]:
    """Hide the relevant documents of a random half of the labels: (hidden label ids, hidden docs)."""
    order = sorted(lb.id for lb in labels if lb.relevant)
    random.Random(seed).shuffle(order)
    hidden_ids = set(order[: len(order) // 2])
    hidden_docs = {d for lb in labels if lb.id in hidden_ids for d in lb.relevant}
    return hidden_ids, hidden_docs


def unambiguous(labels: Sequence[Label], hidden_ids: set[str], hidden_docs: set[str]) -> list[Label]:
    """Labels whose status is clear after an ablation: hidden ones, and kept ones none of whose
    relevant documents was hidden by another label's ablation."""
    return [lb for lb in labels if lb.id in hidden_ids or not set(lb.relevant) & hidden_docs]


def ablated_index(root: Path, hidden_docs: set[str], embedder: Embedder, work: Path, reuse_from: Path) -> Path:
    """A copy of a BEIR corpus whose hidden documents are readable by nobody who asks."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    with (root / "corpus.jsonl").open() as src, corpus.open("w") as dst:
        for line in src:
            d = json.loads(line)
            d["acl"] = ["group:ablated"] if d["_id"] in hidden_docs else ["public"]
            dst.write(json.dumps(d) + "\n")
    index = work / "index"
    build_snapshot([corpus], index, embedder, BuildOptions(reuse_from=reuse_from))
    return index


def gap_accuracy(engine: Engine, labels: Sequence[Label], hidden_ids: set[str], k: int = 8,
                 max_attempts: int | None = None) -> dict[str, float]:
    """Share of evidence gaps on hidden-gold questions and of answers on the others."""
    kept = [lb for lb in labels if lb.id not in hidden_ids]  # pass unambiguous() labels
    hidden = [lb for lb in labels if lb.id in hidden_ids]
    ask = lambda lb: engine.query(lb.question, lb.principal_obj(), k=k, max_attempts=max_attempts).status  # noqa: E731
    gap_hidden = mean(ask(lb) == "evidence_gap" for lb in hidden)
    ans_kept = mean(ask(lb) == "answer_context" for lb in kept)
    return {"gap_on_ablated": round(gap_hidden, 4), "answer_on_rest": round(ans_kept, 4),
            "balanced_accuracy": round((gap_hidden + ans_kept) / 2, 4), "ablated": len(hidden), "rest": len(kept)}


def load_label_file(path: Path) -> list[Label]:
    return parse_labels(path.read_text(encoding="utf-8"), str(path))
