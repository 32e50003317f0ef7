"""Workbooks (.xlsx) become tables: each sheet that holds a value is a typed table of the catalog
with the file's ACL, its rows' ACLs and its provenance, queried through the SQL route like a
CSV table. The workbooks are written here with openpyxl, a bus operator's and a lab's, and the
expected rows computed in Python from the same values."""

from __future__ import annotations

import datetime as dt
import io
import json
import zipfile
from pathlib import Path

import pytest

openpyxl = pytest.importorskip("openpyxl")

from indexes.catalog import Catalog  # noqa: E402
from indexes.snapshot_build import build_snapshot  # noqa: E402
from indexes.snapshot_load import current_snapshot_path  # noqa: E402
from indexes.spreadsheets import read_sheet, sheet_names  # noqa: E402
from indexes.tables import plan_tables  # noqa: E402
from retrieval.errors import IngestError  # noqa: E402
from retrieval.types import Principal  # noqa: E402

DEPOTS = ["Ashcombe", "Dunsley", "Corrow Quay"]
DEFECTS = [(f"D-{n:03d}", dt.datetime(2025, 1 + n % 6, 1 + n % 27), DEPOTS[n % 3], round(40.5 * (n % 7) + 12.25, 2),
            n % 5 * 3, n % 4 == 0, '["group:safety"]' if n % 9 == 0 else "public") for n in range(1, 61)]


def workbook(path: Path) -> Path:
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Defects"
    sheet.append(["defect_id", "logged", "depot", "repair cost", "hours off road", "dangerous", "acl"])
    for i, row in enumerate(DEFECTS):
        sheet.append(list(row))
        if i == 10:
            sheet.append([None] * 7)  # a blank row inside the data
    depots = book.create_sheet("Depot list")
    depots.append(["depot", None, "opened"])
    for n, d in enumerate(DEPOTS):
        depots.append([d, "north" if n else "south", dt.date(1990 + n, 3, 1)])
    book.create_sheet("Notes")  # empty: no table
    path.parent.mkdir(parents=True, exist_ok=True)
    book.save(path)
    return path


@pytest.fixture(scope="module")
def index(tmp_path_factory, embedder):
    src = tmp_path_factory.mktemp("xlsx-src")
    workbook(src / "Fleet.xlsx")
    (src / "Fleet.acl.json").write_text(json.dumps({"acl": ["public"], "sheets": {"Defects": {"key": "defect_id"}}}))
    (src / "note.md").write_text("# Depot note\nThe Dunsley depot opened a second bay.\n")
    out = tmp_path_factory.mktemp("xlsx-index")
    manifest = build_snapshot([src], out, embedder)
    return out, manifest


def test_each_sheet_holding_a_value_is_a_typed_table_with_its_provenance(index):
    out, manifest = index
    catalog = Catalog(current_snapshot_path(out) / "catalog.duckdb")
    try:
        tables = catalog.tables()
    finally:
        catalog.close()
    assert set(tables) == {"fleet_defects", "fleet_depot_list"}
    defects = tables["fleet_defects"]
    types = {c.name: c.type for c in defects.columns}
    assert types == {"defect_id": "VARCHAR", "logged": "DATE", "depot": "VARCHAR", "repair cost": "DOUBLE",
                     "hours off road": "BIGINT", "dangerous": "BOOLEAN", "acl": "VARCHAR[]"}  # row ACLs as lists
    assert defects.row_acl and defects.id_column == "defect_id" and defects.rows == len(DEFECTS)
    assert defects.source.endswith("Fleet.xlsx#Defects") and tables["fleet_depot_list"].source.endswith("#Depot list")
    assert [c.name for c in tables["fleet_depot_list"].columns] == ["depot", "column_2", "opened"]


def test_rows_are_read_by_the_rules_of_every_table_and_asked_in_words(index, embedder):
    from routes.service.view import open_view

    out, _ = index
    view = open_view(out, embedder, today=dt.date(2025, 11, 1))
    try:
        reader, safety = Principal("ann", (), frozenset({"query", "sql"})), Principal("sam", ("safety",), frozenset({"sql"}))
        readable = [d for d in DEFECTS if d[6] == "public"]
        march = sum(1 for d in readable if d[1].month == 3)
        result = view.query("How many defects were logged in March 2025?", reader, deadline_ms=30000, wait_for_tables=True)
        assert result.rows is not None and result.rows.rows == ((march,),), (result.decision, result.declined)
        total = view.sql.run_statement('SELECT count(*), round(sum("repair cost"), 2) FROM fleet_defects', safety).rows
        assert total == ((len(DEFECTS), round(sum(d[3] for d in DEFECTS), 2)),)
        mine = view.sql.run_statement("SELECT count(*) FROM fleet_defects", reader).rows
        assert mine == ((len(readable),),)  # a row only the safety group reads is undetectable
    finally:
        view.close()


def test_a_sidecar_names_only_sheets_the_workbook_has(tmp_path):
    path = workbook(tmp_path / "fleet.xlsx")
    (tmp_path / "fleet.acl.json").write_text(json.dumps({"acl": ["public"], "sheets": {"Defekte": {"key": "x"}}}))
    with pytest.raises(IngestError, match="'Defekte', which is no sheet") as err:
        plan_tables([path], ("group:admin",))
    assert err.value.path.endswith("fleet.acl.json")


def test_a_workbook_of_one_sheet_is_named_after_its_file(tmp_path):
    book = openpyxl.Workbook()
    book.active.append(["a", "b"])
    book.active.append([1, "x"])
    book.save(tmp_path / "Orders 2025.xlsx")
    assert [(t.name, t.sheet) for t in plan_tables([tmp_path / "Orders 2025.xlsx"], ("public",))] == [("orders_2025", "Sheet")]


def test_mixed_cells_are_text_and_numbers_keep_their_written_form(tmp_path):
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["code", "when", "n"])
    sheet.append([12, dt.datetime(2025, 3, 4, 9, 30), 1.5])
    sheet.append(["A7", dt.datetime(2025, 3, 5), 2])
    book.save(tmp_path / "m.xlsx")
    table = read_sheet(tmp_path / "m.xlsx", "Sheet")
    assert table.column("code").to_pylist() == ["12", "A7"]
    assert str(table.schema.field("when").type) == "timestamp[us]" and str(table.schema.field("n").type) == "double"


@pytest.mark.parametrize("make, message", [
    (lambda: b"PK\x03\x04 not really a zip", "not a readable .xlsx workbook"),
    (lambda: b"plain text, no workbook", "not a readable .xlsx workbook"),
    (lambda: _bomb(), "too_large"),
])
def test_a_file_that_is_no_workbook_or_a_zip_bomb_stops_the_ingest_naming_it(tmp_path, make, message):
    path = tmp_path / "bad.xlsx"
    path.write_bytes(make())
    with pytest.raises(IngestError, match=message) as err:
        sheet_names(path)
    assert err.value.path == str(path)


def _bomb() -> bytes:
    """A workbook whose one part declares it inflates past the bound (zeros compress 1000:1)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("xl/worksheets/sheet1.xml", "w", force_zip64=True) as part:
            block = b"\0" * (1 << 20)
            for _ in range(300):
                part.write(block)
    return out.getvalue()
