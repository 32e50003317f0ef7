"""What a caller reads when sqlglot cannot parse a statement: where (line, column, the token
there) and what, in SQL's words rather than the parser's internals. sqlglot reports a
multiplication with nothing after it as "Required keyword: 'expression' missing for <class
'sqlglot.expressions.core.Mul'>"; the caller wrote `SELEC * FROM t` or `SELECT 2 * FROM t`
and should read "'*' has nothing after it"."""

from __future__ import annotations

import re
from typing import Any

from sqlglot.errors import ParseError, TokenError

# sqlglot expression classes a caller knows by their SQL spelling
_OPERATORS = {
    "Mul": "*", "Div": "/", "Add": "+", "Sub": "-", "Mod": "%", "DPipe": "||", "EQ": "=", "NEQ": "<>", "GT": ">",
    "GTE": ">=", "LT": "<", "LTE": "<=", "And": "AND", "Or": "OR", "Not": "NOT", "Like": "LIKE", "ILike": "ILIKE",
    "Is": "IS", "In": "IN", "Between": "BETWEEN", "Alias": "AS",
}
_CLAUSES = {"Where": "WHERE", "Having": "HAVING", "Group": "GROUP BY", "Order": "ORDER BY", "Limit": "LIMIT",
            "Join": "JOIN", "From": "FROM", "Select": "SELECT", "Case": "CASE", "Cast": "CAST", "Qualify": "QUALIFY"}
_MISSING = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")
_CLASS = re.compile(r"<class '[\w.]*?(\w+)'>")


def parse_error_message(error: ParseError | TokenError) -> str:
    """One line for the caller: what is wrong, and where."""
    if isinstance(error, TokenError):
        near = re.search(r"Error tokenizing '(.*)'", str(error), re.S)
        tail = f" near {near.group(1)[-40:]!r}" if near else ""
        return f"could not read the statement{tail}: an unclosed quote or comment, or a character SQL does not use"
    first: dict[str, Any] = error.errors[0] if error.errors else {}
    what = _plain(str(first.get("description") or str(error).splitlines()[0]))
    where = ""
    if first.get("line"):
        where = f" at line {first['line']}, column {first.get('col')}"
        if first.get("highlight"):
            where += f" ({str(first['highlight'])[:40]!r})"
    return f"could not parse the statement{where}: {what}"


def _plain(description: str) -> str:
    """The parser's description without its class names."""
    m = _MISSING.search(description)
    if m:
        node = m.group(2)
        if node in _OPERATORS:
            return f"'{_OPERATORS[node]}' has nothing on one side (a value or column is missing)"
        if node in _CLAUSES:
            return f"the {_CLAUSES[node]} clause is incomplete"
        return f"an incomplete {node.lower()} expression"
    return _CLASS.sub(lambda c: c.group(1), description).rstrip(".")[:200]
