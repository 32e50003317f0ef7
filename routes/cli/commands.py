"""The `quarry` commands that index, search, answer, serve and administer (eval and tune are in
routes/cli/eval_commands.py, the parser in routes/cli/main.py)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval.errors import InvalidRequest
from retrieval.limits import check_k

if TYPE_CHECKING:
    from indexes.snapshot_build import BuildOptions
    from routes.service.settings import Settings

from routes.cli.common import emit, cli_filters, index_dir_of, cli_principal, progress_bar, default_acl


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from indexes.snapshot_build import build_snapshot

    acl = default_acl(settings.default_acl)
    meanings: dict[tuple[str, ...], str] = {("public",): " (everyone)", ("group:admin",): " (admins only)"}
    meaning = meanings.get(acl, "")
    print(f"default ACL of documents and tables without one: {' '.join(acl)}{meaning}", file=sys.stderr)
    options = replace(settings.build_options(acl), skip_bad_files=bool(getattr(args, "skip_bad_files", False)),
                      strict_fields=bool(getattr(args, "strict_fields", False)),
                      ocr=settings.ocr_scans or bool(getattr(args, "ocr", False)))
    shards = int(getattr(args, "shards", 1))
    clustered = any(getattr(args, flag, None) is not None for flag in ("cluster", "actors", "batch"))
    if shards != 1 or clustered:  # a cluster flag without --shards is refused there, not ignored
        return _ingest_shards(args, settings, options, shards)
    manifest = build_snapshot([Path(s) for s in args.sources], index_dir_of(settings), settings.embedder(),
                              options, progress=progress_bar(not args.no_progress))
    for skipped in manifest["skipped_files"]:
        print(f"skipped {skipped['path']}: {skipped['reason']}: {skipped['message']}", file=sys.stderr)
    _warn_dates(manifest)
    emit({k: manifest[k] for k in ("snapshot", "counts", "embeddings", "model", "content_hash", "timings_s", "skipped_files",
                                    "date_warnings")})
    return 0


def _warn_dates(manifest: dict[str, Any]) -> None:
    """File metadata dates not trusted silently (indexes/files.py `date_warnings`), on stderr."""
    for warning in manifest.get("date_warnings", ()):
        print(f"warning: {warning['reason']}: {warning['message']}", file=sys.stderr)


def _ingest_shards(args: argparse.Namespace, settings: Settings, options: BuildOptions, shards: int) -> int:
    """`ingest --shards N`: the shard snapshots and the cluster manifest (indexes/shards.py)."""
    from indexes.shards import build_shards

    address = getattr(args, "cluster", None)
    if address:
        return _ingest_on_cluster(args, settings, options, shards, address)
    if getattr(args, "actors", None) is not None or getattr(args, "batch", None) is not None:
        raise InvalidRequest("--actors and --batch size a cluster ingest's embedding; give --cluster ADDR too")
    manifest = build_shards([Path(s) for s in args.sources], index_dir_of(settings), settings.embedder(), shards,
                            options, progress=progress_bar(not args.no_progress))
    for skipped in manifest["skipped_files"]:
        print(f"skipped {skipped['path']}: {skipped['reason']}: {skipped['message']}", file=sys.stderr)
    _warn_dates(manifest)
    emit({k: manifest[k] for k in ("shards", "members", "counts", "model", "content_hash", "assignment", "skipped_files",
                                    "date_warnings")})
    return 0


def _ingest_on_cluster(args: argparse.Namespace, settings: Settings, options: BuildOptions, shards: int,
                       address: str) -> int:
    """`ingest --shards N --cluster ADDR`: the same snapshots, embedded and built on a Ray
    cluster (routes/cluster/ingest.py)."""
    actors = 2 if args.actors is None else int(args.actors)
    if shards < 2:
        raise InvalidRequest("--cluster builds a sharded index: give --shards N with N >= 2")
    if actors < 1:
        raise InvalidRequest(f"--actors must be at least 1, not {actors}")
    if args.batch is not None and args.batch < 1:
        raise InvalidRequest(f"--batch must be at least 1, not {args.batch}")
    try:
        import ray

        from routes.cluster.ingest import BATCH, cluster_ingest, stderr_report
    except ImportError:
        raise InvalidRequest("an ingest on a Ray cluster needs the cluster extra: pip install 'quarry[cluster]'") from None
    index = index_dir_of(settings)
    ray.init(address=address, logging_level=logging.WARNING)
    try:
        manifest, stats = cluster_ingest([Path(s) for s in args.sources], index, shards, options,
                                         str(settings.model_path) if settings.model_path else None, actors,
                                         BATCH if args.batch is None else args.batch,
                                         report=None if args.no_progress else stderr_report)
    finally:
        ray.shutdown()
    for skipped in manifest["skipped_files"]:
        print(f"skipped {skipped['path']}: {skipped['reason']}: {skipped['message']}", file=sys.stderr)
    _warn_dates(manifest)
    out = {k: manifest[k] for k in ("shards", "members", "counts", "model", "content_hash", "assignment", "skipped_files",
                                    "date_warnings")}
    out["cluster"] = {"pending": stats.pending, "embedded": stats.embedded, "per_node": dict(stats.per_node),
                      "built_on": {f"{k:02d}": v for k, v in stats.built_on.items()},
                      "computed_at_build": stats.computed_at_build, "seconds": stats.seconds}
    emit(out)
    return 0


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    from retrieval.answer import hits_json
    from routes.service.service import open_service

    principal = cli_principal(args)
    check_k(args.k, settings.limits)  # before the index and model load
    with open_service(settings, index_dir_of(settings), warm=args.retriever in ("dense", "hybrid"), plugins=False) as service:
        hits = service.search(principal, args.retriever, args.query, args.k, cli_filters(args))
    if args.table:
        for item in hits_json(hits):
            print(f"{item['rank']:>3}  {item['score']:>9.4f}  {item['chunk_id']:<32}  {(item['title'] or '')[:60]}")
    else:
        emit({"retriever": args.retriever, "hits": hits_json(hits)})
    return 0


def cmd_query(args: argparse.Namespace, settings: Settings) -> int:
    """The loop for one question: an answer context or an evidence gap, as JSON."""
    from retrieval.answer import result_json
    from routes.service.service import open_service

    principal = cli_principal(args)
    check_k(args.k, settings.limits)  # before the index and model load
    # Closing waits for (or stops) background work, such as a table profile the question did not wait for.
    with open_service(settings, index_dir_of(settings)) as service:
        result = service.query(principal, args.question, k=args.k, max_attempts=args.max_attempts,
                               deadline_ms=args.deadline_ms, filters=cli_filters(args))
        _print_answer(result_json(result), args.table)  # before closing: the answer is computed whatever closing meets
    return 0


def _print_answer(payload: dict, table: bool) -> None:
    if table:
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
        if payload.get("declined"):
            d = payload["declined"]
            print(f"  table {d['table']} not used: {d['reason']} (could not link: {', '.join(d['unlinked']) or '-'})")
    else:
        emit(payload)
    sys.stdout.flush()


def cmd_sql(args: argparse.Namespace, settings: Settings) -> int:
    """Run SQL (the CLI caller holds the `sql` scope), or translate a question with --question."""
    from retrieval.sql.translate import Decline
    from retrieval.table_decline import decline_json
    from routes.service.service import open_service

    principal = cli_principal(args, scopes=("query", "sql"))
    with open_service(settings, index_dir_of(settings), warm=False, plugins=False) as service:
        if args.question:
            out = service.sql_question(principal, args.statement)
            if isinstance(out, Decline):
                emit({"declined": decline_json(out)})
                return 3
            emit({"question": args.statement, "rows": out.to_json()})
        else:
            emit({"rows": service.sql_statement(principal, args.statement).to_json()})
    return 0


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from routes.server.serve import serve

    index_dir_of(settings)
    serve(settings)
    return 0


def cmd_cluster_serve(args: argparse.Namespace, settings: Settings) -> int:
    """`quarry cluster serve`: a front over a sharded index's shards on Ray (routes/cluster/front.py)."""
    if args.replicas < 1:
        raise InvalidRequest(f"--replicas must be at least 1, not {args.replicas}")
    if not args.retry_s > 0:
        raise InvalidRequest(f"--retry-s must be positive, not {args.retry_s}")
    try:
        from routes.cluster.front import serve_front
    except ImportError:
        raise InvalidRequest("serving from a Ray cluster needs the cluster extra: pip install 'quarry[cluster]'") from None
    index_dir_of(settings)
    serve_front(settings, args.address, args.replicas, args.retry_s, args.attach)
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from routes.cli.demo import run_demo

    run_demo(settings, progress=not args.no_progress)
    return 0


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """MCP over stdio for one principal, fixed here by the launching configuration."""
    import anyio

    from routes.mcp.endpoint import run_stdio
    from routes.service.service import open_service

    principal = cli_principal(args, scopes=args.scopes)
    with open_service(settings, index_dir_of(settings)) as service:
        service.tables_ready(principal, 30.0)  # one principal: its table profiles are built before the first question
        anyio.run(run_stdio, service, principal)
    return 0


def cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    """Add, list or revoke API keys; the plain key is printed once, only its hash is stored."""
    from auth.keys import KeyStore

    if settings.keys_file is None:
        raise InvalidRequest(f"--keys is required (or set {settings.env_name('keys_file')})")
    store = KeyStore(settings.keys_file)
    if args.keys_command == "add":
        token, rec = store.add(args.principal, args.groups or [], args.scopes or ["query"], args.write_prefixes)
        emit({"key": token, **rec.public(), "note": "store this key now: it is not shown again"})
    elif args.keys_command == "list":
        emit({"keys": [r.public() for r in store.records()]})
    else:
        emit({"revoked": store.revoke(args.key_id).public()})
    return 0


def cmd_settings(args: argparse.Namespace, settings: Settings) -> int:
    """Every setting with its value, where it came from and its help (secrets never shown)."""
    described = settings.describe()
    if args.json:
        emit(described)
        return 0
    group = None
    for name, item in described.items():
        if item["group"] != group:
            group = item["group"]
            print(f"\n[{group}]")
        value = json.dumps(item["value"], ensure_ascii=False) if not isinstance(item["value"], str) else item["value"]
        print(f"  {name} = {value}    ({item['source']})\n      {item['help']}")
    return 0
