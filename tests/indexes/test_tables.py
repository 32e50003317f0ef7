from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from indexes.snapshot_build import build_snapshot
from indexes.snapshot_load import current_snapshot_path
from indexes.tables import plan_tables, table_name
from retrieval.errors import IngestError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_table_names_come_from_file_names():
    assert table_name(Path("x/Sev Incidents-2025.csv")) == "sev_incidents_2025"
    with pytest.raises(IngestError, match="must start with a letter"):
        table_name(Path("2025.csv"))


def test_sidecar_sets_the_table_acl_and_defaults_fail_closed(tmp_path):
    a = write(tmp_path / "a.csv", "x\n1\n")
    b = write(tmp_path / "b.csv", "x\n1\n")
    write(tmp_path / "a.acl.json", json.dumps({"acl": ["group:sre"]}))
    plans = {t.name: t.acl for t in plan_tables([a, b], ("group:admin",))}
    assert plans == {"a": ("group:sre",), "b": ("group:admin",)}


@pytest.mark.parametrize("sidecar, message", [
    ('{"acl": []}', "non-empty list"),
    ('{"acl": ["everyone"]}', "is not an ACL keyword"),
    ('{"acl": ["public"], "owner": "x"}', 'a sidecar holds'),
    ("not json", "unreadable ACL sidecar"),
])
def test_bad_sidecar_is_an_error_naming_it(tmp_path, sidecar, message):
    a = write(tmp_path / "a.csv", "x\n1\n")
    write(tmp_path / "a.acl.json", sidecar)
    with pytest.raises(IngestError, match=message) as err:
        plan_tables([a], ("group:admin",))
    assert err.value.path.endswith("a.acl.json")


def test_bad_row_acl_stops_ingest_naming_the_line_and_keeps_the_previous_snapshot(tmp_path, embedder):
    good = write(tmp_path / "src" / "t.csv", 'id,acl\nr1,"[""public""]"\n')
    index = tmp_path / "index"
    build_snapshot([good.parent], index, embedder)
    before = current_snapshot_path(index)
    write(good, 'id,acl\nr1,"[""public""]"\nr2,"[""group:""]"\n')
    with pytest.raises(IngestError, match=r"t.csv:3: row acl: invalid acl entries"):
        build_snapshot([good.parent], index, embedder)
    assert current_snapshot_path(index) == before
    assert [p.name for p in (index / "snapshots").iterdir()] == [before.name]


@pytest.mark.parametrize("header", ['id,"the ""team""",hours', 'id,"a\tb",hours'])
def test_a_column_name_the_service_cannot_quote_stops_ingest_naming_the_file(tmp_path, embedder, header):
    bad = write(tmp_path / "src" / "t.csv", f"{header}\nr1,x,3\n")
    with pytest.raises(IngestError, match=r"t.csv.*column name .* without a double quote"):
        build_snapshot([bad.parent], tmp_path / "index", embedder)
    assert not (tmp_path / "index" / "CURRENT").exists()


def test_tables_are_recorded_in_the_manifest(tables_index):
    manifest = json.loads((current_snapshot_path(tables_index) / "manifest.json").read_text())
    assert manifest["counts"]["tables"] == 3
    assert manifest["tables"]["tickets"]["row_acl"] is True
    assert manifest["tables"]["deployments"]["acl"] == ["group:sre", "group:admin"]


def test_parquet_files_become_tables_with_list_row_acls(tmp_path, embedder, threads):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from indexes.catalog import Catalog
    from indexes.sql_runner import SqlRunner
    from retrieval.retrievers.sql import SqlRetriever
    from retrieval.types import Principal

    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(pa.table({"shipment_id": ["S1", "S2", "S3"], "kg": [10.5, 20.0, 7.25],
                             "acl": [["public"], ["group:ops"], ["bob"]]}), src / "Shipments.parquet")
    write(src / "Shipments.acl.json", json.dumps({"acl": ["public"]}))
    index = tmp_path / "index"
    build_snapshot([src], index, embedder)
    catalog = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    try:
        sql = SqlRetriever(SqlRunner(catalog, watchdogs=threads), builder=threads)
        ops = Principal("olga", ("ops",), frozenset({"query", "sql"}))
        assert sql.run_statement("SELECT shipment_id, kg FROM shipments ORDER BY 1", ops).rows == (("S1", 10.5), ("S2", 20.0))
        assert sql.run_statement("SELECT sum(kg) FROM shipments", Principal("bob", (), frozenset({"sql"}))).rows == ((17.75,),)
    finally:
        catalog.close()


def test_a_row_acl_cell_with_one_bare_entry_is_a_list_of_one(tmp_path, embedder, threads):
    from indexes.catalog import Catalog
    from indexes.sql_runner import SqlRunner
    from retrieval.retrievers.sql import SqlLimits, SqlRetriever
    from retrieval.types import Principal

    src = write(tmp_path / "src" / "permits.csv",
                'permit_id,status,acl\nBP-1,approved,public\nBP-2,refused,group:planning\n'
                'BP-3,pending,"[""group:planning"", ""ann""]"\nBP-4,approved, public \n')
    write(src.with_name("permits.acl.json"), json.dumps({"acl": ["public"]}))
    index = tmp_path / "index"
    build_snapshot([src.parent], index, embedder)
    catalog = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    try:
        sql = SqlRetriever(SqlRunner(catalog, watchdogs=threads), SqlLimits(), builder=threads)

        def rows(p):
            return sorted(r[0] for r in sql.run_statement("SELECT permit_id FROM permits", p).rows)

        assert rows(Principal("erin", (), frozenset({"sql"}))) == ["BP-1", "BP-4"]
        assert rows(Principal("erin", ("planning",), frozenset({"sql"}))) == ["BP-1", "BP-2", "BP-3", "BP-4"]
        assert rows(Principal("ann", (), frozenset({"sql"}))) == ["BP-1", "BP-3", "BP-4"]
    finally:
        catalog.close()


@pytest.mark.parametrize("cell, reason", [('"[""public"""', "JSON list of strings or one entry"),
                                          ("public group:x", "JSON list of strings or one entry"),
                                          ('"[""group:""]"', "invalid acl entries"),
                                          ('"[""everyone""]"', "is not an ACL keyword"), ("all", "is not an ACL keyword")])
def test_a_malformed_row_acl_cell_stops_ingest_naming_the_line(tmp_path, embedder, cell, reason):
    bad = write(tmp_path / "src" / "t.csv", f'id,acl\nr1,public\nr2,{cell}\n')
    with pytest.raises(IngestError, match=rf"t.csv:3: .*{re.escape(reason)}"):
        build_snapshot([bad.parent], tmp_path / "index", embedder)


def test_declared_types_and_key_hold_whatever_rows_the_caller_cannot_read_contain(tmp_path, embedder):
    """Inferred over all rows, one admin-only row with text in a number column makes the
    column text for everyone; declared in the sidecar, the type and the key are the table's,
    and a row that breaks them stops the ingest instead of changing what others see."""
    from indexes.catalog import Catalog

    rows = "permit_id,fee,acl\nBP-1,120,public\nBP-2,80,public\n"
    src = write(tmp_path / "src" / "permits.csv", rows + 'BP-3,waived,"[""group:admin""]"\n')
    sidecar = src.with_name("permits.acl.json")
    write(sidecar, json.dumps({"acl": ["public"]}))
    index = tmp_path / "index"
    build_snapshot([src.parent], index, embedder)
    inferred = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    assert dict((c.name, c.type) for c in inferred.tables()["permits"].columns)["fee"] == "VARCHAR"
    inferred.close()
    write(sidecar, json.dumps({"acl": ["public"], "types": {"fee": "DOUBLE"}, "key": "permit_id"}))
    with pytest.raises(IngestError, match=r"column 'fee' does not hold DOUBLE values"):
        build_snapshot([src.parent], index, embedder)
    write(src, rows + 'BP-3,0,"[""group:admin""]"\n')
    build_snapshot([src.parent], index, embedder)
    declared = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    try:
        info = declared.tables()["permits"]
        assert dict((c.name, c.type) for c in info.columns)["fee"] == "DOUBLE" and info.id_column == "permit_id"
    finally:
        declared.close()
    write(src, rows + 'BP-2,0,"[""group:admin""]"\n')  # a duplicate key in a forbidden row
    with pytest.raises(IngestError, match=r"declared key 'permit_id' is not unique"):
        build_snapshot([src.parent], index, embedder)
    write(sidecar, json.dumps({"acl": ["public"], "types": {"fee": "DOUBLE; DROP TABLE x"}}))
    with pytest.raises(IngestError, match='"types" maps column names'):
        build_snapshot([src.parent], index, embedder)


def test_a_sidecar_describes_the_table_and_its_columns_and_the_snapshot_keeps_it(tmp_path, embedder):
    """What a team calls a terse table and its columns travels with the snapshot, so the SQL
    route links "compensation" to `amt` (tests/retrieval/test_sql_everyday.py)."""
    from indexes.catalog import Catalog

    src = write(tmp_path / "src" / "dly_reg.csv", "ref,amt,d1\nDR-1,120.5,2025-03-02\n")
    write(src.with_name("dly_reg.acl.json"), json.dumps({
        "acl": ["public"], "description": "Delays  of the ferries", "aliases": ["delay register"],
        "columns": {"amt": {"description": "compensation paid", "aliases": ["compensation", "refund"]},
                    "d1": {"aliases": ["date raised"]}}}))
    index = tmp_path / "index"
    build_snapshot([src.parent], index, embedder)
    catalog = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    try:
        info = catalog.tables()["dly_reg"]
        assert (info.description, info.aliases) == ("Delays of the ferries", ("delay register",))
        columns = {c.name: c for c in info.columns}
        assert (columns["amt"].description, columns["amt"].aliases) == ("compensation paid", ("compensation", "refund"))
        assert columns["d1"].aliases == ("date raised",) and columns["ref"].aliases == ()
        assert {"compensation", "refund", "paid"} <= columns["amt"].words
    finally:
        catalog.close()


@pytest.mark.parametrize("notes, message", [
    ({"columns": {"nope": {"aliases": ["x"]}}}, "description of unknown column 'nope'"),
    ({"columns": {"x": {"aliases": "x"}}}, '"aliases" of column'),
    ({"columns": {"x": {"label": "x"}}}, 'holds "description" and "aliases" only'),
    ({"description": "x" * 501}, '"description" of the table'),
    ({"aliases": ["a"] * 17}, '"aliases" of the table'),
    ({"columns": ["x"]}, '"columns" maps column names'),
])
def test_bad_table_notes_stop_the_ingest_naming_the_sidecar_or_file(tmp_path, embedder, notes, message):
    src = write(tmp_path / "src" / "t.csv", "x\n1\n")
    write(src.with_name("t.acl.json"), json.dumps({"acl": ["public"], **notes}))
    with pytest.raises(IngestError, match=re.escape(message)):
        build_snapshot([src.parent], tmp_path / "index", embedder)
