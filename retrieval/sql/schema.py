"""What the SQL route knows about a table: columns, types, ACLs and its key columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from retrieval.sql.words import FILLER, WORD, name_roots, name_words
from retrieval.types import AccessScope

Kind = Literal["text", "number", "date", "timestamp", "bool", "list", "other"]


def column_kind(duckdb_type: str) -> Kind:
    t = duckdb_type.upper()
    if t.endswith("[]") or t.startswith("LIST") or t.startswith("STRUCT") or t.startswith("MAP"):
        return "list"
    if t.startswith("TIMESTAMP"):
        return "timestamp"
    if t == "DATE":
        return "date"
    if t in {"BOOLEAN", "BOOL"}:
        return "bool"
    if any(t.startswith(x) for x in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                                     "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE", "DECIMAL", "REAL")):
        return "number"
    if t.startswith("VARCHAR") or t in {"TEXT", "STRING", "UUID"}:
        return "text"
    return "other"


@dataclass(frozen=True)
class ColumnInfo:
    """A column; `description` and `aliases` come from the table's sidecar: what a team calls
    the column when its name does not say it ("repair cost" for `amt_2`)."""

    name: str
    type: str
    description: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def kind(self) -> Kind:
        return column_kind(self.type)

    # What the name says (retrieval/sql/words.py), worked out once per column: schema linking
    # asks at every (word, column) pair of every question, and a snapshot's catalog makes its
    # columns once.
    @cached_property
    def words(self) -> frozenset[str]:
        described = [w for w in WORD.findall(self.description.lower()) if len(w) >= 3 and w not in FILLER]
        return name_words(self.name).union(*(name_words("_".join(a.lower().split())) for a in self.aliases),
                                           name_words("_".join(described)) if described else ())

    @cached_property
    def roots(self) -> frozenset[str]:
        return name_roots(self.words)


@dataclass(frozen=True)
class TableInfo:
    """A user table. `row_acl` means rows carry an `acl` column the service filters on."""

    name: str
    columns: tuple[ColumnInfo, ...]
    acl: tuple[str, ...]
    row_acl: bool = False
    id_column: str | None = None
    doc_column: str | None = None
    rows: int = 0
    source: str | None = field(default=None, compare=False)
    description: str = ""  # from the sidecar, as the columns' (ColumnInfo)
    aliases: tuple[str, ...] = ()  # what a team calls the table: "fault log" for `flt_reg`
    owner: str | None = None  # the document whose file holds this table (gone with it: indexes/tables.py)

    def readable_by(self, access: AccessScope) -> bool:
        return access.can_read(self.acl)

    def visible_columns(self) -> tuple[ColumnInfo, ...]:
        """Columns a caller sees: the row ACL column is the service's, not the caller's."""
        return tuple(c for c in self.columns if not (self.row_acl and c.name == "acl"))

    def column(self, name: str) -> ColumnInfo | None:
        return next((c for c in self.visible_columns() if c.name == name), None)


@dataclass(frozen=True)
class ColumnProfile:
    """What schema linking may know of a column, computed over the rows one principal may read:
    its categorical values (when few) and the prefixes of identifier-like values ("INC-") of a
    text column, and how many digits each value has when every one is a number of that many
    digits written as text (fleet numbers "2214", rooms "101"); for a floating-point column,
    the fewest decimal places (1 to 4) that every value has, when there is such a number
    (amounts of money kept as DOUBLE)."""

    values: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    decimals: int | None = None
    digits: int | None = None
