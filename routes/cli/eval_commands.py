"""`quarry eval` and `quarry tune`: labeled questions against an index, and fitting its policies."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from retrieval.errors import InvalidRequest
from retrieval.limits import check_k

if TYPE_CHECKING:
    from routes.service.service import Service
    from routes.service.settings import Settings

from routes.cli.common import _emit, _progress_bar


BEIR_K = 20  # eval's context size on a BEIR folder when --k is not given (nDCG@10 needs at least 10)


def _eval_target(args: argparse.Namespace, settings: Settings, progress: Callable[[str, int, int], None] | None):
    """(service, labels, k, beir root or None, index) for a labels file or a BEIR folder. A BEIR
    corpus is indexed into --index (or QUARRY_INDEX_DIR) when that holds no snapshot, else into
    --cache; a labels file needs an existing index. The service, its limits and the default date
    follow the settings, and a --k over max_k is refused before any question runs. The caller
    closes the service."""
    from indexes.beir import is_beir_dir
    from indexes.snapshot_load import current_snapshot_path
    from retrieval.errors import SnapshotError
    from routes.service.service import Service
    from routes.eval.evaluation import beir_index, beir_labels, ensure_beir_index, load_label_file

    target = Path(args.target)
    given = settings.index_dir if settings.source("index_dir") != "default" else None
    if target.is_dir() and is_beir_dir(target):
        k = check_k(args.k or BEIR_K, settings.limits)
        embedder = settings.embedder()
        index = (ensure_beir_index(target, embedder, given, progress) if given
                 else beir_index(target, embedder, Path(args.cache), progress))
        split = args.split if args.split != "all" else "test"
        return Service.open(settings, index, embedder=embedder), beir_labels(target, split), k, target, index
    if not target.is_file():
        raise InvalidRequest(f"{target}: no labels file or BEIR folder (corpus.jsonl, queries.jsonl, qrels/) there")
    if given is None:
        raise InvalidRequest(f"--index (or {settings.env_name('index_dir')}) is required with a labels file")
    k = check_k(args.k, settings.limits)
    try:
        current_snapshot_path(given)
    except SnapshotError as e:
        raise InvalidRequest(e.message) from None
    labels = load_label_file(target)
    if args.split != "all":
        labels = [lb for lb in labels if (lb.split or "train") == args.split]
    return Service.open(settings, given), labels, k, None, given


def _questions_progress(progress: Callable[[str, int, int], None] | None, total: int) -> Callable[[int], None] | None:
    if progress is None:
        return None
    progress("questions", 0, total)
    return lambda done: progress("questions", done, total)


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    """Score labeled questions (or a BEIR folder): JSON on stdout, progress and the wrong
    questions on stderr, report and plots in --report."""
    from routes.eval.evaluation import TOP, evaluate, failure_lines, write_report
    from routes.eval.reports import report_title

    progress = _progress_bar(not args.no_progress)
    service, labels, k, _, _ = _eval_target(args, settings, progress)
    try:
        result = evaluate(service, labels, k, _questions_progress(progress, len(labels)))
    finally:
        service.close()
    if args.report:
        write_report(result, Path(args.report), report_title(args.target))
    for name, kind in result["error_kinds"].items():
        print(f"ERRORS: {kind['count']} of {result['questions']} questions raised {name} ({kind['example']}); "
              "each counts as wrong in every figure", file=sys.stderr)
    print("\n".join(failure_lines(result)), file=sys.stderr)
    top = {m: result.get(m) for m in ("questions", "errors", *TOP) if m in result}
    _emit(top | {"error_kinds": result["error_kinds"], "leaks": result["leaks"]} if not args.full else result)
    if result["leakage"]:
        print(f"LEAKAGE: {result['leakage']} documents returned to principals who may not read them", file=sys.stderr)
        return 1
    return 0


def _evaluate_with(service: Service, policies: Any, test: Sequence[Any], k: int, progress: Any,
                   pick: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """The held-out questions through a service with `policies` over the same index."""
    from routes.eval.evaluation import evaluate

    with service.sibling(policies=policies) as tuned:
        return pick(evaluate(tuned, test, k, _questions_progress(progress, len(test))))


def cmd_tune(args: argparse.Namespace, settings: Settings) -> int:
    """Fit fusion, router and grader on the train split; report the test split before and after."""
    from routes.eval.evaluation import (TOP, ablate, ablated_index, beir_labels, evaluate, fit_policies, gap_accuracy,
                                   grader_got_worse, keep_grader, save_policies, split_labels, unambiguous)

    from routes.policies.answer_policy import DEFAULT_PASSAGES, configured

    progress = _progress_bar(not args.no_progress)
    service, labels, k, beir_root, index = _eval_target(args, settings, progress)
    report: dict[str, Any] = {"seed": args.seed}
    # the answer grader is fitted when the settings use the answer model (opening the service loaded it)
    answer: dict[str, Any] = {"settings": settings}
    scores = service.answer_scores
    if configured(settings, "grader") and scores is not None:
        answer |= {"answer": scores, "target_false_gap": settings.answer_target_false_gap,
                   "answer_passages": settings.answer_passages or DEFAULT_PASSAGES}
    if configured(settings, "reranker") and scores is not None:
        answer |= {"rerank": scores}
    pick = lambda r: {m: r.get(m) for m in TOP if r.get(m) is not None}  # noqa: E731
    try:
        if beir_root is None:
            train, test = split_labels(labels)
            report["before"] = pick(evaluate(service, test, k, _questions_progress(progress, len(test))))
            policies, notes = fit_policies(service, train, args.seed, **answer)
        else:
            train, test = beir_labels(beir_root, "train"), labels
            report["before"] = pick(evaluate(service, test, k, _questions_progress(progress, len(test))))
            hidden_train, hidden_docs = ablate(train, args.seed)
            ab_index = ablated_index(beir_root, hidden_docs, service.embedder,
                                     Path(args.cache) / f"{beir_root.name}-train-ablation", index, progress)
            with service.sibling(ab_index) as ablated:
                policies, notes = fit_policies(service, train, args.seed, tune_router=False, grader_service=ablated,
                                               sufficient_of=lambda lb, docs: lb.id not in hidden_train,
                                               grader_labels=unambiguous(train, hidden_train, hidden_docs), **answer)
            hidden_test, hidden_test_docs = ablate(test, args.seed + 1)
            te_index = ablated_index(beir_root, hidden_test_docs, service.embedder,
                                     Path(args.cache) / f"{beir_root.name}-test-ablation", index, progress)
            for name, pol in (("gaps_before", service.policies), ("gaps_after", policies)):
                with service.sibling(te_index, policies=pol) as ablated:
                    report[name] = gap_accuracy(ablated, unambiguous(test, hidden_test, hidden_test_docs), hidden_test)
        for warning in notes.get("warnings", ()):
            print(f"WARNING: {warning}", file=sys.stderr)
        report["after"] = _evaluate_with(service, policies, test, k, progress, pick)
        if grader_got_worse(report):  # a grader fitted on few labels must not undo the default's
            policies = keep_grader(policies, service.policies)
            notes["grader_kept"] = ("the tuned grader separated answerable from unanswerable held-out questions less "
                                    "well than the one in use; it was kept, the rest of the fit saved")
            print(f"WARNING: {notes['grader_kept']}", file=sys.stderr)
            report["after"] = _evaluate_with(service, policies, test, k, progress, pick)
        report["notes"] = notes
        report["saved"] = str(save_policies(index, policies, notes, args.seed))
    finally:
        service.close()
    _emit(report)
    return 0
