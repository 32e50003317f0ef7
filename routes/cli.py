"""The `quarry` command line. JSON on stdout for machines; `--table` for people.

Every command builds from the settings (routes/settings.py): defaults, then `QUARRY_*`
variables, then its flags and `--set NAME=VALUE`; `quarry settings` shows the result.
Errors print the same `{"error": {...}}` JSON as the HTTP API, on one line, and exit with
the error class's exit code: 2 for a caller's mistake, 1 for a server fault.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from retrieval.errors import InvalidRequest, RetrievalError
from retrieval.limits import check_k
from retrieval.registry import SEARCH_ROUTES
from retrieval.types import Filters, Principal

if TYPE_CHECKING:
    from routes.settings import Settings

RETRIEVERS = SEARCH_ROUTES


def _principal(args: argparse.Namespace, scopes: Sequence[str] = ("query",)) -> Principal:
    return Principal(args.principal, tuple(args.groups or ()), frozenset(scopes))


def _filters(args: argparse.Namespace) -> Filters:
    return Filters(
        sources=tuple(args.source) if args.source else None,
        date_from=args.date_from,
        date_to=args.date_to,
        doc_ids=tuple(args.doc_id) if args.doc_id else None,
    )


def _iso_date(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO date: {value!r}") from None


def _emit(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")


UNITS = {"embed": "chunk", "questions": "question"}


def _progress_bar(show: bool | None = None) -> Callable[[str, int, int], None] | None:
    """A tqdm bar (count, rate, ETA) on stderr per stage: ingest's catalog, bm25 and embed, and
    eval's questions. `show` defaults to "stderr is a terminal"; when stderr is a file the bar
    is redrawn at most every 10 s, so a log of a long run stays short."""
    if not (sys.stderr.isatty() if show is None else show):
        return None
    from tqdm import tqdm

    bars: dict[str, Any] = {}
    interval = 0.1 if sys.stderr.isatty() else 10.0

    def report(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(total=total, desc=stage, unit=UNITS.get(stage, "step"), file=sys.stderr,
                                     mininterval=interval, maxinterval=max(10.0, interval))
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            del bars[stage]  # the same stage may run again (tune evaluates before and after)

    return report


# Words that read as "everyone" or "no one" (or as the admins) but, as ACL entries, would name
# a principal of that id, so the documents they guard would silently reach no reader.
RESERVED_ACL_WORDS = frozenset({
    "everyone", "everybody", "all", "any", "anyone", "anybody", "world", "none", "nobody", "noone", "private",
    "public", "authenticated", "anonymous", "users", "admin", "admins",
})


def default_acl(entries: Sequence[str] | None) -> tuple[str, ...]:
    """The ACL of documents and tables without one: `--default-acl`, checked, or admins only.
    Besides the ACL syntax, a word that reads as a keyword (`everyone`, `all`, `Public`, ...)
    is refused rather than taken for a principal id."""
    from indexes.corpus import ADMIN_ONLY
    from retrieval.types import PUBLIC, check_acl

    if not entries:
        return ADMIN_ONLY
    reserved = [e for e in entries if e != PUBLIC and e.lower() in RESERVED_ACL_WORDS]
    if reserved:
        raise InvalidRequest(f"--default-acl {reserved[0]!r} is not an ACL keyword: use 'public' (everyone), "
                             f"'group:NAME' or principal ids; leave it out for admins only ('group:admin')")
    return check_acl(list(entries))


# Command-line flags that set a setting: argparse dest -> setting name. A flag left out
# (None) leaves the setting to the environment and the defaults.
FLAG_SETTINGS = {"index": "index_dir", "model_path": "model_path", "host": "host", "port": "port",
                 "keys": "keys_file", "today": "today", "default_acl": "default_acl",
                 "reuse_embeddings": "reuse_embeddings"}


def load_settings(args: argparse.Namespace, env: dict[str, str] | None = None) -> Settings:
    """The settings of this run: defaults, then `QUARRY_*` variables, then `--set NAME=VALUE`
    and this command's own flags."""
    from routes.settings import Settings

    flags: dict[str, Any] = {}
    for item in getattr(args, "set", None) or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InvalidRequest(f"--set {item!r}: expected NAME=VALUE (see `quarry settings`)")
        flags[name.strip()] = value
    flags |= {name: getattr(args, dest) for dest, name in FLAG_SETTINGS.items() if getattr(args, dest, None) is not None}
    return Settings.load(env, flags)


def _index(settings: Settings) -> Path:
    """The index directory a command works on: --index, or QUARRY_INDEX_DIR."""
    if settings.source("index_dir") == "default":
        raise InvalidRequest(f"--index is required (or set {settings.env_name('index_dir')})")
    return settings.index_dir


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from indexes.snapshot import build_snapshot

    acl = default_acl(settings.default_acl)
    meaning = {("public",): " (everyone)", ("group:admin",): " (admins only)"}.get(acl, "")
    print(f"default ACL of documents and tables without one: {' '.join(acl)}{meaning}", file=sys.stderr)
    manifest = build_snapshot([Path(s) for s in args.sources], _index(settings), settings.embedder(),
                              settings.build_options(acl), progress=_progress_bar())
    _emit({k: manifest[k] for k in ("snapshot", "counts", "embeddings", "model", "content_hash", "timings_s")})
    return 0


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    from retrieval.answer import hits_json
    from retrieval.search import search
    from routes.engine import open_engine

    principal = _principal(args)
    check_k(args.k, settings.limits)  # before the index and model load
    engine = open_engine(_index(settings), settings=settings, warm=args.retriever in ("dense", "hybrid"))
    try:
        hits = search(engine.retrievers, args.retriever, args.query, principal, args.k, _filters(args), engine.limits)
    finally:
        engine.close()
    if args.table:
        for item in hits_json(hits):
            print(f"{item['rank']:>3}  {item['score']:>9.4f}  {item['chunk_id']:<32}  {(item['title'] or '')[:60]}")
    else:
        _emit({"retriever": args.retriever, "hits": hits_json(hits)})
    return 0


def cmd_query(args: argparse.Namespace, settings: Settings) -> int:
    """The loop for one question: an answer context or an evidence gap, as JSON."""
    from retrieval.answer import result_json
    from routes.engine import open_engine

    principal = _principal(args)
    check_k(args.k, settings.limits)  # before the index and model load
    engine = open_engine(_index(settings), settings=settings)
    try:
        result = engine.query(args.question, principal, k=args.k, max_attempts=args.max_attempts,
                              deadline_ms=args.deadline_ms, filters=_filters(args))
    finally:
        engine.close()
    payload = result_json(result)
    if args.table:
        print(f"{payload['status']}  route={payload['route']['chosen']}  stop={payload['stop_reason']}  "
              f"{payload['elapsed_ms']} ms")
        for a in payload["attempts"]:
            g = a["grade"] or {}
            print(f"  attempt {a['n']}: {a['strategy']:<12} {a['route']:<7} hits={a['hits']:<3} "
                  f"sufficient={g.get('sufficient')} {g.get('reason') or ''} {a.get('error') or ''}")
        for item in payload["context"]:
            print(f"  {item['rank']:>2}. {item['doc_id']:<36} {(item['title'] or '')[:70]}")
        if payload["gap"]:
            print(f"  gap: {payload['gap']['reason']}: {payload['gap']['detail']}")
    else:
        _emit(payload)
    return 0


def cmd_sql(args: argparse.Namespace, settings: Settings) -> int:
    """Run SQL (the CLI caller holds the `sql` scope), or translate a question with --question."""
    from retrieval.sql.translate import Decline
    from routes.engine import open_engine

    principal = _principal(args, scopes=("query", "sql"))
    engine = open_engine(_index(settings), settings=settings, warm=False)
    try:
        if args.question:
            out = engine.sql.answer(args.statement, principal)
            if isinstance(out, Decline):
                _emit({"declined": {"reason": out.reason, "unlinked": list(out.unlinked)}})
                return 3
            _emit({"question": args.statement, "rows": out.to_json()})
        else:
            _emit({"rows": engine.sql.run_statement(args.statement, principal).to_json()})
    finally:
        engine.close()
    return 0


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from routes.server import serve

    _index(settings)
    serve(settings)
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from routes.demo import run_demo

    run_demo(settings)
    return 0


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """MCP over stdio for one principal, fixed here by the launching configuration."""
    import anyio

    from routes.engine import open_engine
    from routes.mcp_server import run_stdio

    principal = _principal(args, scopes=args.scopes)
    engine = open_engine(_index(settings), settings=settings)
    if engine.deps.tables is not None and engine.deps.tables.readable(principal):
        engine.sql.profile_ready(principal, 30.0)  # one principal: its table profiles are built before the first question
    try:
        anyio.run(run_stdio, engine, principal)
    finally:
        engine.close()
    return 0


BEIR_K = 20  # eval's context size on a BEIR folder when --k is not given (nDCG@10 needs at least 10)


def _eval_target(args: argparse.Namespace, settings: Settings, progress: Callable[[str, int, int], None] | None):
    """(engine, labels, k, beir root or None, index) for a labels file or a BEIR folder. A BEIR
    corpus is indexed into --index (or QUARRY_INDEX_DIR) when that holds no snapshot, else into
    --cache; a labels file needs an existing index. The engine, its limits and the default date
    follow the settings, and a --k over max_k is refused before any question runs."""
    from indexes.beir import is_beir_dir
    from indexes.snapshot import current_snapshot_path
    from retrieval.errors import SnapshotError
    from routes.engine import open_engine
    from routes.evaluation import beir_index, beir_labels, ensure_beir_index, load_label_file

    target = Path(args.target)
    given = settings.index_dir if settings.source("index_dir") != "default" else None
    if target.is_dir() and is_beir_dir(target):
        k = check_k(args.k or BEIR_K, settings.limits)
        embedder = settings.embedder()
        index = (ensure_beir_index(target, embedder, given, progress) if given
                 else beir_index(target, embedder, Path(args.cache), progress))
        split = args.split if args.split != "all" else "test"
        return open_engine(index, embedder, settings=settings), beir_labels(target, split), k, target, index
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
    return open_engine(given, settings=settings), labels, k, None, given


def _questions_progress(progress: Callable[[str, int, int], None] | None, total: int) -> Callable[[int], None] | None:
    if progress is None:
        return None
    progress("questions", 0, total)
    return lambda done: progress("questions", done, total)


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    """Score labeled questions (or a BEIR folder): JSON on stdout, progress and the wrong
    questions on stderr, report and plots in --report."""
    from routes.evaluation import TOP, evaluate, failure_lines, write_report

    progress = _progress_bar(not args.no_progress)
    engine, labels, k, _, _ = _eval_target(args, settings, progress)
    try:
        result = evaluate(engine, labels, k, _questions_progress(progress, len(labels)))
    finally:
        engine.close()
    if args.report:
        write_report(result, Path(args.report), f"Quarry evaluation of {args.target}")
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


def cmd_tune(args: argparse.Namespace, settings: Settings) -> int:
    """Fit fusion, router and grader on the train split; report the test split before and after."""
    from routes.engine import open_engine
    from routes.evaluation import (TOP, ablate, ablated_index, beir_labels, evaluate, fit_policies, gap_accuracy,
                                   save_policies, split_labels, unambiguous)

    progress = _progress_bar(not args.no_progress)
    engine, labels, k, beir_root, index = _eval_target(args, settings, progress)
    report: dict[str, Any] = {"seed": args.seed}
    pick = lambda r: {m: r.get(m) for m in TOP if r.get(m) is not None}  # noqa: E731
    try:
        if beir_root is None:
            train, test = split_labels(labels)
            report["before"] = pick(evaluate(engine, test, k, _questions_progress(progress, len(test))))
            policies, notes = fit_policies(engine, train, args.seed)
        else:
            train, test = beir_labels(beir_root, "train"), labels
            report["before"] = pick(evaluate(engine, test, k, _questions_progress(progress, len(test))))
            hidden_train, hidden_docs = ablate(train, args.seed)
            ab_index = ablated_index(beir_root, hidden_docs, engine.embedder,
                                     Path(args.cache) / f"{beir_root.name}-train-ablation", index, progress)
            ab_engine = open_engine(ab_index, engine.embedder, settings=settings)
            try:
                policies, notes = fit_policies(engine, train, args.seed, tune_router=False, grader_engine=ab_engine,
                                               sufficient_of=lambda lb, docs: lb.id not in hidden_train,
                                               grader_labels=unambiguous(train, hidden_train, hidden_docs))
            finally:
                ab_engine.close()
            hidden_test, hidden_test_docs = ablate(test, args.seed + 1)
            te_index = ablated_index(beir_root, hidden_test_docs, engine.embedder,
                                     Path(args.cache) / f"{beir_root.name}-test-ablation", index, progress)
            for name, pol in (("gaps_before", engine.policies), ("gaps_after", policies)):
                e = open_engine(te_index, engine.embedder, policies=pol, settings=settings)
                try:
                    report[name] = gap_accuracy(e, unambiguous(test, hidden_test, hidden_test_docs), hidden_test)
                finally:
                    e.close()
        for warning in notes.get("warnings", ()):
            print(f"WARNING: {warning}", file=sys.stderr)
        tuned = open_engine(index, engine.embedder, policies=policies, settings=settings)
        try:
            report["after"] = pick(evaluate(tuned, test, k, _questions_progress(progress, len(test))))
        finally:
            tuned.close()
        report["notes"] = notes
        report["saved"] = str(save_policies(index, policies, notes, args.seed))
    finally:
        engine.close()
    _emit(report)
    return 0


def cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    """Add, list or revoke API keys; the plain key is printed once, only its hash is stored."""
    from routes.keys import KeyStore

    if settings.keys_file is None:
        raise InvalidRequest(f"--keys is required (or set {settings.env_name('keys_file')})")
    store = KeyStore(settings.keys_file)
    if args.keys_command == "add":
        token, rec = store.add(args.principal, args.groups or [], args.scopes or ["query"])
        _emit({"key": token, **rec.public(), "note": "store this key now: it is not shown again"})
    elif args.keys_command == "list":
        _emit({"keys": [r.public() for r in store.records()]})
    else:
        _emit({"revoked": store.revoke(args.key_id).public()})
    return 0


def cmd_settings(args: argparse.Namespace, settings: Settings) -> int:
    """Every setting with its value, where it came from and its help (secrets never shown)."""
    described = settings.describe()
    if args.json:
        _emit(described)
        return 0
    group = None
    for name, item in described.items():
        if item["group"] != group:
            group = item["group"]
            print(f"\n[{group}]")
        value = json.dumps(item["value"], ensure_ascii=False) if not isinstance(item["value"], str) else item["value"]
        print(f"  {name} = {value}    ({item['source']})\n      {item['help']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quarry", description="Agentic retrieval service. Every command reads the "
                                "settings (`quarry settings` lists them): defaults, QUARRY_* variables, its flags.")
    sub = p.add_subparsers(dest="command", required=True)
    overrides = argparse.ArgumentParser(add_help=False)
    overrides.add_argument("--set", action="append", metavar="NAME=VALUE",
                           help="set one setting for this run (repeatable; see `quarry settings`)")

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, parents=[overrides])

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--index", default=None, help="index directory (holds snapshots; or QUARRY_INDEX_DIR)")
        sp.add_argument("--model-path", default=None,
                        help="local sentence-transformers folder (default: bundled all-MiniLM-L6-v2)")

    def who(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--principal", required=True, help="principal id the command acts for")
        sp.add_argument("--groups", nargs="*", default=[], help="groups of the principal (match ACL entries group:NAME)")

    def filters(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--source", action="append", help="only these sources (repeatable)")
        sp.add_argument("--date-from", type=_iso_date, help="only documents dated on or after (YYYY-MM-DD)")
        sp.add_argument("--date-to", type=_iso_date, help="only documents dated on or before (YYYY-MM-DD)")
        sp.add_argument("--doc-id", action="append", help="only these documents (repeatable)")

    def today(sp: argparse.ArgumentParser, text: str = "date that relative dates refer to") -> None:
        sp.add_argument("--today", type=_iso_date, default=None, help=f"{text} (default: the today setting, else the real date)")

    def serving(sp: argparse.ArgumentParser, keys_help: str) -> None:
        sp.add_argument("--keys", default=None, help=keys_help)
        sp.add_argument("--host", default=None, help="interface to listen on (default: the host setting, 127.0.0.1)")
        sp.add_argument("--port", type=int, default=None, help="TCP port (default: the port setting, 8000)")

    k_help = "(default: the default_k setting, 8; at most max_k, 50)"

    sp = command("ingest", "build a new index snapshot from files and folders")
    sp.add_argument("sources", nargs="+", help="JSONL, Markdown/text files or folders of them")
    sp.add_argument("--default-acl", nargs="+", default=None,
                    help="ACL for documents and tables without one: 'public', 'group:NAME' or principal ids "
                         "(default: the default_acl setting, else group:admin, i.e. private to admins)")
    sp.add_argument("--no-reuse", dest="reuse_embeddings", action="store_const", const=False, default=None,
                    help="embed every chunk again instead of reusing vectors of unchanged chunks from the current snapshot")
    common(sp)
    sp.set_defaults(func=cmd_ingest)

    sp = command("search", "run one retriever and print its hits")
    sp.add_argument("query")
    sp.add_argument("--retriever", required=True, help=f"one of {', '.join(RETRIEVERS)}")
    sp.add_argument("-k", "--k", type=int, default=None, help=f"number of hits {k_help}")
    sp.add_argument("--table", action="store_true", help="print a readable table instead of JSON")
    common(sp)
    who(sp)
    filters(sp)
    sp.set_defaults(func=cmd_search)

    sp = command("query", "answer a question: routed, graded, rewritten within a budget")
    sp.add_argument("question")
    sp.add_argument("-k", "--k", type=int, default=None, help=f"passages in the answer context {k_help}")
    sp.add_argument("--max-attempts", type=int, default=None, help="retrieval attempts (default 3, at most max_attempts)")
    sp.add_argument("--deadline-ms", type=int, default=None, help="time budget in ms (default 2000, at most max_deadline_ms)")
    today(sp)
    sp.add_argument("--table", action="store_true", help="print a readable summary instead of JSON")
    common(sp)
    who(sp)
    filters(sp)
    sp.set_defaults(func=cmd_query)

    sp = command("sql", "run one read-only SELECT over the tables (or translate a question)")
    sp.add_argument("statement", help="a SELECT statement, or a question with --question")
    sp.add_argument("--question", action="store_true", help="translate a natural-language question to SQL first")
    today(sp, "date that 'last quarter' etc. refer to")
    common(sp)
    who(sp)
    sp.set_defaults(func=cmd_sql)

    sp = command("serve", "serve the HTTP API")
    common(sp)
    serving(sp, "API keys file with at least one active key (or QUARRY_KEYS_FILE; see `quarry keys add`)")
    sp.set_defaults(func=cmd_serve)

    sp = command("mcp", "serve MCP over stdio for one principal")
    sp.add_argument("--scopes", nargs="*", default=["query"], help="scopes of the principal (add 'sql' to allow sql_query)")
    today(sp)
    common(sp)
    who(sp)
    sp.set_defaults(func=cmd_mcp)

    for name, fn, text in (("eval", cmd_eval, "score labeled questions or a BEIR folder"),
                           ("tune", cmd_tune, "fit router, grader and fusion on the train split; save into the index")):
        sp = command(name, text)
        sp.add_argument("target", help="labels JSONL file, or a BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
        sp.add_argument("--index", default=None,
                        help="index directory (or QUARRY_INDEX_DIR; a BEIR corpus is ingested into it when it holds none, "
                             "into --cache without it)")
        sp.add_argument("--cache", default="var/eval-cache", help="where BEIR corpora are indexed")
        sp.add_argument("--split", default="all", choices=["all", "train", "test"],
                        help="labels of this split only (BEIR: qrels/<split>.tsv, default test)")
        sp.add_argument("-k", "--k", type=int, default=None,
                        help=f"context size (default: the default_k setting; {BEIR_K} for BEIR; at most max_k)")
        today(sp)
        sp.add_argument("--model-path", default=None)
        sp.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
        if name == "eval":
            sp.add_argument("--report", default=None, help="folder for metrics.json, report.md and PNG plots")
            sp.add_argument("--full", action="store_true", help="print every metric (per route, per tag) on stdout")
        else:
            sp.add_argument("--seed", type=int, default=0, help="seed of the deterministic fits and ablations")
        sp.set_defaults(func=fn)

    sp = command("keys", "manage API keys (stored hashed)")
    ks = sp.add_subparsers(dest="keys_command", required=True)
    keys_help = "keys file (or QUARRY_KEYS_FILE)"
    add = ks.add_parser("add", help="create a key for a principal and print it once", parents=[overrides])
    add.add_argument("--principal", required=True)
    add.add_argument("--groups", nargs="*", default=[])
    add.add_argument("--scopes", nargs="*", default=["query"], help="some of: query sql admin")
    add.add_argument("--keys", default=None, help=keys_help)
    lst = ks.add_parser("list", help="list keys (never the secrets)", parents=[overrides])
    lst.add_argument("--keys", default=None, help=keys_help)
    rev = ks.add_parser("revoke", help="revoke a key by id; a running server stops accepting it", parents=[overrides])
    rev.add_argument("key_id")
    rev.add_argument("--keys", default=None, help=keys_help)
    sp.set_defaults(func=cmd_keys)

    sp = command("demo", "ingest the demo corpus if needed, create demo keys and serve")
    sp.add_argument("--index", default=None, help="index directory (default: the index_dir setting, var/demo-index)")
    serving(sp, "keys file (default: demo-keys.json beside the index directory)")
    sp.set_defaults(func=cmd_demo)

    sp = command("settings", "print every setting: its value, where it came from (default, env, flag) and its help")
    sp.add_argument("--json", action="store_true", help="one JSON object keyed by setting name")
    sp.set_defaults(func=cmd_settings)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from routes.runtime import configure_process

    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(args)
        configure_process(threads=settings.threads)
        return int(args.func(args, settings) or 0)
    except RetrievalError as e:
        sys.stdout.write(json.dumps(e.to_dict(), ensure_ascii=False) + "\n")
        return e.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
