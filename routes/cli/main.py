"""The `quarry` command line. JSON on stdout for machines; `--table` for people.

Every command builds from the settings (routes/service/settings.py): defaults, then `QUARRY_*`
variables, then its flags and `--set NAME=VALUE`; `quarry settings` shows the result.
Errors print the same `{"error": {...}}` JSON as the HTTP API, on one line, and exit with
the error class's exit code: 2 for a caller's mistake, 1 for a server fault.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from retrieval.errors import RetrievalError
from routes.cli.commands import (cmd_cluster_serve, cmd_demo, cmd_ingest, cmd_keys, cmd_mcp, cmd_query, cmd_search, cmd_serve,
                                 cmd_settings, cmd_sql)
from routes.cli.common import RETRIEVERS, iso_date, load_settings
from routes.cli.eval_commands import BEIR_K, cmd_eval, cmd_tune
from routes.cli.write_commands import cmd_acl, cmd_compact, cmd_delete, cmd_sync, cmd_upsert


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
        sp.add_argument("--date-from", type=iso_date, help="only documents dated on or after (YYYY-MM-DD)")
        sp.add_argument("--date-to", type=iso_date, help="only documents dated on or before (YYYY-MM-DD)")
        sp.add_argument("--doc-id", action="append", help="only these documents (repeatable)")

    def today(sp: argparse.ArgumentParser, text: str = "date that relative dates refer to") -> None:
        sp.add_argument("--today", type=iso_date, default=None, help=f"{text} (default: the today setting, else the real date)")

    def serving(sp: argparse.ArgumentParser, keys_help: str) -> None:
        sp.add_argument("--keys", default=None, help=keys_help)
        sp.add_argument("--identity", default=None, help="identity file: token issuers and apps acting for users "
                        "(default: the identity_file setting; none: keys only)")
        sp.add_argument("--host", default=None, help="interface to listen on (default: the host setting, 127.0.0.1)")
        sp.add_argument("--port", type=int, default=None, help="TCP port (default: the port setting, 8000)")

    def no_progress(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--no-progress", action="store_true",
                        help="no progress bars on stderr (they are drawn on a terminal, and every 10 s into a file or pipe)")

    k_help = "(default: the default_k setting, 8; at most max_k, 50)"

    sp = command("ingest", "build a new index snapshot from files and folders")
    sp.add_argument("sources", nargs="+", help="JSONL, Markdown/text, PDF, DOCX, HTML, CSV/Parquet files or folders of them")
    sp.add_argument("--default-acl", nargs="+", default=None,
                    help="ACL for documents and tables without one: 'public', 'group:NAME' or principal ids "
                         "(default: the default_acl setting, else group:admin, i.e. private to admins)")
    sp.add_argument("--no-reuse", dest="reuse_embeddings", action="store_const", const=False, default=None,
                    help="embed every chunk again instead of reusing vectors of unchanged chunks from the current snapshot")
    sp.add_argument("--skip-bad-files", action="store_true",
                    help="leave out PDF, DOCX and HTML files that give no text (encrypted, corrupt, scans, empty) and empty "
                         "Markdown or text files, and list them, instead of stopping the ingest (malformed JSONL, sidecars "
                         "and ACLs always stop it; every such problem of the sources is reported in one run)")
    sp.add_argument("--strict-fields", action="store_true",
                    help="refuse front-matter keys outside the document fields (id, title, source, date, metadata, acl) "
                         "instead of keeping them in the document's metadata")
    sp.add_argument("--ocr", action="store_true",
                    help="read PDF pages without a text layer (scans) by OCR with Tesseract; seconds per page "
                         "(the ocr_scans setting; give extract_timeout_s room for a file's pages)")
    sp.add_argument("--markdown-sections", action="store_true", default=None,
                    help="make a Markdown file's headings its sections (the markdown_sections setting; off by default)")
    sp.add_argument("--shards", type=int, default=1,
                    help="write N shard snapshots (documents by a stable hash of their id) and a cluster manifest, "
                         "DIR/cluster.json, for a sharded deployment; tables go to shard 00 (default 1: one snapshot)")
    sp.add_argument("--cluster", metavar="ADDR", default=None,
                    help="embed and build the shards on the Ray cluster at ADDR (with --shards N; every node sees the "
                         "sources and DIR at the same paths)")
    sp.add_argument("--actors", type=int, default=None,
                    help="embedding actors of a --cluster ingest, each loading the model once (default 2)")
    sp.add_argument("--batch", type=int, default=None,
                    help="texts per embedding batch of a --cluster ingest: each is journaled as it comes back, and is "
                         "what a lost actor or a killed run embeds again (default 256)")
    no_progress(sp)
    common(sp)
    sp.set_defaults(func=cmd_ingest)

    sp = command("upsert", "create or replace documents of a live index (no rebuild; beside a server, use its API)")
    sp.add_argument("files", nargs="+", help="JSONL, Markdown/text, PDF, DOCX or HTML files (ingest's formats)")
    common(sp)
    sp.set_defaults(func=cmd_upsert)

    sp = command("sync", "keep a live index in step with folders: new, changed and deleted files, ACL edits")
    sp.add_argument("sources", nargs="+", help="the folders (or files) the index's documents come from")
    sp.add_argument("--dry-run", action="store_true", help="print the plan (ids to put, re-ACL and delete), change nothing")
    sp.add_argument("--watch", type=float, default=None, metavar="SECONDS",
                    help="keep running, looking again every SECONDS and syncing when a file changed")
    sp.add_argument("--keep-deleted", action="store_true",
                    help="keep documents whose file is gone (default: delete them)")
    sp.add_argument("--skip-bad-files", action="store_true", help="leave out bad files and list them, as ingest does")
    sp.add_argument("--strict-fields", action="store_true", help="refuse front-matter keys outside the fields, as ingest does")
    sp.add_argument("--ocr", action="store_true", help="read scanned PDF pages by OCR, as ingest does")
    sp.add_argument("--markdown-sections", action="store_true", default=None,
                    help="make a Markdown file's headings its sections, as ingest does with it")
    common(sp)
    sp.set_defaults(func=cmd_sync)

    sp = command("delete", "delete documents from a live index")
    sp.add_argument("ids", nargs="+", help="document ids (applied together, or none if one is missing)")
    common(sp)
    sp.set_defaults(func=cmd_delete)

    # Its --set is the new ACL, so this command takes settings from QUARRY_* variables only.
    sp = sub.add_parser("acl", help="replace one document's ACL (revocation holds from the next query on)")
    sp.add_argument("id", help="document id")
    sp.add_argument("--set", dest="acl_entries", nargs="+", required=True, metavar="ENTRY",
                    help="the new ACL: principal ids, group:NAME or public")
    common(sp)
    sp.set_defaults(func=cmd_acl)

    sp = command("compact", "fold the live changes into a new base snapshot (a running server switches to it)")
    common(sp)
    sp.set_defaults(func=cmd_compact)

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

    sp = command("cluster", "serve a sharded index from a Ray cluster (needs the cluster extra: pip install 'quarry[cluster]')")
    cluster = sp.add_subparsers(dest="cluster_command", required=True)
    sp = cluster.add_parser("serve", help="a front: the HTTP API, MCP and auth of one node, over the shards on Ray Serve",
                            parents=[overrides])
    sp.add_argument("--address", required=True, help="the Ray cluster to join (`ray start --head` prints it), e.g. HOST:6379")
    sp.add_argument("--replicas", type=int, default=2, help="replicas of each shard, at most one per node (default 2)")
    sp.add_argument("--retry-s", type=float, default=10.0,
                    help="how long a shard call is sent again to another replica before it is a 503 (default 10)")
    sp.add_argument("--attach", action="store_true",
                    help="use the shard applications another front deployed (checked against cluster.json)")
    common(sp)
    serving(sp, "API keys file with at least one active key (or QUARRY_KEYS_FILE; see `quarry keys add`)")
    sp.set_defaults(func=cmd_cluster_serve)

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
        no_progress(sp)
        if name == "eval":
            sp.add_argument("--report", default=None, help="folder for metrics.json, report.md and PNG plots")
            sp.add_argument("--full", action="store_true", help="print every metric (per route, per tag) on stdout")
        else:
            sp.add_argument("--seed", type=int, default=0, help="seed of the deterministic fits and ablations")
            sp.add_argument("--feedback", action="store_true",
                            help="also learn from the apps' feedback on answers, read from the audit database "
                                 "(the audit_path setting; default <index>/audit.duckdb); needs audit_questions")
        sp.set_defaults(func=fn)

    sp = command("keys", "manage API keys (stored hashed)")
    ks = sp.add_subparsers(dest="keys_command", required=True)
    keys_help = "keys file (or QUARRY_KEYS_FILE)"
    add = ks.add_parser("add", help="create a key for a principal and print it once", parents=[overrides])
    add.add_argument("--principal", required=True)
    add.add_argument("--groups", nargs="*", default=[])
    add.add_argument("--scopes", nargs="*", default=["query"], help="some of: query sql write admin")
    add.add_argument("--write-prefix", action="append", default=None, dest="write_prefixes", metavar="P",
                     help="the key writes only document ids starting with P (repeatable; default: every id)")
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
    no_progress(sp)
    sp.set_defaults(func=cmd_demo)

    sp = command("settings", "print every setting: its value, where it came from (default, env, flag) and its help")
    sp.add_argument("--json", action="store_true", help="one JSON object keyed by setting name")
    sp.set_defaults(func=cmd_settings)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from routes.service.process import configure_process

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
