"""One typed settings object: every knob has a name, a default and a line of help.

Values come from the defaults, then `QUARRY_<NAME>` environment variables, then command-line
flags: `Settings.load(env, flags)` applies them in that order and remembers where each value
came from (`quarry settings` prints it). This module is the only place that reads the
environment, and only in `load`: `Settings(name=value, ...)` takes what it is given over the
defaults and nothing else, so tests and embedding code never pick up a stray variable.

Request limits, SQL limits and fusion are flat settings (`QUARRY_MAX_K=20`) that build the
core's own types (`limits`, `sql_limits`, `fusion`); their defaults are read off those types.
The defaults of the index-side knobs (BM25, chunking, embedder and SQL runner sizes) are
written here, and tests/routes/service/test_settings.py checks that they equal the defaults of the
classes they configure.
"""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import Field, PrivateAttr, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from indexes.extract.sandbox import Budget
from retrieval.errors import InvalidRequest
from retrieval.fusion import FusionMethod
from retrieval.limits import Limits
from retrieval.retrievers.hybrid import FusionParams
from retrieval.retrievers.sql import SqlLimits

ENV_PREFIX = "QUARRY_"
POLICY_HELP = "factory called with (settings, engine) returning the policy"  # loaded by routes/service/plugins.py

_LIMITS, _SQL, _FUSION, _EXTRACT = Limits(), SqlLimits(), FusionParams(), Budget()


def setting(default: Any, help: str, group: str, secret: bool = False, **constraints: Any) -> Any:
    """A field with its default, its line of help and the group `quarry settings` lists it in.
    A `secret` one is never shown: `quarry settings` and the object's repr mask it."""
    return Field(default, description=help, json_schema_extra={"group": group, "secret": secret}, repr=not secret,
                 **constraints)


def _policy(kind: str) -> Any:
    builtin = {"grader": " or `answer` (the answer-level model) or `judge` (an LLM judge)",
               "reranker": " or `answer` (the answer-level model)"}.get(kind, "")
    return setting("", f"{kind.capitalize()}: import path `module:factory`, the {POLICY_HELP}{builtin} "
                       f"(empty: the built-in {kind}).", "policies")


CommaList = Annotated[tuple[str, ...], NoDecode]  # `a,b` in the environment, as before JSON was possible


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid", env_ignore_empty=True,
                                      validate_default=True)

    # -- index and model --------------------------------------------------------------------
    index_dir: Path = setting(Path("var/demo-index"), "Index directory (holds the snapshots, the tuned policies "
                              "and the audit log).", "index")
    model_path: Path | None = setting(None, "Local sentence-transformers folder (default: the bundled "
                                      "all-MiniLM-L6-v2).", "index")
    onnx: bool = setting(True, "Embed queries through onnxruntime (the same weights exported once, checked "
                         "against PyTorch at load).", "index")
    cache_dir: Path | None = setting(None, "Where derived model files, such as the ONNX export, are cached "
                                     "(default: ~/.cache/quarry).", "index")

    # -- HTTP and MCP server ----------------------------------------------------------------
    host: str = setting("127.0.0.1", "Interface to listen on.", "server")
    port: int = setting(8000, "TCP port to listen on (0: any free port).", "server", ge=0, le=65535)
    keys_file: Path | None = setting(None, "API keys file (hashed keys; see `quarry keys`).", "server")
    identity_file: Path | None = setting(None, "Identity file: token issuers, their claim mapping, and apps that may act "
                                         "for their users (README, 'End users and identity providers').", "server")
    max_body_bytes: int = setting(64 * 1024, "Largest accepted request body; larger bodies get 413.", "server", ge=1)
    rate_per_second: float = setting(50.0, "Requests per second one key may make on average (token bucket).",
                                     "server", gt=0)
    burst: int = setting(100, "Requests one key may make at once above its average rate.", "server", ge=1)
    max_concurrent_per_key: int = setting(16, "Requests one key may have in flight; more get 429.", "server", ge=1)
    mcp_allowed_origins: CommaList = setting((), "Origins allowed to call /mcp from a browser (comma-separated; "
                                             "empty: none besides localhost).", "server")
    mcp_stream_idle_seconds: float = setting(30.0, "A GET /mcp event stream that carries no message for this long "
                                             "is closed (it never holds one of the key's request slots).", "server", gt=0)
    reload_interval_s: float = setting(2.0, "How often `serve` reads the index's CURRENT and switches to a new "
                                       "snapshot without a restart (0: never).", "server", ge=0)
    write_max_body_bytes: int = setting(1024 * 1024, "Largest accepted body of a document write (PUT, PATCH, "
                                        "batch); larger ones get 413.", "server", ge=1)
    report_dir: Path | None = setting(None, "The eval report the console shows (a `quarry eval --report` folder; "
                                      "default: <index_dir>/report).", "server")
    compact_after: int = setting(1000, "Changed documents (puts, deletes, ACL changes) since the base snapshot that "
                                 "start a background compaction (0: only `quarry compact`).", "server", ge=0)
    write_max_key_bytes: int = setting(4 * 1024 * 1024, "Bytes of document writes one principal may have queued or "
                                       "running at once (PUT, batch, write tools; its keys share them); past it a "
                                       "retryable 429.", "server", ge=1)
    extract_workers: int = setting(2, "Worker processes that extract PUT file bodies (PDF, DOCX, HTML), each alone; "
                                   "a file that finds none free within its time budget gets a retryable 429.",
                                   "server", ge=1, le=64)
    extract_per_key: int = setting(1, "Files one principal may have being extracted at once (its keys share them); "
                                   "more get a retryable 429 before any work.", "server", ge=1)
    extract_timeout_s: float = setting(_EXTRACT.seconds, "Time one file's extraction may take (PUT and ingest); past "
                                       "it the worker is killed and the file is refused as too_slow.", "server", gt=0)
    extract_memory_mb: int = setting(_EXTRACT.memory_bytes >> 20, "Memory one extraction worker may use; past it the "
                                     "file is refused as too_large and the server's memory is untouched.", "server", ge=64)
    ocr_scans: bool = setting(False, "Read a PDF page without a text layer by OCR (Tesseract, Debian's tesseract-ocr) "
                              "at a PUT, an ingest and a sync; a page costs seconds (BENCHMARKS.md, Scans), so a "
                              "scanned file needs an `extract_timeout_s` to match.", "server")
    write_batch_max: int = setting(100, "Most changes one `POST /v1/documents:batch` may carry.", "server", ge=1, le=10_000)
    sync_sources: CommaList = setting((), "Folders `POST /v1/admin/sync` keeps the index in step with (comma-separated "
                                      "paths; empty: the endpoint syncs none). A request may name some of them, never "
                                      "another path.", "server")
    reload_grace_s: float = setting(30.0, "After its last request, how long a replaced engine waits for retriever "
                                    "calls the loop gave up on before it is closed.", "server", ge=0)

    # -- audit ------------------------------------------------------------------------------
    audit_questions: bool = setting(False, "Store question text and the documents of each answer's context in the audit "
                                    "log, which `quarry tune --feedback` needs (off: only the question's length).", "audit")
    audit_path: Path | None = setting(None, "Audit database (default: <index_dir>/audit.duckdb).", "audit")
    audit_fail_closed: bool = setting(False, "Answer a /v1 or /mcp request only once its audit row is written "
                                      "(else a retryable 503); off: answer anyway and count the dropped row.", "audit")

    # -- request limits (build `Limits`) ----------------------------------------------------
    max_query_chars: int = setting(_LIMITS.max_query_chars, "Longest accepted question or query, in characters.",
                                   "limits", ge=1)
    default_k: int = setting(_LIMITS.default_k, "Passages returned when the caller does not say.", "limits", ge=1)
    max_k: int = setting(_LIMITS.max_k, "Most passages a caller may ask for.", "limits", ge=1)
    default_attempts: int = setting(_LIMITS.default_attempts, "Retrieval attempts the loop may make when the caller "
                                    "does not say.", "limits", ge=1)
    max_attempts: int = setting(_LIMITS.max_attempts, "Server cap on attempts per question.", "limits", ge=1)
    default_deadline_ms: int = setting(_LIMITS.default_deadline_ms, "Time budget of one question when the caller "
                                       "does not say.", "limits", ge=1)
    max_deadline_ms: int = setting(_LIMITS.max_deadline_ms, "Largest deadline a caller may ask for.", "limits", ge=1)
    call_timeout_ms: int = setting(_LIMITS.call_timeout_ms, "Timeout of one retriever call inside the loop.",
                                   "limits", ge=1)
    max_filter_values: int = setting(_LIMITS.max_filter_values, "Most values in one filter list (sources, doc_ids).",
                                     "limits", ge=1)
    list_max_passages: int = setting(_LIMITS.list_max_passages, "Most passages a question that asks for the list of a "
                                     "period's documents gathers; past it the list is marked incomplete.",
                                     "limits", ge=1)

    # -- SQL route (build `SqlLimits` and the statement runner) -----------------------------
    sql_max_rows: int = setting(_SQL.max_rows, "Most rows one SQL statement returns (more are cut, marked truncated).",
                                "sql", ge=1)
    sql_timeout_s: float = setting(_SQL.timeout_s, "Time limit of one SQL statement, waiting for a slot included.",
                                   "sql", gt=0)
    sql_max_concurrent: int = setting(2, "SQL statements running at once across the server; more wait for a slot. "
                                      "One caller runs at most all but one of them, and a freed slot goes to the "
                                      "waiting caller holding the fewest.", "sql", ge=1)
    sql_max_result_bytes: int = setting(4_000_000, "Largest result one SQL statement may return, in bytes.", "sql", ge=1)
    sql_value_bytes: int = setting(_SQL.value_bytes, "Bytes one row of a statement may build through its function calls "
                                   "(concat, ||, regexp_replace, lpad, ...), shared by all its calls; a call past its "
                                   "share is refused before it runs.", "sql", ge=64)
    sql_threads: int = setting(1, "Threads of the SQL route's DuckDB (1: each statement runs on its request thread "
                               "alone, so the SQL slots take at most one core each and the server stays responsive).",
                               "sql", ge=1)
    sql_memory_mb: int = setting(128, "Memory of the SQL route's own database (callers' SQL, table profiles, translated "
                                 "questions, all together), in MB; a statement past it is refused as retryable.",
                                 "sql", ge=16)

    # -- hybrid fusion (build `FusionParams`; a `quarry tune` result in the index wins) -----
    fusion_method: FusionMethod = setting(_FUSION.method, "How hybrid fuses BM25 and dense: rrf "
                                          "(reciprocal ranks) or zscore (standardised scores).", "fusion")
    fusion_rrf_k: int = setting(_FUSION.rrf_k, "Reciprocal-rank fusion constant k (score 1/(k + rank)).",
                                "fusion", ge=1)
    fusion_depth: int = setting(_FUSION.depth, "Candidates taken from BM25 and from dense before fusing.",
                                "fusion", ge=1)
    fusion_bm25_weight: float = setting(_FUSION.weights["bm25"], "Weight of the BM25 ranks in fusion.", "fusion", ge=0)
    fusion_dense_weight: float = setting(_FUSION.weights["dense"], "Weight of the dense ranks in fusion.", "fusion", ge=0)

    # -- building a snapshot (`quarry ingest`) ----------------------------------------------
    default_acl: CommaList = setting((), "ACL of documents and tables without one (comma-separated: 'public', "
                                     "'group:NAME' or principal ids; empty: private to admins).", "build")
    markdown_sections: bool = setting(False, "A Markdown file's headings are its sections: a passage never crosses one "
                                      "and names its heading path (ingest and sync). Off by default: on the labeled "
                                      "domains it costs answers (BENCHMARKS.md, After Markdown headings became "
                                      "sections).", "build")
    chunk_max_chars: int = setting(1500, "Longest passage, in characters, when documents are split into chunks.",
                                   "build", ge=50)
    embed_batch_size: int = setting(64, "Most passages embedded per batch (one token length, at most 4,096 tokens, each).",
                                    "build", ge=1)
    ingest_journal_batch: int = setting(4096, "Passages per journaled ingest batch: a killed ingest resumes after "
                                        "the last finished one.", "build", ge=1)
    reuse_embeddings: bool = setting(True, "Reuse the vectors of unchanged chunk texts from the current snapshot.",
                                     "build")
    dense_graph_from: int = setting(200_000, "Chunks from which the dense index also holds HNSW graphs, one per "
                                    "access class (approximate; a class or scope of at most 10,000 chunks is scanned "
                                    "exactly); 0: never, every query scans (see BENCHMARKS.md, Scale).", "build", ge=0)
    dense_whole_graph: bool = setting(True, "With two or more class graphs, also one graph over all their rows, "
                                      "walked once by a caller who reads every class graph whole (an administrator) "
                                      "instead of once per class; costs as much graph memory again and several "
                                      "times the graphs' build time.",
                                      "build")
    bm25_method: Literal["lucene", "robertson"] = setting("lucene", "BM25 variant (idf): lucene, or robertson as "
                                                          "rank-bm25's BM25Okapi.", "build")
    bm25_k1: float = setting(1.5, "BM25 term-frequency saturation k1.", "build", ge=0)
    bm25_b: float = setting(0.75, "BM25 length normalisation b.", "build", ge=0, le=1)
    bm25_stem: bool = setting(True, "Snowball English stemming of BM25 terms.", "build")
    bm25_stopwords: bool = setting(True, "Drop English stopwords from BM25 terms.", "build")

    # -- caches -----------------------------------------------------------------------------
    query_cache_size: int = setting(2048, "Query embeddings kept (LRU) so repeated queries are not embedded again.",
                                    "caches", ge=0)
    query_cache_mb: int = setting(32, "Memory the kept query embeddings may take.", "caches", ge=1)
    mask_cache_size: int = setting(512, "Access masks kept, one per access scope and filter set.", "caches", ge=1)
    mask_cache_mb: int = setting(256, "Memory the kept access masks may take (a mask is one byte per chunk).",
                                 "caches", ge=1)
    profile_cache_size: int = setting(256, "Table column profiles kept, one per access scope (SQL linking).",
                                      "caches", ge=1)
    profile_cache_mb: int = setting(32, "Memory the kept table column profiles may take.", "caches", ge=1)

    # -- threads ----------------------------------------------------------------------------
    workers: int = setting(4, "Threads that run retriever calls.", "threads", ge=1)
    spare_workers: int | None = setting(None, "Threads that carry retriever calls the loop gave up on until they "
                                        "return; with all busy, new calls get a retryable error (default: workers).",
                                        "threads", ge=0)
    side_workers: int = setting(4, "Threads that run the dense half of hybrid calls beside the BM25 half.",
                                "threads", ge=1)
    profile_workers: int = setting(2, "Threads that build table profiles (apart from the retriever threads).",
                                   "threads", ge=1)
    shard_workers: int = setting(32, "Threads a cluster front calls its shards on: each call in flight to one shard "
                                 "holds one, so this bounds questions in flight x shards.", "threads", ge=1)
    threads: int | None = setting(None, "Torch and OpenMP threads for embedding (default: the libraries' choice).",
                                  "threads", ge=1)
    onnx_threads: int | None = setting(None, "onnxruntime intra-op threads for query embedding (default: the "
                                       "PyTorch thread count).", "threads", ge=1)

    # -- dates and policies -----------------------------------------------------------------
    today: date | None = setting(None, "Date that 'last quarter' and other relative dates refer to (default: the "
                                 "real date).", "query")
    router: str = _policy("router")
    grader: str = _policy("grader")
    rewriter: str = _policy("rewriter")
    reranker: str = _policy("reranker")

    # -- the answer-level model (routes/policies/answer_policy.py; QUARRY_GRADER=answer, QUARRY_RERANKER=answer) --
    answer_model_path: Path | None = setting(None, "Folder of the answer model (default: the one shipped in the package).",
                                             "answer")
    answer_threads: int | None = setting(None, "onnxruntime intra-op threads for the answer model (default: one per core).",
                                         "answer", ge=1)
    answer_cache_size: int = setting(4096, "(question, passage) answer probabilities kept.", "answer", ge=1)
    answer_cache_mb: int = setting(32, "Memory the kept answer probabilities may take (their keys hold the passages).",
                                   "answer", ge=1)
    answer_threshold: float | None = setting(None, "Gap threshold on p_sufficient for the answer grader (default: the "
                                             "tuned one in the index, else the shipped default).", "answer", ge=0, le=1)
    answer_passages: int | None = setting(None, "Top passages of a set the answer grader reads (default: the fitted "
                                          "grader's, 3).", "answer", ge=1, le=20)
    answer_target_false_gap: float = setting(0.05, "Share of sufficient training questions `quarry tune` lets the "
                                             "answer grader's threshold call gaps.", "answer", ge=0, lt=1)
    answer_cascade: bool = setting(True, "Skip the model where the cheap grader is already sure (the tuned band).",
                                   "answer")
    rerank_top_n: int | None = setting(None, "Candidates the answer reranker rescores, each one model pass (default: "
                                       "what `quarry tune` chose, else 20; 0 turns reranking off).", "answer", ge=0, le=50)
    rerank_rank_prior: float | None = setting(None, "Weight of the retriever's rank beside the answer model's logit "
                                              "(default: tuned, else 0: the model's order alone).", "answer", ge=0)

    # -- the external judge grader (routes/policies/judge.py, QUARRY_GRADER=routes.policies.judge:make_judge) --
    judge_url: str = setting("", "Base URL of the judge's OpenAI-compatible API (requests go to <url>/chat/completions).",
                             "judge")
    judge_model: str = setting("", "Model name the judge requests ask for.", "judge")
    judge_timeout_s: float = setting(5.0, "Time limit of one judge request, the whole reply included (and never past the "
                                     "question's deadline); past it the built-in grade stands.",
                                     "judge", gt=0)
    judge_max_passages: int = setting(4, "Top passages of an attempt the judge reads.", "judge", ge=1)
    judge_max_reply_bytes: int = setting(256 * 1024, "Largest judge reply read; a longer one is cut off unread and "
                                         "the built-in grade stands.", "judge", ge=1024)
    judge_api_key: str | None = setting(None, "Bearer key sent to the judge's endpoint (never shown).", "judge",
                                        secret=True)

    _origins: dict[str, str] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # the environment is read by `load` only

    @field_validator("mcp_allowed_origins", "default_acl", "sync_sources", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(x.strip() for x in value.split(",") if x.strip())
        return value

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> Settings:
        for default, cap in (("default_k", "max_k"), ("default_attempts", "max_attempts"),
                             ("default_deadline_ms", "max_deadline_ms")):
            if getattr(self, default) > getattr(self, cap):
                raise ValueError(f"{default} ({getattr(self, default)}) is above {cap} ({getattr(self, cap)})")
        return self

    # -- loading ----------------------------------------------------------------------------

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, flags: Mapping[str, Any] | None = None) -> Settings:
        """Defaults, then `QUARRY_*` variables of `env` (default: the process environment),
        then `flags` (setting name -> value; None means "not given"). A bad value is an
        `invalid_request` naming the setting and where it came from."""
        from_env = _EnvMapping(cls, os.environ if env is None else env)()
        given = {k: v for k, v in (flags or {}).items() if v is not None}
        origins = {name: f"env {cls.env_name(name)}" for name in from_env} | {name: "flag" for name in given}
        try:
            out = cls(**(from_env | given))
        except ValidationError as e:
            raise InvalidRequest(_problems(e, origins)) from None
        out._origins.update(origins)
        return out

    def updated(self, **changes: Any) -> Settings:
        """A copy with `changes` applied as flags (validated like any other value)."""
        values = {name: getattr(self, name) for name in type(self).model_fields} | changes
        try:
            out = type(self)(**values)
        except ValidationError as e:
            raise InvalidRequest(_problems(e, dict.fromkeys(changes, "flag"))) from None
        out._origins.update(self._origins | dict.fromkeys(changes, "flag"))
        return out

    @classmethod
    def env_name(cls, name: str) -> str:
        return f"{ENV_PREFIX}{name.upper()}"

    def source(self, name: str) -> str:
        """Where the value of `name` came from: "default", "env QUARRY_<NAME>" or "flag"."""
        return self._origins.get(name, "default")

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every setting: value (secrets masked), source, environment variable, help, group."""
        out = {}
        for name, info in type(self).model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            value = getattr(self, name)
            shown = _masked(value) if extra.get("secret") else _shown(value)
            out[name] = {"value": shown, "source": self.source(name), "env": self.env_name(name),
                         "help": info.description or "", "group": extra.get("group", "other")}
        return out

    # -- what the settings build ------------------------------------------------------------

    @property
    def limits(self) -> Limits:
        return Limits(max_query_chars=self.max_query_chars, default_k=self.default_k, max_k=self.max_k,
                      default_attempts=self.default_attempts, max_attempts=self.max_attempts,
                      default_deadline_ms=self.default_deadline_ms, max_deadline_ms=self.max_deadline_ms,
                      call_timeout_ms=self.call_timeout_ms, max_filter_values=self.max_filter_values,
                      list_max_passages=self.list_max_passages)

    @property
    def sql_limits(self) -> SqlLimits:
        return SqlLimits(max_rows=self.sql_max_rows, timeout_s=self.sql_timeout_s, value_bytes=self.sql_value_bytes)

    @property
    def fusion(self) -> FusionParams:
        return FusionParams(rrf_k=self.fusion_rrf_k, depth=self.fusion_depth,
                            weights={"bm25": self.fusion_bm25_weight, "dense": self.fusion_dense_weight},
                            method=self.fusion_method)

    def build_options(self, default_acl: tuple[str, ...]) -> Any:
        """`quarry ingest`'s options; `default_acl` is the checked ACL (see routes/cli/main.py)."""
        from indexes.bm25_index import Bm25Params
        from indexes.snapshot_build import BuildOptions

        bm25 = Bm25Params(method=self.bm25_method, k1=self.bm25_k1, b=self.bm25_b, stem=self.bm25_stem,
                          stopwords=self.bm25_stopwords)
        return BuildOptions(default_acl=default_acl, max_chars=self.chunk_max_chars, bm25=bm25,
                            reuse_embeddings=self.reuse_embeddings, answer_model=self.answer_model_path,
                            dense_graph_from=self.dense_graph_from or None, dense_whole_graph=self.dense_whole_graph,
                            embed_batch=self.ingest_journal_batch, ocr=self.ocr_scans, markdown_sections=self.markdown_sections,
                            extract_timeout_s=self.extract_timeout_s)

    def embedder(self) -> Any:
        """The embedder these settings describe (model folder, query runtime, batch, cache)."""
        from indexes.embedder import Embedder

        return Embedder(self.model_path, batch_size=self.embed_batch_size, query_cache=self.query_cache_size,
                        query_cache_bytes=self.query_cache_mb << 20,
                        query_runtime="onnx" if self.onnx else "torch", onnx_threads=self.onnx_threads,
                        cache_dir=self.cache_dir)


class _EnvMapping(EnvSettingsSource):
    """The `QUARRY_*` variables of a given mapping (the process environment, or a test's)."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._mapping = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._mapping, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


def _problems(error: ValidationError, origins: Mapping[str, str]) -> str:
    parts = []
    for e in error.errors()[:5]:
        name = str(e["loc"][0]) if e.get("loc") else ""
        if e.get("type") == "extra_forbidden":
            parts.append(f"unknown setting {name!r} (see `quarry settings`)")
        elif name:
            parts.append(f"setting {name} ({origins.get(name, 'default')}): {e.get('msg', 'invalid')}")
        else:
            parts.append(f"settings: {e.get('msg', 'invalid').removeprefix('Value error, ')}")
    return "; ".join(parts)


def _masked(value: Any) -> str | None:
    """A secret as shown: whether it is set, never what it is."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    return None if value is None else "**********" if value else ""


def _shown(value: Any) -> Any:
    """A value as JSON: paths and dates as text, tuples as lists, secrets masked."""
    if isinstance(value, SecretStr):
        return _masked(value)
    if isinstance(value, (Path, date)):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value
