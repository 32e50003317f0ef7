"""Tables inside PDF (ruled and unruled), Word and HTML files become tables of the catalog, as a
workbook's sheets do: typed, with the file's ACL,
its provenance (file, table number, section) and rows that cite the file's document; their
text keeps one line per row with its headers. A forbidden file's tables are undetectable, and a
live write that deletes or re-permissions the file hides them, through compaction too.

The files are written here (a ferry operator's timetable and fares, a lab's reagent stock, and
a restricted payroll page), a domain the table rules were not written for; every cell fact is
asked of the rows, in SQL and as a question."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import docx
import openpyxl
import pytest
from fpdf import FPDF

from indexes.catalog import Catalog
from indexes.extract.docx_text import extract_docx
from indexes.extract.grids import Grid, grid_of, render
from indexes.extract.html_text import extract_html
from indexes.extract.pdf_text import extract_pdf
from indexes.live import Delete, SetAcl
from indexes.snapshot_build import build_snapshot
from indexes.snapshot_load import current_snapshot_path
from indexes.tables import typed_table
from retrieval.answer import result_json
from retrieval.errors import SqlRejected
from retrieval.types import Principal
from routes.service.generations import Generations
from routes.service.view import open_view
from routes.service.writes import Writer

CROSSINGS = [("Harwick", "Lundy Sound", 45, "14.50"), ("Pellmouth", "Carrow Isle", 70, "21.00"),
             ("Tresco Quay", "Bryher", 25, "9.75")]
REAGENTS = [("Tris buffer", "500 mL", 12, "2025-03-14"), ("Agarose", "100 g", 4, "2025-05-02"),
            ("Ethidium bromide", "10 mL", 2, "2025-01-20")]
GRADES = [("Deckhand", "27,400"), ("Mate", "36,900"), ("Master", "52,300")]
VESSELS = [("Morwenna", "1998", "312", "Scillonian class"), ("Gannet Star", "2011", "148", "Fast cat"),
           ("Kittiwake", "2004", "96", "Launch")]
BERTHS = [("North quay", "9", "140", "Ro-ro"), ("Fish dock", "4", "60", "Trawlers"), ("Lifeboat slip", "3", "35", "Rescue")]
CHANDLERY = [("Mooring rope", 18, 42.5), ("Fender", 7, 19.0), ("Shackle", 55, 3.2)]


def _pdf(rows: list[tuple], ruled: bool, before: str = "Vessels in service this season, by hull.",
         after: str = "Each vessel is surveyed every spring.") -> bytes:
    """A page with a paragraph, a table of `rows` (the first its header), ruled as drawn cell
    boxes sized to their text or set in unruled aligned columns, and a paragraph after it."""
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    pdf.multi_cell(0, 5, before)
    pdf.ln(3)
    widths = [max(pdf.get_string_width(r[i]) for r in rows) + (3 if ruled else 14) for i in range(len(rows[0]))]
    for row in rows:
        for width, cell in zip(widths, row, strict=True):
            pdf.cell(width, 6, cell, border=1 if ruled else 0, align="R" if cell[:1].isdigit() or cell[:1] == "(" else "L")
        pdf.ln(6)
    pdf.ln(3)
    pdf.multi_cell(0, 5, after)
    return bytes(pdf.output())


def _docx(path: Path, heading: str, header: list[str], rows: list[tuple], mark_header: bool) -> None:
    document = docx.Document()
    document.add_heading("Operations handbook", 1)
    document.add_paragraph("Read this before each sailing season.")
    document.add_heading(heading, 2)
    table = document.add_table(rows=1, cols=len(header))
    for cell, text in zip(table.rows[0].cells, header, strict=True):
        cell.text = text
    if mark_header:  # Word's "repeat as header row"
        tr_pr = table.rows[0]._tr.get_or_add_trPr()
        tr_pr.append(tr_pr.makeelement(docx.oxml.ns.qn("w:tblHeader"), {}))
    for row in rows:
        for cell, value in zip(table.add_row().cells, row, strict=True):
            cell.text = str(value)
    document.add_paragraph("Fares change on 1 April.")
    document.save(str(path))


def _html(title: str, header: list[str], rows: list[tuple]) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return (f"<html><head><title>{title}</title></head><body><nav><a href='/'>Home</a></nav><main><h1>{title}</h1>"
            f"<h2>Stock held</h2><p>Counted at the end of each month.</p><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></main></body></html>")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("file-tables")
    _docx(src / "ferry_handbook.docx", "Crossings and fares", ["Route from", "Destination", "Minutes", "Fare (GBP)"],
          CROSSINGS, mark_header=True)
    (src / "reagents.html").write_text(_html("Reagent stock", ["Reagent", "Pack size", "Packs", "Expires"], REAGENTS))
    _docx(src / "pay_scales.docx", "Pay scales", ["Grade", "Salary (GBP)"], GRADES, mark_header=False)
    (src / "pay_scales.docx.meta.json").write_text(json.dumps({"acl": ["group:payroll"]}))
    (src / "fleet_list.pdf").write_bytes(_pdf([("Vessel", "Built", "Passengers", "Type"), *VESSELS], ruled=True))
    (src / "berths.pdf").write_bytes(_pdf([("Berth", "Depth (m)", "Length (m)", "Use"), *BERTHS], ruled=False,
                                          before="Harbour berths and what they take.", after="Depths at lowest tide."))
    book = openpyxl.Workbook()
    book.active.title = "Stock"
    book.active.append(["Item", "Quantity", "Price (GBP)"])
    for row in CHANDLERY:
        book.active.append(list(row))
    book.save(src / "chandlery.xlsx")
    (src / "chandlery.acl.json").write_text(json.dumps({"acl": ["public"]}))
    (src / "quarry.manifest.json").write_text(json.dumps({"files": [{"match": "*", "acl": ["public"]}]}))
    return src


@pytest.fixture(scope="module")
def index(folder, tmp_path_factory, embedder) -> Path:
    out = tmp_path_factory.mktemp("file-tables-index")
    build_snapshot([folder], out, embedder)
    return out


def _tables(index: Path) -> dict:
    catalog = Catalog(current_snapshot_path(index) / "catalog.duckdb")
    try:
        return catalog.tables()
    finally:
        catalog.close()


def test_a_grid_reads_its_header_types_and_rendering():
    marked = grid_of([["Part", "Note"], ["Bolt", "zinc"], ["Nut", "steel"]], header_marked=True)
    assert marked is not None and marked.header == ("Part", "Note") and len(marked.rows) == 2
    # Unmarked: the first row is a header when a column below it holds numbers or dates.
    typed = grid_of([["Site", "Cost", "On"], ["A", "€ 1,200.50", "3 March 2025"], ["B", "800", "2025-04-01"]])
    assert typed is not None and typed.header == ("Site", "Cost", "On")
    table = typed_table(typed)
    assert table.column("Cost").to_pylist() == [1200.5, 800.0]
    assert table.column("On").to_pylist() == [dt.date(2025, 3, 3), dt.date(2025, 4, 1)]
    assert render(typed) == ["Site: A | Cost: € 1,200.50 | On: 3 March 2025", "Site: B | Cost: 800 | On: 2025-04-01"]
    # A key-value table has no header; one column or one row is no table.
    pairs = grid_of([["Voltage:", "230 V"], ["Frequency:", "50 Hz"], ["Phase:", "single"]])
    assert pairs is not None and pairs.header == () and render(pairs)[0] == "Voltage: | 230 V"
    assert grid_of([["only"], ["one column"]]) is None and grid_of([["a", "b"]]) is None
    assert Grid.from_json(typed.to_json()) == typed


def test_word_and_html_tables_are_grids_under_their_headings(folder):
    got = extract_docx((folder / "ferry_handbook.docx").read_bytes())
    assert [g.section for g in got.tables] == [("Operations handbook", "Crossings and fares")]
    assert got.tables[0].header == ("Route from", "Destination", "Minutes", "Fare (GBP)")
    assert "Route from: Pellmouth | Destination: Carrow Isle | Minutes: 70 | Fare (GBP): 21.00" in got.text
    page = extract_html((folder / "reagents.html").read_bytes())
    assert page.tables[0].section == ("Reagent stock", "Stock held") and len(page.tables[0].rows) == len(REAGENTS)
    spans = extract_html(b"<main><table><tr><th>Item</th><th colspan='2'>Sizes</th></tr>"
                         b"<tr><td>Glove</td><td>S</td><td>M</td></tr><tr><td>Mask</td><td>one</td><td>two</td></tr></table></main>")
    assert spans.tables[0].header == ("Item", "Sizes", "Sizes") and spans.tables[0].rows[0] == ("Glove", "S", "M")


@pytest.mark.parametrize("ruled", [True, False], ids=["ruled", "unruled"])
def test_a_pdf_table_ruled_or_set_in_columns_is_a_grid_and_prose_or_a_list_is_not(ruled):
    statement = [("Line item", "H1 2025", "H2 2025"), ("Revenue", "1,204,500", "1,310,250"),
                 ("Cost of sales", "(640,200)", "(702,900)"), ("Gross profit", "564,300", "607,350")]
    got = extract_pdf(_pdf(statement, ruled))
    assert [(g.header, g.rows, g.page) for g in got.tables] == [(statement[0], tuple(statement[1:]), 1)]
    assert typed_table(got.tables[0]).column("H1 2025").to_pylist() == [1204500, -640200, 564300]
    assert "Line item: Cost of sales | H1 2025: (640,200) | H2 2025: (702,900)" in got.text
    assert got.text.startswith("Vessels in service") and got.text.endswith("surveyed every spring.")
    steps = extract_pdf(_pdf([("1.", "Remove the wheel trim"), ("2.", "Loosen the wheel nuts"), ("3.", "Raise the axle")],
                             ruled=False))
    assert steps.tables == () and "Loosen the wheel nuts" in steps.text
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    left = "The left column holds a paragraph about depot operations that runs for several lines in a narrow measure."
    right = "The right column holds another paragraph about fleet maintenance and the weekly checks of each bus."
    pdf.set_xy(10, 20)
    pdf.multi_cell(85, 5, left)
    pdf.set_xy(110, 20)
    pdf.multi_cell(85, 5, right)
    prose = extract_pdf(bytes(pdf.output()))
    assert prose.tables == () and " ".join(prose.text.split()) == f"{left} {right}"


def test_each_table_is_typed_with_the_files_acl_and_provenance(index):
    tables = _tables(index)
    assert set(tables) == {"ferry_handbook_table_1", "reagents_table_1", "pay_scales_table_1", "fleet_list_table_1",
                           "berths_table_1", "chandlery"}
    ferry = tables["ferry_handbook_table_1"]
    assert {c.name: c.type for c in ferry.columns} == {"Route from": "VARCHAR", "Destination": "VARCHAR", "Minutes": "BIGINT",
                                                       "Fare (GBP)": "DOUBLE", "doc_id": "VARCHAR"}
    assert ferry.acl == ("public",) and ferry.owner == "ferry_handbook.docx" and ferry.doc_column == "doc_id"
    assert ferry.source.endswith("ferry_handbook.docx#table-1") and "Crossings and fares" in ferry.description
    assert ferry.id_column == "Route from" and ferry.rows == len(CROSSINGS)
    assert dict((c.name, c.type) for c in tables["reagents_table_1"].columns)["Expires"] == "DATE"
    assert tables["pay_scales_table_1"].acl == ("group:payroll",)
    fleet = tables["fleet_list_table_1"]
    assert fleet.source.endswith("fleet_list.pdf#table-1") and "page 1" in fleet.description
    berths = tables["berths_table_1"]  # unruled: set in aligned columns
    assert berths.source.endswith("berths.pdf#table-1") and berths.rows == len(BERTHS) and berths.acl == ("public",)
    assert {c.name: c.type for c in berths.columns}["Depth (m)"] == "BIGINT"
    stock = tables["chandlery"]
    assert stock.source.endswith("chandlery.xlsx#Stock") and stock.acl == ("public",) and stock.rows == len(CHANDLERY)


def test_every_cell_fact_is_answered_from_rows(index, embedder):
    """Every cell of the public tables (a Word, an HTML, a ruled and an unruled PDF table, and a
    workbook's sheet), read by SQL and asked as a question ("What is the fare for Harwick?"),
    and four questions in other words."""
    view = open_view(index, embedder, today=dt.date(2025, 11, 1))
    reader = Principal("ann", (), frozenset({"query", "sql"}))
    try:
        for name, key, header, rows in (("ferry_handbook_table_1", "Route from", ["Destination", "Minutes", "Fare (GBP)"],
                                         CROSSINGS),
                                        ("reagents_table_1", "Reagent", ["Pack size", "Packs", "Expires"], REAGENTS),
                                        ("fleet_list_table_1", "Vessel", ["Built", "Passengers", "Type"], VESSELS),
                                        ("berths_table_1", "Berth", ["Depth (m)", "Length (m)", "Use"], BERTHS),
                                        ("chandlery", "Item", ["Quantity", "Price (GBP)"], CHANDLERY)):
            for row in rows:
                for column, value in zip(header, row[1:], strict=True):
                    sql = f'SELECT "{column}" FROM {name} WHERE "{key}" = \'{row[0]}\''
                    got = view.sql.run_statement(sql, reader).rows[0][0]
                    assert _same(got, str(value)), (sql, got)
                    question = f"What is the {column.split(' (')[0].lower()} for {row[0]}?"  # every cell, asked
                    result = view.query(question, reader, deadline_ms=30_000, wait_for_tables=True)
                    assert result.rows is not None and any(_same(v, str(value)) for v in result.rows.rows[0]), (
                        question, result.declined)
        for question, expected in (("What is the fare from Pellmouth?", 21.0), ("How many minutes does the crossing from "
                                   "Tresco Quay take?", 25), ("How many packs of agarose are there?", 4),
                                  ("How many passengers does the Gannet Star have?", 148)):
            result = view.query(question, reader, deadline_ms=30_000, wait_for_tables=True)
            assert result.rows is not None and expected in result.rows.rows[0], (question, result.declined)
            assert result.status == "answer_context"
            assert result.context[0].doc_id in ("ferry_handbook.docx", "reagents.html", "fleet_list.pdf")
    finally:
        view.close()


def _same(got: object, written: str) -> bool:
    """A typed cell equals the text the file wrote ("14.50" and 14.5, "2025-03-14" and a date)."""
    if isinstance(got, (int, float)) and not isinstance(got, bool):
        try:
            return float(got) == float(written.replace(",", ""))
        except ValueError:
            return False
    return str(got) == written


def test_a_forbidden_files_tables_are_undetectable(index, embedder):
    view = open_view(index, embedder, today=dt.date(2025, 11, 1))
    public, payroll = Principal("ann", (), frozenset({"query", "sql"})), Principal("pat", ("payroll",), frozenset({"sql"}))
    try:
        assert view.sql.run_statement("SELECT \"Salary (GBP)\" FROM pay_scales_table_1 WHERE \"Grade\" = 'Mate'",
                                      payroll).rows == ((36900,),)
        errors = []
        for table in ("pay_scales_table_1", "pay_scales_table_9"):  # forbidden, and no such table
            with pytest.raises(SqlRejected) as caught:
                view.sql.run_statement(f"SELECT * FROM {table}", public)
            errors.append(str(caught.value).replace(table, "T"))
        assert errors[0] == errors[1]
        assert "pay_scales_table_1" not in {t.name for t in view.sql.readable_tables(public.access_scope())}
        answer = view.query("What is the salary of a Mate?", public, deadline_ms=30_000, wait_for_tables=True)
        assert answer.rows is None and "pay_scales" not in json.dumps(result_json(answer))
    finally:
        view.close()


def test_a_live_delete_or_new_acl_hides_the_files_tables_through_compaction(folder, tmp_path, embedder):
    index = tmp_path / "ix"
    build_snapshot([folder], index, embedder)
    generations = Generations(open_view(index, embedder, plugins=False), owned=True)
    writer = Writer(index, generations)
    admin = Principal("root", ("payroll",), frozenset({"sql"}))
    try:
        with generations.lease() as served:
            assert {"ferry_handbook_table_1", "pay_scales_table_1"} <= set(served.engine.sql.tables())
        writer.write([Delete("ferry_handbook.docx"), SetAcl("pay_scales.docx", ("group:payroll", "group:hr"))], None)
        with generations.lease() as served:
            assert set(served.engine.sql.tables()) == {"reagents_table_1", "fleet_list_table_1", "berths_table_1", "chandlery"}
            with pytest.raises(SqlRejected):
                served.engine.sql.run_statement("SELECT * FROM pay_scales_table_1", admin)
        assert writer.compact(embedder)["status"] == "compacted"
    finally:
        writer.close()
        generations.close()
    kept = {"reagents_table_1", "fleet_list_table_1", "berths_table_1", "chandlery"}
    assert set(_tables(index)) == kept  # the new base holds no table of a changed file


def test_on_a_sharded_index_a_document_holding_tables_changes_only_with_an_ingest(folder, tmp_path, embedder):
    from indexes.shards import build_shards, read_cluster
    from retrieval.errors import Conflict, NotFound
    from retrieval.limits import Limits
    from routes.cluster.replica import ShardReplica
    from routes.service.resources import Resources
    from routes.service.settings import Settings
    from routes.service.sharded import open_sharded
    from routes.service.sharded_writes import ShardedWriter

    index = tmp_path / "sharded"
    build_shards([folder], index, embedder, 2)
    manifest = read_cluster(index)
    replicas = [ShardReplica(str(index), manifest, i) for i in range(manifest["shards"])]
    resources = Resources.open(Settings())
    view = open_sharded(index, replicas, embedder, resources, Settings(), None, Limits(), dt.date(2025, 11, 1))
    generations = Generations(view)
    writer = ShardedWriter(generations)
    public, payroll = Principal("ann"), Principal("pat", ("payroll",))
    try:
        assert "fleet_list_table_1" in view.tables.tables()
        with pytest.raises(Conflict, match="holds tables read from its file"):
            writer.write([Delete("fleet_list.pdf")], None)
        with pytest.raises(Conflict, match="holds tables"):
            writer.write([SetAcl("pay_scales.docx", ("public",))], payroll)
        with pytest.raises(NotFound):  # one who cannot read it learns nothing more than of a missing id
            writer.write([SetAcl("pay_scales.docx", ("public",))], public)
        answer = view.sql.run_statement('SELECT "Passengers" FROM fleet_list_table_1 WHERE "Vessel" = \'Kittiwake\'',
                                        Principal("ann", (), frozenset({"sql"})))
        assert answer.rows == ((96,),)
    finally:
        view.close()
        for r in replicas:
            r._snapshot.close()
        resources.shutdown()


def test_over_http_a_cell_fact_is_answered_from_rows_and_a_forbidden_files_table_is_unknown(index, embedder, tmp_path):
    """The same through a real server: `/v1/query` answers from the rows of a file's table with
    the document as provenance, `/v1/sql` reads them, and for a key outside the file's ACL the
    table answers exactly as one that does not exist."""
    import httpx

    from auth.keys import KeyStore
    from routes.server.app import create_app
    from routes.service.settings import Settings
    from tests.conftest import LiveServer

    store = KeyStore(tmp_path / "keys.json")
    keys = {"ann": store.add("ann", [], ["query", "sql"])[0], "pat": store.add("pat", ["payroll"], ["query", "sql"])[0]}
    view = open_view(index, embedder, today=dt.date(2025, 11, 1))
    app = create_app(Settings(index_dir=index, rate_per_second=1000.0, burst=1000), engine=view, keys=store)
    try:
        with LiveServer(app) as server:
            def post(path: str, body: dict, who: str) -> httpx.Response:
                return httpx.post(server.url + path, json=body, headers={"Authorization": f"Bearer {keys[who]}"}, timeout=60)

            assert view.tables_ready(Principal("ann"))  # the table profiles a question's translation reads
            answer = post("/v1/query", {"question": "How many packs of agarose are there?"}, "ann").json()
            assert answer["status"] == "answer_context" and answer["rows"]["tables"] == ["reagents_table_1"]
            assert answer["rows"]["data"][0][0] == 4 and answer["rows"]["doc_ids"] == ["reagents.html"]
            sql = 'SELECT "Salary (GBP)" FROM pay_scales_table_1 WHERE "Grade" = \'Master\''
            assert post("/v1/sql", {"sql": sql}, "pat").json()["rows"]["data"] == [[52300]]
            hidden, missing = post("/v1/sql", {"sql": sql}, "ann"), post("/v1/sql", {"sql": sql.replace("_1", "_7")}, "ann")
            assert hidden.status_code == missing.status_code == 400
            assert hidden.json()["error"]["message"].replace("_1", "_7") == missing.json()["error"]["message"]
    finally:
        view.close()
