"""What every `quarry` command shares: settings from flags, principals, filters, output, progress."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from retrieval.errors import InvalidRequest
from retrieval.registry import SEARCH_ROUTES
from retrieval.types import Filters, Principal

if TYPE_CHECKING:
    from routes.service.settings import Settings

RETRIEVERS = SEARCH_ROUTES


def cli_principal(args: argparse.Namespace, scopes: Sequence[str] = ("query",)) -> Principal:
    return Principal(args.principal, tuple(args.groups or ()), frozenset(scopes))


def cli_filters(args: argparse.Namespace) -> Filters:
    return Filters(
        sources=tuple(args.source) if args.source else None,
        date_from=args.date_from,
        date_to=args.date_to,
        doc_ids=tuple(args.doc_id) if args.doc_id else None,
    )


def iso_date(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO date: {value!r}") from None


def emit(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")


UNITS = {"embed": "chunk", "questions": "question"}


def progress_bar(show: bool = True) -> Callable[[str, int, int], None] | None:
    """A tqdm bar (count, rate, ETA) on stderr per stage: ingest's catalog, bm25 and embed, and
    eval's questions; None when `show` is off (`--no-progress`). On a terminal it is redrawn
    10 times a second; when stderr is a file or a pipe (a log, `make run` under a supervisor)
    at most every 10 s, so a long build still says where it is and its log stays short."""
    if not show:
        return None
    from tqdm import tqdm

    bars: dict[str, Any] = {}
    terminal = sys.stderr.isatty()
    interval = 0.1 if terminal else 10.0
    width, height = _terminal_size() if terminal else (None, None)

    def report(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(total=total, desc=stage, unit=UNITS.get(stage, "step"), file=sys.stderr,
                                     mininterval=interval, maxinterval=max(10.0, interval), ncols=width,
                                     nrows=height)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            del bars[stage]  # the same stage may run again (tune evaluates before and after)

    return report


def _terminal_size() -> tuple[int, int]:
    """stderr's terminal (columns, lines); 80 x 24 where the terminal reports none (a
    pseudo-terminal nobody sized, as some runners allocate), where tqdm draws empty lines."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (OSError, ValueError):
        return 80, 24
    return size.columns or 80, size.lines or 24


def default_acl(entries: Sequence[str] | None) -> tuple[str, ...]:
    """The ACL of documents and tables without one: `--default-acl`, checked by the rule every
    ACL follows (retrieval/types.py: a keyword-like word is refused), or admins only."""
    from indexes.corpus import ADMIN_ONLY
    from retrieval.types import check_acl

    if not entries:
        return ADMIN_ONLY
    return check_acl(list(entries), "--default-acl", "; leave it out for admins only ('group:admin')")


# Command-line flags that set a setting: argparse dest -> setting name. A flag left out
# (None) leaves the setting to the environment and the defaults.
FLAG_SETTINGS = {"index": "index_dir", "model_path": "model_path", "host": "host", "port": "port",
                 "keys": "keys_file", "identity": "identity_file", "today": "today", "default_acl": "default_acl",
                 "reuse_embeddings": "reuse_embeddings", "markdown_sections": "markdown_sections"}


def load_settings(args: argparse.Namespace, env: dict[str, str] | None = None) -> Settings:
    """The settings of this run: defaults, then `QUARRY_*` variables, then `--set NAME=VALUE`
    and this command's own flags."""
    from routes.service.settings import Settings

    flags: dict[str, Any] = {}
    for item in getattr(args, "set", None) or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InvalidRequest(f"--set {item!r}: expected NAME=VALUE (see `quarry settings`)")
        flags[name.strip()] = value
    flags |= {name: getattr(args, dest) for dest, name in FLAG_SETTINGS.items() if getattr(args, dest, None) is not None}
    return Settings.load(env, flags)


def index_dir_of(settings: Settings) -> Path:
    """The index directory a command works on: --index, or QUARRY_INDEX_DIR."""
    if settings.source("index_dir") == "default":
        raise InvalidRequest(f"--index is required (or set {settings.env_name('index_dir')})")
    return settings.index_dir
