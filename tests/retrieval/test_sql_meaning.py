"""Linking a word to the column it means with the real embedding model, on made-up schemas."""

from __future__ import annotations

from retrieval.sql.meaning import ColumnMeaning, name_text
from retrieval.sql.schema import ColumnInfo


def _numbers(*names: str) -> list[ColumnInfo]:
    return [ColumnInfo(n, "DOUBLE") for n in names]


def test_a_word_links_to_the_number_column_it_means(embedder):
    meaning = ColumnMeaning(embedder.encode_query)
    assert meaning.column_for({"spending"}, _numbers("amount_usd")).column.name == "amount_usd"
    shipments = _numbers("weight_kg", "freight_charge", "transit_days")
    assert meaning.column_for({"charges"}, shipments).column.name == "freight_charge"
    found = meaning.column_for({"mass", "urgent"}, shipments)
    assert (found.column.name, found.word) == ("weight_kg", "mass")


def test_a_word_that_means_no_column_links_nothing(embedder):
    meaning = ColumnMeaning(embedder.encode_query)
    for word in ("glaze", "recycled", "equipment", "weight"):
        assert meaning.column_for({word}, _numbers("charge_eur")) is None, word
    assert meaning.column_for({"12", "ab"}, _numbers("charge_eur")) is None  # numbers and fragments are not words


def test_column_names_are_read_as_words():
    names = ("amount_usd", "hoursSpent", "freight-charge")
    assert [name_text(n) for n in names] == ["amount usd", "hours spent", "freight charge"]
