"""What one SQL statement can build, bounded by construction (not by a list of bad functions).

DuckDB checks a statement's interrupt and its memory limit between vectors of 2048 rows, and
a value that a scalar function builds (a string, a list) is allocated outside the memory
limit. One call that makes a large value from small ones (`regexp_replace` with a global
flag inserts its replacement at every position; `concat` of a value with itself, nested)
can therefore run for a minute and take gigabytes inside one vector, where neither the time
limit nor the memory limit reaches it. So:

- **A row budget.** Every call that can build a value larger than its largest input (`||`,
  `concat`, `concat_ws`, `regexp_replace`, `lpad`/`rpad`, `strftime`, list and struct
  literals) is checked *before* it runs, from the sizes of its inputs: a bound on its
  result, computed in SQL, must be at most the statement's row budget (`value_bytes`,
  16 KiB) divided by the number of function calls in the statement. A call whose bound is
  over raises a typed error instead of building. The budget is shared because every call
  keeps its result for the whole vector: whatever the statement nests, the values its calls
  build for one row stay within `value_bytes`, so a vector within 2048 x `value_bytes`
  (32 MiB). Values read from a table are data and are read as they are.
- **Arguments once.** The check reads a call's arguments through a lambda over one struct
  (`list_transform([{...}], lambda v: CASE WHEN <bound> > <limit> THEN error(...) ELSE
  f(v.a0, ...) END)[1]`), so nesting checked calls grows the statement linearly, never
  exponentially; `initcap`, which sqlglot writes for DuckDB with its argument three times,
  reads it through the same binding.
- **Aggregates that collect** (`string_agg`, `array_agg`/`list`) grow with rows, not
  within a row: their state is DuckDB's memory, which the SQL route's own database limits
  (indexes/sql_runner.py). As window functions they would hold a frame per row, so they are
  refused there.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from retrieval.errors import SqlRejected

VALUE_BYTES = 16_384  # what one row of a statement may build through function calls, all calls together
MARKER = "row budget"  # in every bound error, so the runner can tell it from other invalid input
_VAR = "quarry_v"
_TEMPLATE = (f"LIST_TRANSFORM([{{'a0': 0}}], LAMBDA {_VAR} : CASE WHEN 1 > 0 THEN ERROR('') ELSE 0 END)[1]")
# Functions whose result may be larger than their largest input. Anything else returns one of
# its inputs, a part of one, or a fixed-size value; aggregates collect across rows (above).
GROWTH = (exp.DPipe, exp.Concat, exp.ConcatWs, exp.RegexpReplace, exp.Pad, exp.TimeToStr, exp.Array, exp.Struct)
_GROWTH_NAMES = frozenset({"concat", "concat_ws", "regexp_replace", "lpad", "rpad", "strftime", "list_value",
                           "struct_pack", "repeat", "printf", "format", "list_concat", "array_concat"})
COLLECTING = (exp.GroupConcat, exp.ArrayAgg)
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)


def bound_values(root: exp.Expr, value_bytes: int = VALUE_BYTES) -> int:
    """Rewrite `root` in place so that no call builds more than its share of the row budget;
    returns the share (bytes per call). Raises SqlRejected for what cannot be bounded."""
    calls = _counted_calls(root)
    share = max(1, value_bytes // max(1, calls))
    for window in root.find_all(exp.Window):
        if isinstance(window.this, COLLECTING):
            name = _display(window.this)
            raise SqlRejected(f"{name} cannot be a window function (it would hold its frame for every row)",
                              reason="function", function=name)
    for anonymous in root.find_all(exp.Anonymous):
        if anonymous.name.lower() in _GROWTH_NAMES:
            raise SqlRejected(f"function {anonymous.name!r} cannot be called this way", reason="function",
                              function=anonymous.name)
    # Innermost first (breadth-first, reversed), so a call's arguments are bound when it is.
    for node in reversed(list(root.find_all(*GROWTH, exp.Initcap))):
        if isinstance(node, exp.Initcap):
            node.replace(_bind(node, [node.this]))
        elif not _constant_list(node):
            node.replace(_bind(node, _inputs(node), (share, value_bytes, calls)))
    return share


def refusal(error: SqlRejected) -> SqlRejected:
    """The database's refusal of a statement, read: a bound that fired (the `error()` of a
    checked call) becomes its own message with reason `too_large`; any other stays as it is."""
    if MARKER not in error.message:
        return error
    return SqlRejected(error.message.split("Error: ", 1)[-1].splitlines()[0], reason="too_large")


def _display(node: exp.Expr) -> str:
    """A call's name as the caller wrote it (near enough): `||`, `lpad`, `regexp_replace`."""
    if isinstance(node, exp.DPipe):
        return "||"
    return node.sql(dialect="duckdb").split("(", 1)[0].strip().lower() or node.key


def _counted_calls(root: exp.Expr) -> int:
    """The calls that share the budget: every function call and `||`, but not arithmetic,
    comparisons, AND/OR or aggregates (which keep nothing per row)."""
    n = 0
    for node in root.walk():
        if isinstance(node, exp.DPipe) or (isinstance(node, (*GROWTH, exp.Func)) and not isinstance(
                node, (exp.AggFunc, exp.Connector, exp.Predicate, exp.Binary, *_ARITHMETIC))):
            n += 1
    return n


def _constant_list(node: exp.Expr) -> bool:
    """A list or struct literal of literals (`quantile_cont(x, [0.25, 0.75])` needs it constant):
    its size is the statement's own."""
    return isinstance(node, (exp.Array, exp.Struct)) and all(
        isinstance(v, (exp.Literal, exp.Null, exp.Boolean)) for v in _values(node))


def _values(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.Struct):
        return [e.expression if isinstance(e, (exp.PropertyEQ, exp.Slice)) else e for e in node.expressions]
    return list(node.expressions)


def _inputs(node: exp.Expr) -> list[exp.Expr]:
    """The arguments whose size the bound reads (bound through the lambda); literals stay in place."""
    if isinstance(node, exp.DPipe):
        args = [node.this, node.expression]
    elif isinstance(node, (exp.Concat, exp.ConcatWs, exp.Array, exp.Struct)):
        args = _values(node)
    elif isinstance(node, exp.RegexpReplace):
        args = [node.this, node.args.get("replacement")]
    elif isinstance(node, exp.Pad):
        args = [node.this, node.expression, node.args.get("fill_pattern")]
    else:  # TimeToStr
        args = [node.args.get("format")]
    return [a for a in args if a is not None and not isinstance(a, (exp.Literal, exp.Null, exp.Boolean))]


def _size(value: exp.Expr) -> exp.Expr:
    """Bytes of a value as SQL (0 for NULL), as DOUBLE so products cannot overflow."""
    if isinstance(value, exp.Literal):
        return exp.Literal.number(len(str(value.this).encode()))
    if isinstance(value, (exp.Null, exp.Boolean)):
        return exp.Literal.number(0)
    text = exp.Cast(this=value.copy(), to=exp.DataType.build("VARCHAR"))
    return exp.Cast(this=exp.func("coalesce", exp.Anonymous(this="strlen", expressions=[text]), exp.Literal.number(0)),
                    to=exp.DataType.build("DOUBLE"))


def _sum(terms: list[exp.Expr]) -> exp.Expr:
    out = terms[0] if terms else exp.Literal.number(0)
    for t in terms[1:]:
        out = exp.Add(this=out, expression=t)
    return exp.Paren(this=out)


def _bound(node: exp.Expr) -> exp.Expr:
    """An upper bound, in bytes, on what `node` builds (its arguments already replaced by the
    lambda's fields, so they are read once)."""
    if isinstance(node, exp.DPipe):
        return _sum([_size(node.this), _size(node.expression)])
    if isinstance(node, exp.ConcatWs):
        values = _values(node)
        sep = _size(values[0]) if values else exp.Literal.number(0)
        return _sum([*(_size(v) for v in values), exp.Mul(this=sep, expression=exp.Literal.number(len(values)))])
    if isinstance(node, (exp.Concat, exp.Array, exp.Struct)):
        values = _values(node)
        return _sum([*(_size(v) for v in values), exp.Literal.number(8 * len(values))])
    if isinstance(node, exp.RegexpReplace):
        # Every match (at most one per position, and one at the end) becomes the replacement,
        # whose back-references each repeat at most the match: a global replace is within
        # 2 (|s| + 1)(|r| + 1), a single one within (|s| + 1)(|r| + 1).
        modifiers = node.args.get("modifiers")  # DuckDB replaces the first match unless told 'g'
        once = modifiers is None or isinstance(modifiers, exp.Literal) and "g" not in str(modifiers.this)
        product = exp.Mul(this=_sum([_size(node.this), exp.Literal.number(1)]),
                          expression=_sum([_size(node.args.get("replacement") or exp.Literal.string("")),
                                           exp.Literal.number(1)]))
        return product if once else exp.Mul(this=exp.Literal.number(2), expression=product)
    if isinstance(node, exp.Pad):
        # `n` characters, each at most 4 bytes (the result is cut to n when the input is longer).
        n = exp.Cast(this=exp.func("coalesce", node.expression.copy(), exp.Literal.number(0)), to=exp.DataType.build("DOUBLE"))
        return exp.Mul(this=exp.Literal.number(4), expression=exp.func("greatest", n, exp.Literal.number(0)))
    # strftime: a specifier of two characters writes at most about 30 (a zone name, %c)
    return exp.Mul(this=exp.Literal.number(16), expression=_sum([_size(node.args["format"]), exp.Literal.number(4)]))


def _bind(node: exp.Expr, inputs: list[exp.Expr], check: tuple[int, int, int] | None = None) -> exp.Expr:
    """`node` with its `inputs` read once through a lambda; with `check` (share, row budget,
    calls), refused before it runs when its bound is over the share."""
    wrapper = sqlglot.parse_one(_TEMPLATE, read="duckdb")
    struct, lam = wrapper.find(exp.Struct), wrapper.find(exp.Lambda)
    assert struct is not None and lam is not None
    call = node.copy()
    copies, originals = list(call.walk()), list(node.walk())  # the same order: the copy's node for each original
    fields: list[exp.Expr] = []
    for i, arg in enumerate(inputs):
        name = exp.to_identifier(f"a{i}")
        fields.append(exp.PropertyEQ(this=name, expression=arg.copy()))
        copies[next(j for j, o in enumerate(originals) if o is arg)].replace(
            exp.Dot(this=exp.column(_VAR), expression=name.copy()))
    if fields:
        struct.set("expressions", fields)
    if check is None:
        lam.set("this", call)
        return wrapper
    share, value_bytes, calls = check
    case = lam.this
    test = case.args["ifs"][0]
    test.set("this", exp.GT(this=_bound(call), expression=exp.Literal.number(share)))
    message = (f"{_display(node)} would build more than {share:,} bytes in one row: a statement's function calls "
               f"share a {MARKER} of {value_bytes:,} bytes, and this one has {calls}; build shorter values")
    test.set("true", exp.Anonymous(this="error", expressions=[exp.Literal.string(message)]))
    case.set("default", call)
    return wrapper
