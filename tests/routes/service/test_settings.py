"""The settings object: defaults, then QUARRY_* variables, then flags; every knob named with a
default and a line of help; `quarry settings` prints them with where each value came from."""

from __future__ import annotations

import inspect
import json
import os

import pytest
from pydantic import SecretStr

from retrieval.errors import InvalidRequest
from routes.service.settings import Settings, setting
from tests.system.test_cli import one_line_error, quarry


def test_settings_layer_defaults_then_environment_then_flags():
    s = Settings.load({"QUARRY_MAX_K": "20", "QUARRY_PORT": "9000", "PATH": "/bin"}, {"port": 9001, "host": None})
    assert (s.max_k, s.port, s.host) == (20, 9001, "127.0.0.1")
    assert (s.source("max_k"), s.source("port"), s.source("host")) == ("env QUARRY_MAX_K", "flag", "default")
    assert s.limits.max_k == 20 and s.limits.default_k == 8


def test_settings_read_the_environment_only_when_loaded(monkeypatch):
    monkeypatch.setenv("QUARRY_MAX_K", "20")
    assert Settings().max_k == 50 and Settings(max_k=30).max_k == 30
    assert Settings.load().max_k == 20 and Settings.load().source("max_k") == "env QUARRY_MAX_K"


def test_every_setting_has_a_default_and_a_line_of_help():
    described = Settings().describe()
    assert len(described) == len(Settings.model_fields) >= 50
    for name, item in described.items():
        assert item["help"].endswith(".") and len(item["help"]) > 15, name
        assert item["source"] == "default" and item["env"] == f"QUARRY_{name.upper()}"
    groups = {item["group"] for item in described.values()}
    assert groups >= {"index", "server", "audit", "limits", "sql", "fusion", "build", "caches", "threads", "policies",
                      "judge"}


def test_the_settings_defaults_are_those_of_the_classes_they_configure():
    from indexes.bm25_index import Bm25Params
    from indexes.sql_runner import SqlRunner
    from indexes.chunking import DEFAULT_MAX_CHARS
    from indexes.embedder import Embedder
    from indexes.snapshot_build import BuildOptions
    from retrieval.access import ChunkTable
    from retrieval.calls import CallPool
    from retrieval.limits import Limits
    from retrieval.retrievers.hybrid import FusionParams
    from retrieval.retrievers.sql import SqlLimits, SqlRetriever

    s = Settings()

    def default(fn, name):
        return inspect.signature(fn).parameters[name].default

    assert s.limits == Limits() and s.sql_limits == SqlLimits() and s.fusion == FusionParams()
    assert s.build_options(BuildOptions().default_acl) == BuildOptions()
    assert s.chunk_max_chars == DEFAULT_MAX_CHARS and s.build_options(()).bm25 == Bm25Params()
    assert (s.embed_batch_size, s.query_cache_size) == (default(Embedder, "batch_size"), default(Embedder, "query_cache"))
    assert (s.sql_max_concurrent, s.sql_max_result_bytes, s.sql_memory_mb, s.sql_threads) == (
        default(SqlRunner, "max_concurrent"), default(SqlRunner, "max_bytes"), default(SqlRunner, "memory_mb"),
        default(SqlRunner, "threads"))
    assert s.profile_cache_size == default(SqlRetriever, "profile_cache")
    assert s.profile_cache_mb << 20 == default(SqlRetriever, "profile_cache_bytes")
    assert s.mask_cache_size == ChunkTable.__dataclass_fields__["cache_size"].default
    assert s.spare_workers is None and default(CallPool, "spare") is None  # both: as many as workers


def test_a_bad_value_names_the_setting_and_where_it_came_from():
    with pytest.raises(InvalidRequest, match=r"max_k \(env QUARRY_MAX_K\).*integer"):
        Settings.load({"QUARRY_MAX_K": "twenty"})
    with pytest.raises(InvalidRequest, match=r"max_k \(flag\).*greater than or equal to 1"):
        Settings.load({}, {"max_k": 0})
    with pytest.raises(InvalidRequest, match="unknown setting 'max_kk'"):
        Settings.load({}, {"max_kk": 20})


def test_a_default_above_its_cap_is_refused_naming_both():
    with pytest.raises(InvalidRequest, match=r"default_k \(8\) is above max_k \(5\)"):
        Settings.load({"QUARRY_MAX_K": "5"})
    with pytest.raises(InvalidRequest, match="default_attempts"):
        Settings.load({}, {"default_attempts": 4, "max_attempts": 3})


def test_policy_settings_name_a_factory_by_import_path_and_default_to_the_built_in_one():
    s = Settings.load({"QUARRY_GRADER": "mypkg.judge:make_grader"})
    assert (s.grader, s.router, s.rewriter, s.reranker) == ("mypkg.judge:make_grader", "", "", "")
    assert (s.source("grader"), s.source("router")) == ("env QUARRY_GRADER", "default")
    assert "(settings, engine)" in s.describe()["reranker"]["help"]  # routes/service/plugins.py checks and loads them


def test_comma_lists_and_empty_values_in_the_environment():
    s = Settings.load({"QUARRY_MCP_ALLOWED_ORIGINS": "https://a.example, https://b.example,",
                       "QUARRY_DEFAULT_ACL": "group:sre,alice", "QUARRY_THREADS": "", "QUARRY_TODAY": "2025-11-01"})
    assert s.mcp_allowed_origins == ("https://a.example", "https://b.example")
    assert s.default_acl == ("group:sre", "alice") and s.threads is None and str(s.today) == "2025-11-01"
    assert s.source("threads") == "default"


def test_an_update_is_validated_and_recorded_as_a_flag():
    s = Settings.load({"QUARRY_MAX_K": "20"}).updated(port=9002)
    assert (s.port, s.source("port"), s.source("max_k")) == (9002, "flag", "env QUARRY_MAX_K")
    with pytest.raises(InvalidRequest, match="setting port"):
        s.updated(port=-1)


def test_secrets_are_masked_when_settings_are_described():
    s = Settings.load({"QUARRY_JUDGE_API_KEY": "hunter2", "QUARRY_JUDGE_URL": "http://127.0.0.1:9/v1"})
    assert s.judge_api_key == "hunter2" and s.source("judge_api_key") == "env QUARRY_JUDGE_API_KEY"
    assert s.describe()["judge_api_key"]["value"] == "**********" and Settings().describe()["judge_api_key"]["value"] is None
    assert "hunter2" not in json.dumps(s.describe()) and "hunter2" not in repr(s)

    class WithSecret(Settings):
        token: SecretStr = setting(SecretStr(""), "A secret token for a test.", "server")

    s = WithSecret.load({"QUARRY_TOKEN": "hunter2"})
    assert s.token.get_secret_value() == "hunter2"
    assert s.describe()["token"]["value"] == "**********" and "hunter2" not in json.dumps(s.describe())


def test_quarry_settings_never_prints_a_secret():
    out = quarry("settings", "--json", env=_env(judge_api_key="hunter2"))
    assert out.returncode == 0 and "hunter2" not in out.stdout
    assert json.loads(out.stdout)["judge_api_key"] == {
        "value": "**********", "source": "env QUARRY_JUDGE_API_KEY", "env": "QUARRY_JUDGE_API_KEY",
        "help": "Bearer key sent to the judge's endpoint (never shown).", "group": "judge"}
    assert "hunter2" not in quarry("settings", env=_env(judge_api_key="hunter2")).stdout


def test_open_view_sizes_pools_caches_sql_and_fusion_from_the_settings(mini_index, tables_index, embedder):
    from retrieval.types import Filters, Principal
    from routes.service.view import open_view

    s = Settings(workers=2, spare_workers=3, side_workers=1, mask_cache_size=7, fusion_rrf_k=30, fusion_depth=40,
                 fusion_dense_weight=0.5, fusion_method="zscore", max_k=20)
    engine = open_view(mini_index, embedder, settings=s, warm=False)
    try:
        assert engine.limits.max_k == 20 and engine.snapshot.chunks.cache_size == 7
        assert (engine.calls.workers, engine.calls.spare, engine.side._max_workers) == (2, 3, 1)
        pools = engine.resources
        assert (pools.calls._max_workers, pools.profiles._max_workers, pools.watchdogs._max_workers) == (
            5, s.profile_workers, s.sql_max_concurrent)
        params = engine.retrievers["hybrid"].params
        assert (params.rrf_k, params.depth, params.weights, params.method) == (30, 40, {"bm25": 1.0, "dense": 0.5}, "zscore")
        erin = Principal("erin").access_scope()
        assert {name for h in engine.retrievers["hybrid"].search("carrier webhook", erin, 3, Filters())
                for name, _ in h.signals} >= {"zscore"}
    finally:
        engine.close()
    engine = open_view(tables_index, embedder, settings=Settings(sql_max_rows=2, sql_timeout_s=5.0), warm=False)
    try:
        rows = engine.sql.run_statement("SELECT * FROM incidents", Principal("erin", (), frozenset({"query", "sql"})))
        assert len(rows.rows) == 2 and rows.truncated
    finally:
        engine.close()


# -- `quarry settings` ------------------------------------------------------------------------

def _env(**quarry_vars: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    return env | {f"QUARRY_{k.upper()}": v for k, v in quarry_vars.items()}


def test_quarry_settings_prints_each_value_its_source_and_its_help():
    out = quarry("settings", "--json", "--set", "port=9001", env=_env(max_k="20"))
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert set(listed) == set(Settings.model_fields)
    assert listed["max_k"] == {"value": 20, "source": "env QUARRY_MAX_K", "env": "QUARRY_MAX_K",
                               "help": "Most passages a caller may ask for.", "group": "limits"}
    assert listed["port"]["source"] == "flag" and listed["host"]["source"] == "default"
    table = quarry("settings", env=_env(max_k="20"))
    assert table.returncode == 0 and "[limits]" in table.stdout
    assert "  max_k = 20    (env QUARRY_MAX_K)\n      Most passages a caller may ask for.\n" in table.stdout


def test_quarry_settings_refuses_a_bad_variable_with_a_typed_error():
    out = quarry("settings", env=_env(max_k="twenty"))
    assert out.returncode == 2
    error = one_line_error(out)
    assert error["code"] == "invalid_request" and "QUARRY_MAX_K" in error["message"]
    out = quarry("settings", "--set", "max_kk=1", env=_env())
    assert out.returncode == 2 and "unknown setting 'max_kk'" in one_line_error(out)["message"]


# -- every command builds from the settings ---------------------------------------------------

@pytest.mark.slow
def test_ingest_chunks_and_guards_documents_as_the_build_settings_say(tmp_path):
    import duckdb

    from indexes.snapshot_load import current_snapshot_path
    from tests.conftest import MINI

    default = quarry("ingest", str(MINI), "--index", str(tmp_path / "default"), env=_env())
    small = quarry("ingest", str(MINI), env=_env(index_dir=str(tmp_path / "small"), chunk_max_chars="200",
                                                 default_acl="public", bm25_method="robertson"))
    assert default.returncode == 0 and small.returncode == 0, small.stderr
    assert "default ACL of documents and tables without one: public (everyone)" in small.stderr
    assert json.loads(small.stdout)["counts"]["chunks"] > json.loads(default.stdout)["counts"]["chunks"]
    built = current_snapshot_path(tmp_path / "small")
    assert json.loads((built / "bm25" / "quarry_bm25.json").read_text())["method"] == "robertson"
    with duckdb.connect(str(built / "catalog.duckdb"), read_only=True) as con:
        assert con.execute("SELECT max(end_offset - start_offset) FROM quarry.chunks").fetchall()[0][0] <= 200


@pytest.mark.slow
def test_commands_take_the_index_and_keys_file_from_the_environment_or_ask_for_them(tmp_path):
    keys = tmp_path / "keys.json"
    added = quarry("keys", "add", "--principal", "erin", env=_env(keys_file=str(keys)))
    assert added.returncode == 0, added.stderr
    listed = json.loads(quarry("keys", "list", "--keys", str(keys), env=_env()).stdout)["keys"]
    assert [k["principal"] for k in listed] == ["erin"]
    for command, flag, variable in ((["keys", "list"], "--keys", "QUARRY_KEYS_FILE"),
                                    (["query", "x", "--principal", "erin"], "--index", "QUARRY_INDEX_DIR"),
                                    (["serve"], "--index", "QUARRY_INDEX_DIR")):
        out = quarry(*command, env=_env())
        assert out.returncode == 2
        error = one_line_error(out)
        assert error["code"] == "invalid_request" and flag in error["message"] and variable in error["message"]


def test_the_readme_settings_table_names_every_setting():
    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Settings"):readme.index("### Ingest")]
    assert [name for name in Settings.model_fields if f"`{name}`" not in section] == []


def test_the_judge_grader_takes_its_endpoint_model_and_key_from_quarry_variables(demo_engine):
    from routes.policies.judge import JudgeConfig
    from routes.service.plugins import load_policy

    s = Settings.load({"QUARRY_GRADER": "routes.policies.judge:make_judge", "QUARRY_JUDGE_URL": "http://127.0.0.1:9/v1",
                       "QUARRY_JUDGE_MODEL": "stand-in", "QUARRY_JUDGE_MAX_PASSAGES": "2", "QUARRY_JUDGE_API_KEY": "k"})
    grader = load_policy(s, demo_engine, demo_engine.deps.policy).grader
    assert grader.config == JudgeConfig("http://127.0.0.1:9/v1", "stand-in", 5.0, 2, "k")


def test_the_whole_dense_graph_is_a_build_setting(monkeypatch):
    monkeypatch.setenv("QUARRY_DENSE_WHOLE_GRAPH", "false")
    assert Settings.load().build_options(()).dense_whole_graph is False
    assert Settings().build_options(()).dense_whole_graph is True
