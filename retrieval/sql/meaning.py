"""Which column a question's word means when it does not name one: "spending" for
`amount_usd`, "effort" for `hours_spent`, "charges" for `freight_charge`.

Schema linking first matches words against column names (retrieval/sql/words.py). A word
that names no column, schema value or cue can still mean one; here it is compared, with the
embedding model the service already loaded, to the words of the names of the columns that
could fill the role the question needs (a number to sum, average, compare or rank; any
column of a record). No word list names a column.

The decision, per word left unexplained: the candidate column most similar to it must reach
`min_similarity` (cosine), and beat the next candidate by `min_margin`; the most similar
(word, column) pair that passes wins. Measured with all-MiniLM-L6-v2 on made-up tables
(expenditures, tickets, shipments, rentals; none of the demo's), comparing one word with a
column's name words: right pairs scored 0.29-0.76 ("spending" ~ amount usd 0.36, "effort" ~
hours spent 0.46, "charges" ~ freight charge 0.54, "reopens" ~ reopen count 0.76), unrelated
words 0.15-0.27 against the nearest number column ("equipment", "lab", "urgent", "pets").
Adding the declared type or sample values to the column's text lowered that separation
("spending" ~ "amount usd: 1250.0, 88.4" 0.21), so the type restricts the candidates
instead, and values are matched as values by the linker. A word that means a column but
stays under the bar leaves the question declined, never guessed; a word that merely sits
near a column's meaning can pass it ("warehouse" ~ freight charge 0.35): a known limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from retrieval.sql.schema import ColumnInfo, TableInfo
from retrieval.sql.words import singular

Encode = Callable[[str], np.ndarray]  # one text -> its L2-normalised embedding (1 x dim or dim)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def name_text(name: str) -> str:
    """A column name as words: `amount_usd` -> "amount usd", `hoursSpent` -> "hours spent"."""
    return " ".join(_CAMEL.sub(" ", name).replace("_", " ").replace("-", " ").lower().split())


@dataclass(frozen=True)
class Meant:
    """A column a question word means, and how sure: the cosine and the margin over the next."""

    column: ColumnInfo
    word: str
    similarity: float
    margin: float


@dataclass(frozen=True)
class ColumnMeaning:
    """Links a question word to the column it means by embedding similarity (module docstring)."""

    encode: Encode
    min_similarity: float = 0.30
    min_margin: float = 0.10
    min_table_similarity: float = 0.50

    def means_table(self, word: str, table: TableInfo) -> bool:
        """Whether `word`, a plural noun, names the table's records in other words ("faults"
        for `defects`): its cosine with the table's name, an alias or its key's noun reaches
        `min_table_similarity`. Only a word the table was already picked for is asked, never
        to pick a table. The model measures relatedness, not sameness, so only plurals (what
        a question counts or lists) qualify: singular topic words come close too (warranty ~
        repair 0.54, mechanic ~ repairs 0.57, damage ~ repairs 0.52). Measured on made-up
        pairs: faults ~ defects 0.63, problems ~ defect 0.54, incidents ~ event 0.54,
        borrowings ~ loans 0.75; plurals that are not the records 0.13-0.38 (bolts,
        drivers, breakdowns ~ repairs, claims ~ repairs, members ~ loans); issues ~ defects
        (0.46) and jobs ~ repairs (0.43) stay unlinked."""
        if len(word) < 4 or not word.isalpha() or singular(word) == word:
            return False
        texts = [name_text(table.name), *table.aliases]
        if table.id_column and table.id_column.endswith("_id") and len(table.id_column) > 3:
            texts.append(name_text(table.id_column[:-3]))
        w = self._vector(word)
        return max(float(self._vector(t) @ w) for t in texts) >= self.min_table_similarity

    def column_for(self, words: Iterable[str], columns: Sequence[ColumnInfo]) -> Meant | None:
        """The column of `columns` one of `words` means with confidence, or None."""
        candidates = sorted({w for w in words if len(w) >= 3 and not any(c.isdigit() for c in w)})
        if not candidates or not columns:
            return None
        texts = [[name_text(c.name), *c.aliases, *([c.description] if c.description else [])] for c in columns]
        owner = np.asarray([i for i, ts in enumerate(texts) for _ in ts])
        vectors = np.stack([self._vector(t) for ts in texts for t in ts])
        best: Meant | None = None
        for word in candidates:
            # a column's similarity is that of its closest text: its name, an alias, its description
            per_text = vectors @ self._vector(word)
            sims = np.full(len(columns), -1.0, dtype=np.float32)
            np.maximum.at(sims, owner, per_text)
            order = np.argsort(-sims, kind="stable")
            top = float(sims[order[0]])
            margin = top - float(sims[order[1]]) if len(order) > 1 else top
            if top >= self.min_similarity and margin >= self.min_margin and (best is None or top > best.similarity):
                best = Meant(columns[int(order[0])], word, top, margin)
        return best

    def _vector(self, text: str) -> np.ndarray:
        return np.asarray(self.encode(text), dtype=np.float32).reshape(-1)
