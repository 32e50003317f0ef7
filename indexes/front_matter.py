"""A Markdown file's YAML front matter and first heading, read in time and memory bounded by
the file's size.

Front matter is a YAML mapping between `---` lines at the top of the file. It is parsed by a
SafeLoader that refuses anchors and aliases: front matter states a few fields, and aliases
are how a few hundred bytes expand into gigabytes (a "billion laughs"). It holds at most
MAX_FRONT_MATTER_BYTES and nests at most MAX_DEPTH deep; an error quotes at most
EXCERPT_CHARS of what it is about. The first `# heading` is found by a linear scan of the
lines (a backtracking pattern took minutes on one line of spaces).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from retrieval.errors import IngestError

MAX_FRONT_MATTER_BYTES = 64 * 1024
MAX_DEPTH = 16  # a document's fields need 3 (the mapping, metadata or acl, a value)
EXCERPT_CHARS = 200
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*\r?\n?", re.DOTALL)


class FrontMatterLoader(yaml.SafeLoader):
    """yaml.SafeLoader without anchors and aliases, and with nesting bounded by MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(None, None, "anchors and aliases (&name, *name) are not allowed in front matter",
                                event.start_mark)
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"front matter nests deeper than {MAX_DEPTH} levels", event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """`text`, or its first `limit` characters and how much was cut."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def split_front_matter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """(the front matter's fields, the body after it); a file without front matter is all
    body. Raises IngestError naming `where` and the line."""
    m = _FRONT.match(text)
    if not m:
        return {}, text
    block = m.group(1)
    if len(block) > MAX_FRONT_MATTER_BYTES or len(block.encode("utf-8")) > MAX_FRONT_MATTER_BYTES:
        raise IngestError(f"front matter larger than {MAX_FRONT_MATTER_BYTES:,} bytes: it holds a document's fields, "
                          "not its text", where, 1)
    try:
        parsed = yaml.load(block, Loader=FrontMatterLoader)  # noqa: S506 - FrontMatterLoader is a SafeLoader
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 2 if e.problem_mark is not None else 1
        raise IngestError(f"malformed front matter: {excerpt(str(e.problem or e))}", where, line) from None
    except (yaml.YAMLError, ValueError) as e:  # ValueError: a date such as 2024-13-45, an int past Python's digit limit
        raise IngestError(f"malformed front matter: {excerpt(str(e))}", where, 1) from None
    parsed = parsed or {}  # empty front matter (or a bare false, as before) states nothing
    if not isinstance(parsed, dict):
        raise IngestError("front matter must be a mapping", where, 1)
    return parsed, text[m.end():]


def first_heading(body: str) -> str | None:
    """The text of the first level-1 ATX heading (`# Title`, closing '#'s and spaces cut), by
    one pass over the lines."""
    start, end_of_text = 0, len(body)
    while start < end_of_text:
        end = body.find("\n", start)
        if end < 0:
            end = end_of_text
        if body.startswith("#", start) and start + 1 < end and body[start + 1].isspace():
            rest = body[start + 1:end].strip()
            if rest:
                return rest.rstrip("#").rstrip() or rest[0]
        start = end + 1
    return None
