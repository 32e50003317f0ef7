"""A statement the parser cannot read is rejected in SQL's words, saying where."""

from __future__ import annotations

import pytest

from retrieval.errors import SqlRejected
from retrieval.sql.guard import guard_sql
from retrieval.types import Principal


@pytest.mark.parametrize("statement, said", [
    ("SELEC * FROM incidents", "'*' has nothing on one side"),
    ("SELECT severity FROM incidents WHERE", "the WHERE clause is incomplete"),
    ("SELECT count(* FROM incidents", "Expecting )"),
    ("SELECT 'open FROM incidents", "unclosed quote"),
])
def test_a_typo_is_rejected_in_sql_words_not_the_parsers_internals(statement, said):
    with pytest.raises(SqlRejected) as err:
        guard_sql(statement, {}, Principal("x").access_scope())
    message = err.value.message
    assert said in message and "<class" not in message and "sqlglot" not in message, message


def test_the_rejection_says_where_the_statement_stops_making_sense():
    with pytest.raises(SqlRejected) as err:
        guard_sql("SELEC * FROM incidents", {}, Principal("x").access_scope())
    assert "line 1, column 12 ('FROM')" in err.value.message
