"""The write rules that need no index: a principal's write prefixes, the writer staying among
its document's readers, and keys that carry prefixes (or, made before them, do not)."""

from __future__ import annotations

import json

import pytest

from indexes.corpus import make_document
from indexes.live import Delete, Put, SetAcl
from retrieval.errors import Forbidden, InvalidRequest
from retrieval.types import Principal
from routes.service.write_access import OUTSIDE_PREFIXES, check_changes, check_target, read_rule

WRITER = Principal("cms", ("content",), frozenset({"query", "write"}), ("team-a-", "shared-"))
ADMIN = Principal("ops", (), frozenset({"admin"}))


def _put(doc_id: str, acl: list[str]) -> Put:
    return Put(make_document({"id": doc_id, "text": "t", "acl": acl}, None, ("group:admin",)), "t")


def test_a_principal_writes_only_ids_starting_with_one_of_its_prefixes():
    assert WRITER.may_write("team-a-1") and WRITER.may_write("shared-x")
    assert not WRITER.may_write("team-b-1") and not WRITER.may_write("team-a")
    assert Principal("old", scopes=frozenset({"write"})).may_write("anything")  # no prefixes: every id
    assert not Principal("none", scopes=frozenset({"write"}), write_prefixes=()).may_write("anything")
    with pytest.raises(InvalidRequest):
        Principal("bad", write_prefixes=("a/",))
    with pytest.raises(InvalidRequest, match="normal form"):
        Principal("bad", write_prefixes=("\uff41-",))


def test_outside_the_prefixes_the_refusal_is_one_fixed_message_and_the_id_is_checked_first():
    for doc_id in ("vault-01", "vault-99", "x" * 200):
        with pytest.raises(Forbidden) as refused:
            check_target(WRITER, doc_id)
        assert refused.value.message == OUTSIDE_PREFIXES
    with pytest.raises(InvalidRequest, match="invalid document id"):
        check_target(WRITER, "team-a-%2e%2e")
    assert check_target(WRITER, "\uff54eam-a-1") == "team-a-1"  # the normal form is what the prefix is matched against
    assert check_target(None, "vault-01") == "vault-01"  # the local operator


def test_a_put_or_acl_change_must_leave_the_writer_among_the_readers_unless_it_is_an_admin():
    check_changes(WRITER, [_put("team-a-1", ["group:content"]), _put("team-a-2", ["public"]),
                           _put("team-a-3", ["cms", "group:finance"]), SetAcl("team-a-4", ("group:finance", "group:content")),
                           Delete("team-a-5")])
    for change in (_put("team-a-1", ["nobody-xyz"]), _put("team-a-1", ["group:finance"]), SetAcl("team-a-1", ("group:x",))):
        with pytest.raises(Forbidden, match="leaves out its writer"):
            check_changes(WRITER, [change])
    with pytest.raises(Forbidden, match="outside the key's write prefixes"):  # the prefix rule comes first
        check_changes(WRITER, [_put("vault-1", ["nobody-xyz"])])
    check_changes(ADMIN, [_put("orphan", ["nobody-xyz"]), SetAcl("x", ("group:x",))])
    check_changes(None, [_put("orphan", ["nobody-xyz"])])
    # Changing an existing document: the read rule, which the admin scope and the operator pass.
    rule = read_rule(WRITER)
    assert rule is not None and rule(("group:content",)) and not rule(("group:vault",))
    assert read_rule(ADMIN) is None and read_rule(None) is None
    assert read_rule(Principal("member", ("admin",), frozenset({"write"}))) is not None  # a group is no admin scope


def test_a_key_carries_its_prefixes_and_a_keys_file_without_them_still_loads(tmp_path):
    from auth.keys import KeyStore

    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": [{"key_id": "0011223344", "sha256": "0" * 64, "principal": "legacy",
                                          "groups": ["content"], "scopes": ["query", "write"],
                                          "created_at": "2025-01-01T00:00:00+00:00", "revoked_at": None}]}))
    store = KeyStore(path)
    token, rec = store.add("cms", ["content"], ["query", "write"], ["team-a-", "\uff53hared-"])
    assert rec.write_prefixes == ("team-a-", "shared-")
    assert store.authenticate(token).write_prefixes == ("team-a-", "shared-")
    listed = {r.principal: r.public() for r in store.records()}
    assert listed["cms"]["write_prefixes"] == ["team-a-", "shared-"] and listed["legacy"]["write_prefixes"] is None
    assert listed["legacy"]["groups"] == ["content"] and listed["legacy"].keys() >= {"key_id", "scopes", "created_at"}
    store.revoke(rec.key_id)  # a rewrite of the file keeps the prefixes
    assert KeyStore(path).records()[1].write_prefixes == ("team-a-", "shared-")
    with pytest.raises(InvalidRequest, match="'write' scope"):
        store.add("reader", [], ["query"], ["team-a-"])
    with pytest.raises(InvalidRequest, match="invalid document id"):
        store.add("cms", [], ["write"], ["a%2Fb"])


def test_keys_add_takes_repeated_write_prefixes_and_keys_list_shows_them(tmp_path, capsys):
    from routes.cli.main import main

    keys = str(tmp_path / "keys.json")
    assert main(["keys", "add", "--principal", "cms", "--scopes", "query", "write", "--write-prefix", "team-a-",
                 "--write-prefix", "shared-", "--keys", keys]) == 0
    added = json.loads(capsys.readouterr().out)
    assert added["write_prefixes"] == ["team-a-", "shared-"] and added["key"].startswith("qk_")
    assert main(["keys", "add", "--principal", "old", "--scopes", "write", "--keys", keys]) == 0
    capsys.readouterr()
    assert main(["keys", "list", "--keys", keys]) == 0
    listed = {k["principal"]: k["write_prefixes"] for k in json.loads(capsys.readouterr().out)["keys"]}
    assert listed == {"cms": ["team-a-", "shared-"], "old": None}
