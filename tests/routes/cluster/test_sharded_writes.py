"""Live writes to a sharded index: a front sends each write to the shard that owns its ids,
that shard's replicas share its write-ahead log, and every front follows it.

Shard replicas are the deployment's own class (routes/cluster/replica.py) in this process,
over a SciFact sample with ACLs ingested at 2 shards (real model, snapshots, logs); two
"fronts" are two sets of replicas and views over the same folder, as two front processes
with their own replicas would be. The oracle is one node given the same writes. The Ray
deployment of the same path is exercised in tests/system/cluster_in_netns.py."""

from __future__ import annotations

import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from indexes.live import Delete, Put, SetAcl
from indexes.shards import build_shards, load_cluster, read_cluster, shard_of
from indexes.snapshot_build import BuildOptions
from retrieval.errors import Conflict, Forbidden, InvalidRequest, NotFound
from retrieval.shard import LocalShard
from retrieval.types import Document, Principal
from routes.cluster.replica import ShardReplica
from routes.service.generations import Generations
from routes.service.resources import Resources
from routes.service.settings import Settings
from routes.service.sharded import open_sharded
from routes.service.sharded_writes import ShardedWriter
from routes.service.view import open_view
from routes.service.writes import Writer
from tests.routes.service.test_sharded import LIMITS, PRINCIPALS, TODAY, outcome, same

SHARDS = 2
ROOT, ALICE, BOB = PRINCIPALS[3], PRINCIPALS[0], PRINCIPALS[1]
SAM = Principal("sam", ("sre",))  # alice's group, not alice
OPS = Principal("ops", scopes=frozenset({"admin"}))  # the admin scope: writes any ACL, passes the read rule


@pytest.fixture(scope="module")
def built(scifact_sample, tmp_path_factory, embedder):
    """(claims, one node's index, the same corpus at 2 shards), built once; tests copy them."""
    source, claims, single = scifact_sample
    sharded = tmp_path_factory.mktemp("writes-sharded")
    build_shards([source], sharded, embedder, SHARDS, BuildOptions(reuse_from=single))
    return claims, single, sharded


@pytest.fixture
def indexes(built, tmp_path):
    claims, single, sharded = built
    shutil.copytree(single, tmp_path / "single")
    shutil.copytree(sharded, tmp_path / "sharded")
    return claims, tmp_path / "single", tmp_path / "sharded"


class Front:
    """What one front process holds: a replica of each shard (the deployment's class), the
    sharded view over them and its writer."""

    def __init__(self, index: Path, embedder, resources: Resources) -> None:
        manifest = read_cluster(index)
        self.replicas = [ShardReplica(str(index), manifest, i) for i in range(manifest["shards"])]
        self.view = open_sharded(index, self.replicas, embedder, resources, Settings(), None, LIMITS, TODAY)
        self.generations = Generations(self.view)
        self.writer = ShardedWriter(self.generations)

    def write(self, changes, principal=ROOT, idempotency=None):
        return self.writer.write(changes, principal, idempotency, key=principal.id)

    def query(self, question: str, principal: Principal):
        return self.view.query(question, principal, deadline_ms=LIMITS.max_deadline_ms)

    def seqs(self) -> list[int]:
        return [r.describe()["seq"] for r in self.replicas]

    def close(self) -> None:
        self.view.close()
        for r in self.replicas:
            r._snapshot.close()


@pytest.fixture
def fronts(indexes, embedder):
    resources = Resources.open(Settings())
    made: list[Front] = []

    def make() -> Front:
        made.append(Front(indexes[2], embedder, resources))
        return made[-1]

    yield make
    for f in made:
        f.close()
    resources.shutdown()


def doc(doc_id: str, text: str, acl: tuple[str, ...], title: str | None = None) -> Document:
    return Document(id=doc_id, text=text, title=title, acl=acl)


def top_doc(front: Front, claims: list[str], principal: Principal, skip: set[str] = frozenset()) -> tuple[str, str]:
    """(claim, the top document of its answer) for the first claim `principal` gets one for."""
    for claim in claims:
        result = front.query(claim, principal)
        if result.status == "answer_context" and result.context[0].doc_id not in skip:
            return claim, result.context[0].doc_id
    raise AssertionError(f"no claim answered for {principal.id}")


def ids_on(shard: int, prefix: str, n: int) -> list[str]:
    """`n` new ids that the shard rule gives to `shard`."""
    out, i = [], 0
    while len(out) < n:
        if shard_of(f"{prefix}-{i}", SHARDS) == shard:
            out.append(f"{prefix}-{i}")
        i += 1
    return out


def test_writes_through_a_front_answer_what_one_node_answers_after_the_same_writes(indexes, fronts, embedder):
    claims, single_dir, _ = indexes
    a, b = fronts(), fronts()  # b is open before the writes: it follows the logs
    single = open_view(single_dir, embedder, limits=LIMITS, today=TODAY)
    generations = Generations(single, owned=True)
    writer = Writer(single_dir, generations)
    try:
        picked: set[str] = set()
        for _ in range(3):
            picked.add(top_doc(a, claims, ROOT, picked)[1])
        revoked, deleted, replaced = sorted(picked)
        old = a.view.document(replaced, ROOT.access_scope())
        new_id = ids_on(1, "new-doc", 1)[0]
        writes = [
            [Put(doc(new_id, f"A new finding: {claims[0]} This was confirmed in a cohort study.", ("group:sre",),
                     "New finding"), "test")],
            [SetAcl(revoked, ("group:admin",))],
            [Delete(deleted)],
            [Put(replace(old, text=old.text + " Replication failed in a later trial."), "test")],
        ]
        questions = claims[:12]
        before = {(p.id, q): outcome(single.query(q, p, deadline_ms=LIMITS.max_deadline_ms)) for p in PRINCIPALS
                  for q in questions}
        same_shard = ids_on(0, "batch", 2)
        writes.append([Put(doc(i, f"Batch document {i} about {claims[1]}", ("public",)), "test") for i in same_shard])
        for changes in writes:
            expected = writer.write(changes, None)
            got = a.write(changes, OPS)
            assert got["documents"] == expected["documents"]
            assert got["shard"] == shard_of(changes[0].doc.id if isinstance(changes[0], Put) else changes[0].doc_id, SHARDS)
        c = fronts()  # opened after the writes: it replays the logs
        assert sum(a.seqs()) == sum(b.seqs()) == sum(c.seqs()) == len(writes)
        with generations.lease() as g:
            node = g.engine
            answered = changed = 0
            for principal in PRINCIPALS:
                for question in questions:
                    expected = node.query(question, principal, deadline_ms=LIMITS.max_deadline_ms)
                    answered += expected.status == "answer_context"
                    changed += outcome(expected) != before[principal.id, question]
                    for name, front in (("a", a), ("b", b), ("c", c)):
                        same(expected, front.query(question, principal), f"front {name}, {principal.id}: {question}")
            assert answered >= 10 and changed >= 4, (answered, changed)  # the writes changed what is compared
            for doc_id in (new_id, revoked, deleted, replaced, *same_shard):
                for principal in PRINCIPALS:
                    want = node.document(doc_id, principal.access_scope())
                    for front in (a, b, c):
                        assert front.view.document(doc_id, principal.access_scope()) == want, (doc_id, principal.id)
        assert b.view.document(deleted, ROOT.access_scope()) is None
        assert b.view.document(new_id, ALICE.access_scope()).title == "New finding"
    finally:
        writer.close()
        generations.close()


def test_a_revocation_through_one_front_is_in_effect_on_the_next_request_through_another(indexes, fronts):
    claims = indexes[0]
    a, b = fronts(), fronts()
    claim, doc_id = top_doc(b, claims, SAM)
    assert b.view.document(doc_id, ALICE.access_scope()) is not None
    with pytest.raises(Forbidden):  # a writer may not leave itself out of the readers
        a.write([SetAcl(doc_id, ("group:admin",))], ALICE)
    a.write([SetAcl(doc_id, ("alice", "group:admin"))], ALICE)  # a reader may revoke the others' access
    after = b.query(claim, SAM)
    assert doc_id not in {h.doc_id for h in after.context}
    for attempt in after.attempts:
        assert doc_id not in {h.doc_id for h in attempt.hits}
    assert b.view.document(doc_id, SAM.access_scope()) is None
    assert b.view.document(doc_id, ROOT.access_scope()).acl == ("alice", "group:admin")
    with pytest.raises(NotFound):  # and one who lost it cannot change it back
        b.write([SetAcl(doc_id, ("group:sre",))], SAM)


def test_a_write_may_not_touch_what_the_caller_cannot_read_and_says_no_more_than_for_a_missing_id(indexes, fronts):
    a = fronts()
    hidden = next(d for r in a.replicas for d in r._log.view().chunks.doc_ids
                  if r.document_acl(d) == ("group:finance",))  # bob's group, not alice's
    before = a.seqs()
    errors = []
    for changes in ([Delete(hidden)], [SetAcl(hidden, ("group:sre",))], [Put(doc(hidden, "mine now", ("group:sre",)), "t")]):
        with pytest.raises(NotFound) as e:
            a.write(changes, ALICE)
        errors.append(str(e.value).replace(hidden, "ID"))
    with pytest.raises(NotFound) as missing:
        a.write([Delete("no-such-doc")], ALICE)
    assert set(errors) == {str(missing.value).replace("no-such-doc", "ID")}
    assert a.seqs() == before
    assert a.view.document(hidden, BOB.access_scope()).text != "mine now"


def test_a_batch_over_several_shards_is_refused_whole_with_its_ids_grouped_by_shard(indexes, fronts):
    a = fronts()
    first, second = ids_on(0, "x", 1)[0], ids_on(1, "x", 1)[0]
    before = a.seqs()
    with pytest.raises(InvalidRequest) as e:
        a.write([Put(doc(first, "one", ("public",)), "t"), Put(doc(second, "two", ("public",)), "t")])
    assert f"shard 00: {first!r}" in str(e.value) and f"shard 01: {second!r}" in str(e.value)
    assert a.seqs() == before
    assert a.view.document(first, ROOT.access_scope()) is None


def test_a_retried_write_is_applied_once_through_any_front(indexes, fronts):
    a, b = fronts(), fronts()
    doc_id = ids_on(1, "retry", 1)[0]
    changes = [Put(doc(doc_id, "written once", ("public",)), "t")]
    first = a.write(changes, idempotency=("root:key-1", b"body"))
    again = b.write(changes, idempotency=("root:key-1", b"body"))
    assert again == first
    assert a.seqs() == b.seqs() == [0, 1]
    with pytest.raises(Conflict):
        b.write(changes, idempotency=("root:key-1", b"another body"))
    assert b.seqs() == [0, 1]


def test_the_replicas_of_one_shard_take_turns_and_every_write_lands_once(indexes, fronts):
    a, b = fronts(), fronts()
    ids = ids_on(0, "turns", 12)
    results, errors = [], []

    def put(front: Front, doc_id: str) -> None:
        try:
            results.append(front.write([Put(doc(doc_id, f"text of {doc_id}", ("public",)), "t")]))
        except Exception as e:  # pragma: no cover - the assertion below names it
            errors.append(e)

    threads = [threading.Thread(target=put, args=(a if i % 2 else b, d)) for i, d in enumerate(ids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r["generation"] for r in results) == list(range(1, len(ids) + 1))
    assert a.seqs() == b.seqs() == [len(ids), 0]
    for front in (a, b):
        for d in ids:
            assert front.view.document(d, BOB.access_scope()).text == f"text of {d}"


def test_shards_opened_in_process_from_snapshots_alone_take_no_writes(indexes, embedder):
    index = indexes[2]
    resources = Resources.open(Settings())
    manifest, snapshots = load_cluster(index, embedder)
    try:
        view = open_sharded(index, [LocalShard(s.chunks, s.bm25, s.dense, s.catalog) for s in snapshots], embedder,
                            resources, Settings(), None, LIMITS, TODAY)
        with pytest.raises(Conflict, match="read-only"):
            ShardedWriter(Generations(view)).write([Delete(ids_on(0, "y", 1)[0])], ROOT)
        view.close()
    finally:
        for s in snapshots:
            s.close()
        resources.shutdown()
