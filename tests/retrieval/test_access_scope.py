"""The access scope every retriever receives: a principal's ACL tokens as a plain value that
can cross a process boundary and key a cache."""

from __future__ import annotations

import json
import pickle

import pytest

from retrieval.errors import InvalidRequest
from retrieval.types import AccessScope, Principal


def test_a_principals_scope_is_its_acl_tokens_and_nothing_else():
    carol = Principal("carol", ("security", "sre"), frozenset({"query", "sql"}))
    scope = carol.access_scope()
    assert scope == AccessScope(frozenset({"public", "carol", "group:security", "group:sre"}))
    assert scope.tokens == carol.access_tokens()
    assert scope.can_read(("group:sre",)) and not scope.can_read(("group:finance", "dave"))
    # operation scopes decide which calls a caller may make, not what a call reads
    assert Principal("carol", ("sre", "security")).access_scope() == scope


def test_a_scope_crosses_json_and_pickle_unchanged_and_keys_a_dict():
    scope = Principal("bob", ("finance",)).access_scope()
    wire = json.dumps(scope.to_json())
    assert wire == '{"tokens": ["bob", "group:finance", "public"]}'  # one scope, one encoding
    assert AccessScope.from_json(json.loads(wire)) == scope
    assert pickle.loads(pickle.dumps(scope)) == scope
    assert {scope: 1}[AccessScope(frozenset({"public", "group:finance", "bob"}))] == 1


@pytest.mark.parametrize("data", [
    {"tokens": "public"}, {"tokens": [1]}, {"tokens": ["public"], "id": "root"}, ["public"], None,
    {"tokens": ["group:sre", "every one"]}, {"tokens": ["group:"]},
])
def test_a_scope_from_the_wire_that_is_not_a_set_of_acl_entries_is_refused(data):
    with pytest.raises(InvalidRequest):
        AccessScope.from_json(data)


def test_a_scope_holds_a_frozenset_so_it_stays_hashable():
    with pytest.raises(InvalidRequest):
        AccessScope({"public"})  # type: ignore[arg-type]
