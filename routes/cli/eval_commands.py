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

from routes.cli.common import emit, progress_bar


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

    progress = progress_bar(not args.no_progress)
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
    emit(top | {"error_kinds": result["error_kinds"], "leaks": result["leaks"]} if not args.full else result)
    if result["leakage"]:
        print(f"LEAKAGE: {result['leakage']} documents returned to principals who may not read them", file=sys.stderr)
        return 1
    return 0


def _run_with(service: Service, policies: Any, test: Sequence[Any], k: int, progress: Any) -> list[Any]:
    """The held-out questions' records through a service with `policies` over the same index."""
    from routes.eval.evaluation import run_labels

    with service.sibling(policies=policies) as tuned:
        return run_labels(tuned, test, k, _questions_progress(progress, len(test)))


def judgement_lines(verdict: Any) -> list[str]:
    """The keep rule's verdict as a few readable lines (stderr of `quarry tune`)."""
    from retrieval.keep_rule import MIN_QUESTIONS

    lines = [f"held-out judgement: fit {'KEPT' if verdict.keep else 'REFUSED'}",
             f"  {'figure':<12} {'before':>6} {'after':>6} {'of':>4} {'harm':>7} {'90% upper':>10} {'sign p':>7}"]
    for f in verdict.figures:
        mark = "worse" if f.worse else "better" if f.better else \
            f"too few (< {MIN_QUESTIONS})" if f.questions < MIN_QUESTIONS else "within noise"
        lines.append(f"  {f.name.replace('_', ' '):<12} {f.before:>6} {f.after:>6} {f.questions:>4} {f.harm:>+7.3f} "
                     f"{f.harm_upper:>+10.3f} {f.sign_p:>7.3f}  {mark}")
    return lines + [f"  {verdict.reason}"]


def _with_feedback(args: argparse.Namespace, settings: Settings, labels: list[Any], beir_root: Path | None, index: Path,
                   report: dict[str, Any]) -> list[Any]:
    """The labels with those of the apps' feedback (routes/eval/feedback_labels.py); what was
    read goes into `report["feedback"]`."""
    from routes.eval.feedback_labels import with_feedback

    if beir_root is not None:
        raise InvalidRequest("--feedback adds to a labels file; a BEIR folder's labels are its qrels")
    out, report["feedback"] = with_feedback(labels, settings.audit_path or index / "audit.duckdb", args.split)
    summary = report["feedback"]
    print(f"feedback: {summary['labels']} labeled questions from {summary['rows']} feedback rows "
          f"({summary['train']} train, {summary['test']} held out)", file=sys.stderr)
    if summary["without_question"]:
        print(f"WARNING: {summary['without_question']} feedback rows were left out: the audit log kept no question text "
              "for their answers (set audit_questions on the server)", file=sys.stderr)
    return out


def cmd_tune(args: argparse.Namespace, settings: Settings) -> int:
    """Fit fusion, router and grader on the train split; report the test split before and after;
    save the fit only if the keep rule (retrieval.keep_rule) keeps it."""
    from retrieval.keep_rule import HeldOut, judge
    from routes.eval.evaluation import (TOP, ablate, ablated_index, beir_labels, fit_policies, gap_accuracy, run_labels,
                                        save_policies, save_refused, score_records, split_labels, unambiguous)

    from routes.policies.answer_policy import DEFAULT_PASSAGES, configured

    progress = progress_bar(not args.no_progress)
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
        if args.feedback:
            labels = _with_feedback(args, settings, labels, beir_root, index, report)
        train, test = split_labels(labels) if beir_root is None else (beir_labels(beir_root, "train"), labels)
        before = run_labels(service, test, k, _questions_progress(progress, len(test)))
        report["before"] = pick(score_records(service, before, k))
        if beir_root is None:
            policies, notes = fit_policies(service, train, args.seed, **answer)
        else:
            hidden_train, hidden_docs = ablate(train, args.seed)
            ab_index = ablated_index(beir_root, hidden_docs, service.embedder,
                                     Path(args.cache) / f"{beir_root.name}-train-ablation", index, progress)
            with service.sibling(ab_index) as ablated:
                policies, notes = fit_policies(service, train, args.seed, tune_router=False, grader_service=ablated,
                                               sufficient_of=lambda lb, docs: lb.id not in hidden_train,
                                               grader_labels=unambiguous(train, hidden_train, hidden_docs), **answer)
        for warning in notes.get("warnings", ()):
            print(f"WARNING: {warning}", file=sys.stderr)
        after = _run_with(service, policies, test, k, progress)
        report["after"] = pick(score_records(service, after, k))
        if beir_root is None:  # each held-out question, with the policies in use and with the fit
            held = [HeldOut(b.label.answerable, b.status == "evidence_gap", a.status == "evidence_gap")
                    for b, a in zip(before, after, strict=True)]
        else:  # BEIR labels are all answerable: test claims with their gold documents hidden are the gaps
            hidden_test, hidden_test_docs = ablate(test, args.seed + 1)
            te_index = ablated_index(beir_root, hidden_test_docs, service.embedder,
                                     Path(args.cache) / f"{beir_root.name}-test-ablation", index, progress)
            outcomes: dict[str, list[tuple[bool, bool]]] = {}
            for name, pol in (("gaps_before", service.policies), ("gaps_after", policies)):
                with service.sibling(te_index, policies=pol) as ablated:
                    report[name] = gap_accuracy(ablated, unambiguous(test, hidden_test, hidden_test_docs), hidden_test,
                                                outcomes=outcomes.setdefault(name, []))
            held = [HeldOut(a, gb, ga) for (a, gb), (_, ga) in zip(outcomes["gaps_before"], outcomes["gaps_after"],
                                                                   strict=True)]
        verdict = judge(held)
        report["kept"] = verdict.keep
        report["judgement"] = verdict.to_json()
        report["notes"] = notes
        for line in judgement_lines(verdict):
            print(line, file=sys.stderr)
        if verdict.keep:
            report["saved"] = str(save_policies(index, policies, notes, args.seed, verdict))
        else:
            report["saved"] = None
            report["refused"] = str(save_refused(index, policies, notes, args.seed, verdict))
            print(f"WARNING: the fit was not kept; the policies in use stay (the refused fit is in {report['refused']}, "
                  "which serve never loads)", file=sys.stderr)
    finally:
        service.close()
    emit(report)
    return 0
