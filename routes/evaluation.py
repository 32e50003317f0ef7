"""`quarry eval` and `quarry tune`: run labeled questions (or a BEIR folder) through the loop,
score them, write JSON, a readable report and plots; fit and save tuned policies."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from datetime import date
from pathlib import Path
from typing import Any, Callable, Sequence

from indexes.beir import load_corpus_ids, load_qrels, load_queries
from indexes.embedder import Embedder
from indexes.snapshot import BuildOptions, Progress, build_snapshot, current_snapshot_path
from retrieval.constraints import Constraints
from retrieval.errors import SnapshotError
from retrieval.evaluate import (Label, Record, breakdown, confusion, error_record, parse_labels, record_for, summarize,
                                wrong_questions)
from retrieval.fusion import rrf
from retrieval.grader import evidence_features
from retrieval.metrics import doc_ranking, mean, ndcg_at_k
from retrieval.retrievers.hybrid import FusionParams
from retrieval.retrievers.sql import compare_rows
from retrieval.router import features
from retrieval.tune import best_fusion, fit_grader, fit_router
from retrieval.types import Filters, Hit, Principal
from routes.engine import TUNED_CONFIG, Engine, Policies, open_engine

READER = Principal("eval-reader")
TUNED_BACKUP = TUNED_CONFIG + ".bak"
MIN_TRAIN_QUESTIONS = 50  # below this, tuned parameters mostly fit noise: `tune` warns
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
            result = engine.query(label.question, principal, k=k, today=label.today)
        except Exception as e:  # noqa: BLE001 - an error is a scored outcome (a failure), not a crash of the run
            records.append(error_record(label, e, (time.perf_counter() - t0) * 1000))
        else:
            ms = (time.perf_counter() - t0) * 1000
            records.append(record_for(label, result, ms, lambda d: principal.can_read(acl_of(d) or ()), compare_rows))
        if progress:
            progress(i + 1)
    return records


def beir_labels(root: Path, split: str) -> list[Label]:
    """The split's queries as labels; a query whose id is also a corpus id (ArguAna: the
    argument itself) names that document as its own, for `ndcg@10_self_removed`."""
    queries, qrels, corpus_ids = load_queries(root), load_qrels(root, split), load_corpus_ids(root)
    return [Label(id=qid, question=queries[qid], principal=READER.id, relevant=tuple(sorted(rel)), answerable=True,
                  split=split, own_doc=qid if qid in corpus_ids else None) for qid, rel in qrels.items() if qid in queries]


def beir_index(root: Path, embedder: Embedder, cache: Path, progress: Progress | None = None) -> Path:
    """A cached index of a BEIR corpus (public documents), rebuilt when the corpus changes."""
    corpus = root / "corpus.jsonl"
    stat = corpus.stat()
    tag = hashlib.sha1(f"{corpus.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:10]
    return ensure_beir_index(root, embedder, cache / f"{root.name}-{tag}", progress)


def ensure_beir_index(root: Path, embedder: Embedder, index: Path, progress: Progress | None = None) -> Path:
    """`index`, built from the BEIR corpus (public documents) when it holds no loadable snapshot."""
    try:
        current_snapshot_path(index)
    except SnapshotError:  # missing or broken: build it
        index.mkdir(parents=True, exist_ok=True)
        build_snapshot([root / "corpus.jsonl"], index, embedder, BuildOptions(default_acl=("public",)), progress=progress)
    return index


def evaluate(engine: Engine, labels: Sequence[Label], k: int, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    records = run_labels(engine, labels, k, progress)
    out = summarize(records, k)
    out["confusion"] = confusion(records)
    out.update(breakdown(records, k))
    out["policies"] = {"router": engine.policies.router.source, "grader": engine.policies.grader.source}
    out["leaks"] = [{"id": r.label.id, "principal": r.label.principal, "docs": r.leaked} for r in records if r.leaked]
    out["error_kinds"] = _error_kinds(records)
    out["wrong"] = wrong_questions(records, k)
    out["wrong_questions"] = len(out["wrong"])
    return out


def _error_kinds(records: Sequence[Record]) -> dict[str, dict[str, Any]]:
    """Errors by class: how many, and the first message (say, the query limit that was hit)."""
    kinds: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.error:
            kinds.setdefault(r.error, {"count": 0, "example": r.error_message})["count"] += 1
    return kinds


# -- report ---------------------------------------------------------------------------------

TOP = ("route_accuracy", "gap_precision", "gap_recall", "gap_f1", "leakage", "ndcg@10", "ndcg@10_self_removed", "recall@k",
       "mrr", "full_support@k", "sql_exact", "constraint_preservation", "mean_attempts", "latency_p50_ms", "latency_p95_ms",
       "wrong_questions")


def _cell(value: Any) -> str:
    return "n/a" if value is None else str(value)


def plot_grouping(result: dict[str, Any]) -> tuple[str, str]:
    """(breakdown key, wording) of the per-route plots: the labeled route when the labels
    name one, else the route the router chose (BEIR folders carry no route labels)."""
    labeled = [name for name in result.get("per_route") or {} if name != "unlabeled"]
    return ("per_route", "labeled route") if labeled else ("per_chosen_route", "chosen route")


def write_report(result: dict[str, Any], directory: Path, title: str) -> list[Path]:
    """metrics.json, report.md and three PNG plots (confusion matrix, quality per route, latency)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "metrics.json", directory / "report.md"]
    paths[0].write_text(json.dumps(result, indent=2))
    group_key, group_name = plot_grouping(result)
    lines = [f"# {title}", "", "| metric | value |", "|---|---|"]
    lines += [f"| {m} | {_cell(result.get(m))} |" for m in ("questions", "errors", *TOP) if m in result]
    for name, kind in (result.get("error_kinds") or {}).items():
        lines += ["", f"{kind['count']} questions raised {name} (e.g. {kind['example']}); each counts as wrong in every figure."]
    if result.get("confusion"):
        routes = sorted({p for row in result["confusion"].values() for p in row} | set(result["confusion"]))
        lines += ["", "## Route confusion (rows: labeled, columns: chosen)", "",
                  "| labeled | " + " | ".join(routes) + " |", "|---|" + "---|" * len(routes)]
        for gold in routes:
            row = result["confusion"].get(gold, {})
            if row:
                lines.append(f"| {gold} | " + " | ".join(str(row.get(p, 0)) for p in routes) + " |")
    for section, heading in (("per_route", "Per labeled route"), ("per_chosen_route", "Per chosen route"), ("per_tag", "Per tag")):
        if result.get(section):
            lines += ["", f"## {heading}", "", "| group | n | route acc | gap F1 | nDCG@10 | recall@k | attempts | p50 ms |",
                      "|---|---|---|---|---|---|---|---|"]
            for name, m in result[section].items():
                lines.append(f"| {name} | {m['questions']} | " + " | ".join(_cell(m[c]) for c in (
                    "route_accuracy", "gap_f1", "ndcg@10", "recall@k", "mean_attempts", "latency_p50_ms")) + " |")
    if result.get("leaks"):
        lines += ["", "## LEAKS", ""] + [f"- {x}" for x in result["leaks"]]
    if "wrong" in result:
        lines += ["", f"## Wrong questions ({len(result['wrong'])})", "",
                  "| id | question | problems | expected | got | attempts |", "|---|---|---|---|---|---|"]
        lines += [f"| {w['id']} | {_md(w['question'])} | {', '.join(w['problems'])} | {_md(_expected(w))} | {_md(_got(w))} | "
                  f"{w['attempts']} ({' > '.join(w['trail'])}) |" for w in result["wrong"]]
    if result.get(group_key):
        lines += ["", f"Plots: quality_per_route.png and latency.png group questions by **{group_name}**"
                  + ("; confusion.png has labeled routes as rows, chosen routes as columns." if result.get("confusion") else ".")]
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
        paths.append(_save(fig, ax, "Route confusion (rows: labeled, columns: chosen)", directory / "confusion.png"))
    groups = result.get(group_key) or {}
    if groups:
        names = list(groups)
        fig, ax = plt.subplots(figsize=(6, 3.5))
        shown = [m for m in ("ndcg@10", "recall@k", "gap_f1") if any(groups[n].get(m) is not None for n in names)]
        for offset, metric in enumerate(shown):  # a metric undefined in every group (null) gets no bar
            vals = [groups[n].get(metric) or 0.0 for n in names]
            ax.bar([i + 0.27 * offset for i in range(len(names))], vals, width=0.27, label=metric)
        ax.set_xticks([i + 0.27 * (len(shown) - 1) / 2 for i in range(len(names))], names)
        ax.set_xlabel(group_name)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
        paths.append(_save(fig, ax, f"Quality per {group_name}", directory / "quality_per_route.png"))
        p50 = [groups[n]["latency_p50_ms"] or 0.0 for n in names]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.bar(names, p50, label="p50")
        ax.bar(names, [(groups[n]["latency_p95_ms"] or 0.0) - lo for n, lo in zip(names, p50)], bottom=p50, label="p95", alpha=0.5)
        ax.set_xlabel(group_name)
        ax.set_ylabel("ms")
        ax.legend(fontsize=8)
        paths.append(_save(fig, ax, f"Latency per {group_name}", directory / "latency.png"))
    return paths


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _expected(w: dict[str, Any]) -> str:
    e = w["expected"]
    return f"route {e['route'] or '-'}, {e['status']}" + (f", docs {', '.join(e['relevant'])}" if e["relevant"] else "")


def _got(w: dict[str, Any]) -> str:
    g = w["got"]
    if g.get("error"):
        return g["error"]
    out = f"route {g['route']}, {g['status']}" + (f" ({g['gap_reason']})" if g.get("gap_reason") else "")
    out += f", missing {', '.join(g['missing'])}" if g["missing"] else ""
    return out + (f", leaked {', '.join(g['leaked'])}" if g.get("leaked") else "")


def failure_lines(result: dict[str, Any], limit: int = 50) -> list[str]:
    """A readable list of the wrong questions (for stderr), at most `limit` of them."""
    wrong = result.get("wrong") or []
    lines = [f"wrong: {len(wrong)} of {result['questions']} questions"]
    for w in wrong[:limit]:
        q = w["question"] if len(w["question"]) <= 70 else w["question"][:67] + "..."
        lines.append(f"  {w['id']}: {', '.join(w['problems'])}; expected {_expected(w)}; got {_got(w)}; "
                     f"attempts {w['attempts']} ({' > '.join(w['trail']) or '-'}); {q!r}")
    if len(wrong) > limit:
        lines.append(f"  ... and {len(wrong) - limit} more (all of them in --report DIR/report.md and --full)")
    return lines


def _save(fig: Any, ax: Any, title: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Title": title})
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


def question_features(engine: Engine, question: str, principal: Principal, today: date | None = None
                      ) -> tuple[Constraints, dict[str, float]]:
    """A question's constraints and route features, read by the loop's own first step
    (relative dates against `today`, else the engine's date)."""
    read = engine.understand(question, principal, today)
    i = read.inputs
    return read.constraints, features(i.question, i.constraints, i.sql_linked, i.term_stats)


def first_attempt_evidence(engine: Engine, question: str, principal: Principal, k: int = 8, today: date | None = None
                           ) -> tuple[Constraints, list[Hit]]:
    """The passages a question's first attempt is graded on, from a one-attempt run of the
    loop itself (route, retrieval, date order, signals); none when rows answered it."""
    result = engine.query(question, principal, k=k, max_attempts=1, deadline_ms=engine.limits.max_deadline_ms, today=today)
    first = next((a for a in result.attempts if not a.rejected), None)
    if first is None or first.rows is not None:
        return result.constraints, []
    return result.constraints, list(first.hits)


def _route_rows(engine: Engine, labels: Sequence[Label]) -> tuple[list[dict[str, float]], list[str]]:
    labeled = [lb for lb in labels if lb.route]
    return [question_features(engine, lb.question, lb.principal_obj(), lb.today)[1] for lb in labeled], [lb.route for lb in labeled]


def _grade_rows(engine: Engine, labels: Sequence[Label], sufficient_of: Callable[[Label, list[str]], bool]
                ) -> tuple[list[dict[str, float]], list[bool]]:
    """Evidence features of each question's first attempt on its routed text retriever."""
    rows, ys = [], []
    for lb in labels:
        if lb.route == "sql" or lb.answer_rows is not None:
            continue
        constraints, hits = first_attempt_evidence(engine, lb.question, lb.principal_obj(), today=lb.today)
        if not hits:
            continue
        rows.append(evidence_features(lb.question, hits, constraints))
        ys.append(sufficient_of(lb, [h.doc_id for h in hits]))
    return rows, ys


def fit_policies(engine: Engine, train: Sequence[Label], seed: int, tune_router: bool = True,
                 grader_engine: Engine | None = None, sufficient_of: Callable[[Label, list[str]], bool] | None = None,
                 grader_labels: Sequence[Label] | None = None) -> tuple[Policies, dict[str, Any]]:
    """Fusion, then router, then grader (each fitted with the previous ones in place).
    `notes["warnings"]` says when the training set is too small to trust the fits."""
    notes: dict[str, Any] = {}
    if len(train) < MIN_TRAIN_QUESTIONS:
        notes["warnings"] = [f"only {len(train)} training questions (fewer than {MIN_TRAIN_QUESTIONS}): "
                             "the tuned parameters may fit noise; label more questions before trusting them"]
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
    """Write tuned.json atomically; serve, query and mcp load it from the index directory.
    A previous tuned.json is kept as tuned.json.bak (copy it back to undo a tuning run)."""
    data = {"router": policies.router.to_json(), "grader": policies.grader.to_json(),
            "fusion": {"rrf_k": policies.fusion.rrf_k, "depth": policies.fusion.depth, "weights": dict(policies.fusion.weights)},
            "seed": seed, "notes": notes}
    path = index_dir / TUNED_CONFIG
    if path.is_file():  # tuned.json stays in place until the new one replaces it
        backup = path.with_name(TUNED_BACKUP)
        shutil.copyfile(path, backup.with_suffix(".tmp"))
        os.replace(backup.with_suffix(".tmp"), backup)
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


def ablated_index(root: Path, hidden_docs: set[str], embedder: Embedder, work: Path, reuse_from: Path,
                  progress: Progress | None = None) -> Path:
    """A copy of a BEIR corpus whose hidden documents are readable by nobody who asks."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    with (root / "corpus.jsonl").open() as src, corpus.open("w") as dst:
        for line in src:
            d = json.loads(line)
            d["acl"] = ["group:ablated"] if d["_id"] in hidden_docs else ["public"]
            dst.write(json.dumps(d) + "\n")
    index = work / "index"
    build_snapshot([corpus], index, embedder, BuildOptions(reuse_from=reuse_from), progress=progress)
    return index


def gap_accuracy(engine: Engine, labels: Sequence[Label], hidden_ids: set[str], k: int = 8,
                 max_attempts: int | None = None) -> dict[str, float]:
    """Share of evidence gaps on hidden-gold questions and of answers on the others."""
    kept = [lb for lb in labels if lb.id not in hidden_ids]  # pass unambiguous() labels
    hidden = [lb for lb in labels if lb.id in hidden_ids]
    ask = lambda lb: engine.query(lb.question, lb.principal_obj(), k=k, max_attempts=max_attempts,  # noqa: E731
                                  today=lb.today).status
    gap_hidden = mean(ask(lb) == "evidence_gap" for lb in hidden)
    ans_kept = mean(ask(lb) == "answer_context" for lb in kept)
    return {"gap_on_ablated": round(gap_hidden, 4), "answer_on_rest": round(ans_kept, 4),
            "balanced_accuracy": round((gap_hidden + ans_kept) / 2, 4), "ablated": len(hidden), "rest": len(kept)}


def load_label_file(path: Path) -> list[Label]:
    return parse_labels(path.read_text(encoding="utf-8"), str(path))
