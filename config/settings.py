"""The configuration: one pydantic settings object from env vars and ``conf.yaml``.

Each process's entry point (worker, CLI, bench, tests) calls :func:`load_settings` once and hands
the result to what needs it: activity objects, the payload store, the CLI. Nothing reads the
environment later, so a value is never passed along by rewriting it, and a test builds the
``Settings`` it wants instead of patching variables. Secrets live here and only here; they never
enter workflow inputs or history.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from config.deerflow import SEARCH_API_NAMES, TRUE_WORDS, ConfigError, conf_values, env_problems, read_env_file
from config.mcp_servers import MCPServerConfig, ServerName
from config.model_prices import ModelPrice, default_price

DEFAULT_RECURSION_LIMIT = 25
# The providers activities/search_providers registers (SEARCH_API), checked at start, not per search.
SEARCH_APIS = ("tavily", "brave", "duckduckgo", "serper", "searx", "arxiv", "wikipedia")


# OpenAI's own endpoint: the default of openai-python and of docker-compose.yml (model_configured).
OPENAI_PUBLIC_BASE_URL = "https://api.openai.com/v1"


class Settings(BaseModel):
    """Built by ``load_settings`` from env and conf.yaml; fields are named by their env vars."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    # Model provider (any OpenAI-compatible endpoint).
    openai_base_url: str | None = Field(default=None, alias="OPENAI_BASE_URL")
    openai_api_key: str | None = Field(default=None, alias="OPENAI_API_KEY")
    basic_model: str = Field(default="gpt-4o-mini", alias="BASIC_MODEL")
    reasoning_model: str | None = Field(default=None, alias="REASONING_MODEL")
    llm_request_timeout: float = Field(default=120.0, alias="LLM_REQUEST_TIMEOUT")
    # The model's context window in tokens; None: inferred from the model name
    # (activities.model.context_budget.token_limit_for). conf.yaml: BASIC_MODEL.token_limit.
    token_limit: int | None = Field(default=None, alias="TOKEN_LIMIT")
    # DeerFlow's model blocks (config/deerflow.py): TLS verification (false: a self-signed
    # endpoint) and the client's own retries of one call, before Temporal retries the activity.
    # The reasoning model has its own endpoint and key; unset, the basic model's.
    llm_verify_ssl: bool = Field(default=True, alias="LLM_VERIFY_SSL")
    llm_max_retries: int = Field(default=0, ge=0, le=10, alias="LLM_MAX_RETRIES")
    reasoning_base_url: str | None = Field(default=None, alias="REASONING_BASE_URL")
    reasoning_api_key: str | None = Field(default=None, alias="REASONING_API_KEY")
    reasoning_verify_ssl: bool | None = Field(default=None, alias="REASONING_VERIFY_SSL")
    reasoning_max_retries: int | None = Field(default=None, ge=0, le=10, alias="REASONING_MAX_RETRIES")

    # Search.
    search_api: str = Field(default="tavily", alias="SEARCH_API")
    tavily_api_key: str | None = Field(default=None, alias="TAVILY_API_KEY")
    tavily_base_url: str | None = Field(default=None, alias="TAVILY_BASE_URL")
    search_content_chars: int = Field(default=2000, alias="SEARCH_CONTENT_CHARS")
    # DeerFlow's SEARCH_ENGINE.include_domains / exclude_domains (Tavily only; comma-separated in env).
    search_include_domains: list[str] = Field(default_factory=list, alias="SEARCH_INCLUDE_DOMAINS")
    search_exclude_domains: list[str] = Field(default_factory=list, alias="SEARCH_EXCLUDE_DOMAINS")
    # Per-request timeout of the search provider's HTTP call (tavily-python caps it at 120 s).
    search_timeout_seconds: float = Field(default=20.0, gt=0, alias="SEARCH_TIMEOUT_SECONDS")
    # The other SEARCH_API providers. An unset base URL means the provider's public endpoint.
    brave_search_api_key: str | None = Field(default=None, alias="BRAVE_SEARCH_API_KEY")
    brave_base_url: str | None = Field(default=None, alias="BRAVE_BASE_URL")  # .../res/v1
    serper_api_key: str | None = Field(default=None, alias="SERPER_API_KEY")
    serper_base_url: str | None = Field(default=None, alias="SERPER_BASE_URL")
    searx_host: str | None = Field(default=None, alias="SEARX_HOST")  # a SearXNG instance, json format enabled
    arxiv_base_url: str | None = Field(default=None, alias="ARXIV_BASE_URL")  # the .../api/query endpoint
    wikipedia_base_url: str | None = Field(default=None, alias="WIKIPEDIA_BASE_URL")  # .../w/api.php
    wikipedia_lang: str = Field(default="en", alias="WIKIPEDIA_LANG")  # used when WIKIPEDIA_BASE_URL is unset
    duckduckgo_base_url: str | None = Field(default=None, alias="DUCKDUCKGO_BASE_URL")  # the .../html/ page

    # Local documents / RAG: "local" (files indexed on the worker) or "ragflow".
    rag_provider: str = Field(default="local", alias="RAG_PROVIDER")
    ragflow_api_url: str | None = Field(default=None, alias="RAGFLOW_API_URL")
    ragflow_api_key: str | None = Field(default=None, alias="RAGFLOW_API_KEY")

    # Resource roots: the only folders whose files a run's ``resources`` may name
    # (activities/documents/resource_roots.py). Unset: ``<home>/resources``, a folder that holds nothing but
    # what someone put there to be searched. Env: paths separated by os.pathsep (":" on Linux, like
    # PATH); conf.yaml: ``RESOURCE_ROOTS`` as a list. ``conf_path`` is protected like the home.
    resource_roots: list[Path] | None = Field(default=None, alias="DEERFLOW_RESOURCE_ROOTS")
    conf_path: Path = Field(default=Path("conf.yaml"), alias="DEERFLOW_CONF")

    @field_validator("resource_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [root.strip() for root in value.split(os.pathsep) if root.strip()]
        return value

    def allowed_resource_roots(self) -> list[Path]:
        """The roots, absolute and symlink-free, so containment is checked on real paths."""
        roots = self.resource_roots if self.resource_roots is not None else [self.home / "resources"]
        return [root.expanduser().resolve() for root in roots]

    # Crawl guard: hosts (or IPs) that may be fetched even though they are not public.
    crawl_allow_hosts: list[str] = Field(default_factory=list, alias="DEERFLOW_CRAWL_ALLOW_HOSTS")
    crawl_max_chars: int = Field(default=20_000, alias="DEERFLOW_CRAWL_MAX_CHARS")
    # Page and PDF extraction runs in child processes (activities/support/isolated.py): how many at once
    # per worker, and each one's address-space limit. Each is also killed at its time budget.
    extract_max_concurrency: int = Field(default=8, ge=1, alias="DEERFLOW_EXTRACT_MAX_CONCURRENCY")
    extract_max_memory_mb: int = Field(default=1024, ge=256, alias="DEERFLOW_EXTRACT_MAX_MEMORY_MB")

    # MCP (config/mcp_servers.py). The servers are the operator's alone: conf.yaml's MCP_SERVERS
    # table, or the same table as JSON in MCP_SERVERS; requests pick them by name.
    mcp_servers: dict[ServerName, MCPServerConfig] = Field(default_factory=dict, alias="MCP_SERVERS")
    # Executables a stdio MCP server may be started with (names, or absolute paths by basename).
    mcp_allowed_commands: list[str] = Field(
        default_factory=lambda: ["npx", "uvx", "python", "python3", "node", "docker"],
        alias="DEERFLOW_MCP_ALLOWED_COMMANDS",
    )
    # Hosts, IPs or CIDR networks MCP URLs may reach although they are not public (as the crawler's).
    mcp_allow_hosts: list[str] = Field(default_factory=list, alias="DEERFLOW_MCP_ALLOW_HOSTS")
    # Extra worker variables whose values the secret scrubber (activities/guards/secret_scrubber.py) removes
    # from activity output, beyond the key/token/secret/password settings it finds by itself.
    secret_env_names: list[str] = Field(default_factory=list, alias="DEERFLOW_SECRET_ENV_NAMES")

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _parse_mcp_servers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value)
        return value

    @field_validator("search_api", mode="before")
    @classmethod
    def _search_api_name(cls, value: Any) -> Any:
        """DeerFlow's names for the same providers (``brave_search``) mean ours."""
        return SEARCH_API_NAMES.get(value, value) if isinstance(value, str) else value

    @field_validator("search_api")
    @classmethod
    def _known_search_api(cls, value: str) -> str:
        if value not in SEARCH_APIS:
            raise ValueError(f"{value!r} is not a search provider; use one of {', '.join(SEARCH_APIS)}")
        return value

    @field_validator("mcp_allow_hosts", "crawl_allow_hosts", "search_include_domains", "search_exclude_domains",
                     mode="before")
    @classmethod
    def _split_hosts(cls, value: Any) -> Any:
        return _comma_separated(value, lambda host: host.lower())

    # Not lower-cased, unlike hosts: variable and executable names are case-sensitive.
    @field_validator("secret_env_names", "mcp_allowed_commands", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        return _comma_separated(value)

    # Per-provider concurrency inside one worker process (see activities/support/limits.py).
    llm_max_concurrency: int = Field(default=8, ge=1, alias="LLM_MAX_CONCURRENCY")
    search_max_concurrency: int = Field(default=4, ge=1, alias="SEARCH_MAX_CONCURRENCY")
    crawl_max_concurrency: int = Field(default=4, ge=1, alias="CRAWL_MAX_CONCURRENCY")
    # Activities one worker runs at once per task queue (workflows/queues.py). A worker takes no
    # more tasks than it can run, so the rest wait on the server for another worker. The model
    # queue defaults to LLM_MAX_CONCURRENCY: a slot held while waiting on the provider semaphore
    # would be a task another worker could have run.
    main_queue_concurrency: int = Field(default=32, ge=1, le=10_000, alias="DEERFLOW_MAIN_QUEUE_CONCURRENCY")
    model_queue_concurrency: int | None = Field(default=None, ge=1, le=10_000, alias="DEERFLOW_MODEL_QUEUE_CONCURRENCY")
    tools_queue_concurrency: int = Field(default=16, ge=1, le=10_000, alias="DEERFLOW_TOOLS_QUEUE_CONCURRENCY")
    sandbox_queue_concurrency: int = Field(default=2, ge=1, le=1_000, alias="DEERFLOW_SANDBOX_QUEUE_CONCURRENCY")
    # Model and tool calls of a run whose workflow worker also serves the model / tools queues go on
    # the run's main queue, so the server hands each one straight back to that worker with the
    # workflow task that asked for it (eager dispatch: no queue hop, ~25 ms less per call here).
    # false: every kind on its own queue, so separately scaled model / tools workers share the work.
    eager_activities: bool = Field(default=True, alias="DEERFLOW_EAGER_ACTIVITIES")

    # Continue a run as new once its history has this many events (unset: when the server suggests).
    continue_as_new_after_events: int | None = Field(default=None, ge=10, alias="DEERFLOW_CONTINUE_AS_NEW_EVENTS")

    # Workflow runs kept in the worker's cache. A paused run in the cache costs about 220 KiB; an
    # evicted one costs nothing until its next task, when it replays (bench/README.md).
    max_cached_workflows: int = Field(default=1000, ge=0, alias="DEERFLOW_MAX_CACHED_WORKFLOWS")

    # What one model reply can make a run do (issue #8): tool calls run per model turn (the rest
    # are answered "dropped"), and activities one run keeps in flight at once. Both stay far below
    # the server's 2,000 pending activities per run, past which a run is stuck for good.
    max_tool_calls_per_turn: int = Field(default=16, ge=1, le=256, alias="DEERFLOW_MAX_TOOL_CALLS_PER_TURN")
    max_activities_in_flight: int = Field(default=32, ge=1, le=500, alias="DEERFLOW_MAX_ACTIVITIES_IN_FLIGHT")
    # The coder's Python sandbox (sandbox/). "isolated" contains the code or refuses every call;
    # "plain" is the operator's explicit consent to run model-written code uncontained. A string,
    # not a Literal: a wrong value must make python_repl_tool refuse, not every activity fail.
    sandbox_mode: str = Field(default="isolated", alias="DEERFLOW_SANDBOX_MODE")
    sandbox_memory_mb: int = Field(default=1024, ge=16, alias="DEERFLOW_SANDBOX_MEMORY_MB")
    sandbox_disk_mb: int = Field(default=64, ge=1, le=4096, alias="DEERFLOW_SANDBOX_DISK_MB")
    sandbox_uid_base: int = Field(default=64000, ge=1000, le=2**31 - 64, alias="DEERFLOW_SANDBOX_UID_BASE")

    # Output caps (issue #11): ``max_tokens`` sent with every model call, so a model that loops
    # stops at the cap instead of at LLM_REQUEST_TIMEOUT (and is not retried identically).
    # LLM_MAX_OUTPUT_TOKENS is every agent's cap; LLM_AGENT_MAX_OUTPUT_TOKENS overrides it per agent
    # ("reporter=8192,planner=4096"). Each is also held under the context window's output reserve.
    llm_max_output_tokens: int = Field(default=4096, ge=16, alias="LLM_MAX_OUTPUT_TOKENS")
    llm_agent_max_output_tokens: dict[str, int] = Field(
        default_factory=lambda: {"reporter": 8192}, alias="LLM_AGENT_MAX_OUTPUT_TOKENS")
    # How the planner asks for JSON: "json_schema" sends the plan's schema (OpenAI, vLLM and
    # llama.cpp enforce it) and falls back to "json_object" when the provider refuses it.
    llm_structured_output: Literal["json_schema", "json_object"] = Field(
        default="json_schema", alias="LLM_STRUCTURED_OUTPUT")
    # How agents use tools (issue #24): "native" tool calls, "json" schema-enforced action objects
    # (activities/model/json_tools.py), "auto" native until the provider proves not to call them.
    llm_tool_mode: Literal["native", "json", "auto"] = Field(default="auto", alias="LLM_TOOL_MODE")

    @field_validator("llm_agent_max_output_tokens", mode="before")
    @classmethod
    def _split_agent_caps(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError("LLM_AGENT_MAX_OUTPUT_TOKENS is agent=tokens pairs, e.g. reporter=8192,planner=4096")
        return {name.strip(): int(tokens) for name, tokens in pairs}

    @field_validator("llm_agent_max_output_tokens")
    @classmethod
    def _positive_caps(cls, value: dict[str, int]) -> dict[str, int]:
        if any(tokens < 16 for tokens in value.values()):
            raise ValueError("each agent's output cap must be at least 16 tokens")
        return value

    def max_output_tokens(self, agent: str) -> int:
        """The output cap of ``agent`` (the prompt's name: planner, reporter, researcher, …)."""
        return self.llm_agent_max_output_tokens.get(agent, self.llm_max_output_tokens)

    # Agents.
    agent_recursion_limit: int = Field(default=DEFAULT_RECURSION_LIMIT, alias="AGENT_RECURSION_LIMIT")

    # Set by the worker when it serves the bundled offline demonstration providers: the model
    # (DEERFLOW_OFFLINE_DEMO), the search corpus (DEERFLOW_OFFLINE_SEARCH), or both.
    offline_demo: bool = Field(default=False, alias="DEERFLOW_OFFLINE_DEMO")
    offline_search: bool = Field(default=False, alias="DEERFLOW_OFFLINE_SEARCH")

    # Where embedded state lives (dev-server db, indexes, blobs).
    # Absolute by default, so the CLI (run from anywhere) and the worker (run from the repo) agree.
    home: Path = Field(default=Path(__file__).resolve().parent.parent / ".deerflow", alias="DEERFLOW_HOME")

    # The front door (cli/, runtime/embedded.py). The embedded dev server's Web UI port; tests and a
    # second checkout choose another so that two embedded servers can run side by side.
    ui_port: int = Field(default=8233, ge=1, le=65535, alias="DEERFLOW_UI_PORT")
    # Where the front door runs the embedded dev server when no Temporal address is configured
    # (TEMPORAL_ADDRESS or a profile's address, which are only ever connected to). Loopback only.
    embedded_address: str = Field(default="127.0.0.1:7233", alias="DEERFLOW_EMBEDDED_ADDRESS",
                                  pattern=r"^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|\[::1\]):\d{1,5}$")

    # Large-payload storage (runtime/converter.py): payloads at or above the threshold are written
    # to a blob store and history keeps only a small reference. "filesystem" (<home>/blobs), "s3"
    # or "none". Every worker, client and replayer must share the same store.
    payload_store: str = Field(default="filesystem", alias="DEERFLOW_PAYLOAD_STORE")
    payload_threshold_bytes: int = Field(default=32_768, ge=0, alias="DEERFLOW_PAYLOAD_THRESHOLD_BYTES")
    # Content-addressed JSON subtrees (storage/subtrees.py), in the same store: in a JSON payload of
    # at least DEERFLOW_SUBTREE_PAYLOAD_BYTES, each string, object or array of at least
    # DEERFLOW_SUBTREE_MIN_BYTES (one a history reference of 78 bytes replaces) is stored once and
    # history keeps the reference; only activity inputs and results are shrunk. DEERFLOW_SUBTREES=false
    # writes none (still reads them: the sandbox worker's read-only store user); none with
    # DEERFLOW_PAYLOAD_STORE=none.
    subtrees: bool = Field(default=True, alias="DEERFLOW_SUBTREES")
    subtree_payload_bytes: int = Field(default=1024, ge=0, alias="DEERFLOW_SUBTREE_PAYLOAD_BYTES")
    subtree_min_bytes: int = Field(default=256, ge=128, alias="DEERFLOW_SUBTREE_MIN_BYTES")
    # The filesystem store fsyncs each new blob before history can name it (about 1 ms on a VM disk,
    # per new subtree). false: faster, but an OS crash or power loss may lose blobs that history
    # names; only for a store on tmpfs, or when the Temporal server's own storage is not durable either.
    blob_fsync: bool = Field(default=True, alias="DEERFLOW_BLOB_FSYNC")
    # The S3 store (storage/s3.py) takes its credentials from the standard AWS chain (AWS_ACCESS_KEY_ID/
    # AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, AWS_PROFILE with the shared files, web identity, the
    # instance or task role), read by botocore itself: none of them is a setting here.
    s3_bucket: str = Field(default="deerflow-payloads", alias="DEERFLOW_S3_BUCKET")
    s3_endpoint_url: str | None = Field(default=None, alias="DEERFLOW_S3_ENDPOINT_URL")  # None: AWS itself
    # None: the chain's region (AWS_REGION, AWS_DEFAULT_REGION, the profile), else us-east-1.
    s3_region: str | None = Field(default=None, alias="DEERFLOW_S3_REGION")
    # Prepended to every object key, e.g. "deerflow/" to share a bucket (and scope an IAM policy).
    s3_key_prefix: str = Field(default="", pattern=r"^([A-Za-z0-9!_.*'()-]+/)*$", alias="DEERFLOW_S3_KEY_PREFIX")
    # Path-style URLs (<endpoint>/<bucket>/<key>), which need no wildcard DNS. None: path-style
    # exactly when DEERFLOW_S3_ENDPOINT_URL names a self-hosted store (MinIO).
    s3_path_style: bool | None = Field(default=None, alias="DEERFLOW_S3_PATH_STYLE")

    # Payload encryption and the codec server (runtime/encryption.py, server/codec.py). Keys:
    # ``id:base64key`` entries (comma-separated, or one a line in the key file), the first the
    # active one; unset: payloads are not encrypted. The codec server serves the Web UI and the
    # `temporal` CLI: beyond loopback it needs the token; browsers need their origin listed
    # (unset: the embedded Web UI's, http://127.0.0.1:<DEERFLOW_UI_PORT> and localhost). The
    # embedded default starts it on DEERFLOW_CODEC_PORT (unset: a free port).
    encryption_keys: str | None = Field(default=None, alias="DEERFLOW_ENCRYPTION_KEYS")
    encryption_key_file: Path | None = Field(default=None, alias="DEERFLOW_ENCRYPTION_KEY_FILE")
    codec_token: str | None = Field(default=None, alias="DEERFLOW_CODEC_TOKEN")
    codec_allowed_origins: list[str] | None = Field(default=None, alias="DEERFLOW_CODEC_ALLOWED_ORIGINS")
    codec_max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024,
                                      alias="DEERFLOW_CODEC_MAX_BODY_BYTES")
    codec_port: int | None = Field(default=None, ge=1, le=65535, alias="DEERFLOW_CODEC_PORT")

    def codec_origins(self) -> list[str]:
        """The browser origins the codec server answers: the operator's, else the embedded Web UI's."""
        if self.codec_allowed_origins is not None:
            return self.codec_allowed_origins
        return [f"http://127.0.0.1:{self.ui_port}", f"http://localhost:{self.ui_port}"]

    # The web front end (server/): `starter.py serve`. A bind beyond loopback needs the token
    # (sent as `Authorization: Bearer ...`); browsers on other origins (DeerFlow's UI) need their
    # origin listed. Runs it starts for DeerFlow threads get workflow ids under the prefix, so a
    # thread id can only ever address runs the server itself started for that thread.
    web_token: str | None = Field(default=None, alias="DEERFLOW_WEB_TOKEN")
    web_allowed_origins: list[str] = Field(default_factory=lambda: ["http://localhost:3000"],
                                           alias="DEERFLOW_WEB_ALLOWED_ORIGINS")
    web_max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024,
                                    alias="DEERFLOW_WEB_MAX_BODY_BYTES")
    web_thread_prefix: str = Field(default="deerflow-web-", pattern=r"^[A-Za-z0-9_.-]{1,40}$",
                                   alias="DEERFLOW_WEB_THREAD_PREFIX")
    # Event streams open at once; each holds a long poll on Temporal while its page is open.
    web_max_streams: int = Field(default=64, ge=1, le=10_000, alias="DEERFLOW_WEB_MAX_STREAMS")
    # The podcast's voices (activities/content/speech.py): an OpenAI-compatible /v1/audio/speech endpoint
    # (base URL up to /v1), its key, model and one voice per speaker. Unset: no voice, script only.
    tts_url: str | None = Field(default=None, pattern=r"^https?://", alias="DEERFLOW_TTS_URL")
    tts_api_key: str | None = Field(default=None, alias="DEERFLOW_TTS_API_KEY")
    tts_model: str = Field(default="tts-1", alias="DEERFLOW_TTS_MODEL")
    tts_voice_male: str = Field(default="onyx", alias="DEERFLOW_TTS_VOICE_MALE")
    tts_voice_female: str = Field(default="nova", alias="DEERFLOW_TTS_VOICE_FEMALE")
    tts_timeout: float = Field(default=60.0, gt=0, le=600, alias="DEERFLOW_TTS_TIMEOUT")
    # DeerFlow's Volcengine TTS settings, used when DEERFLOW_TTS_URL is unset (its podcast voices).
    volcengine_tts_appid: str | None = Field(default=None, alias="VOLCENGINE_TTS_APPID")
    volcengine_tts_access_token: str | None = Field(default=None, alias="VOLCENGINE_TTS_ACCESS_TOKEN")
    volcengine_tts_cluster: str = Field(default="volcano_tts", alias="VOLCENGINE_TTS_CLUSTER")
    volcengine_tts_url: str = Field(default="https://openspeech.bytedance.com/api/v1/tts", pattern=r"^https?://",
                                    alias="DEERFLOW_VOLCENGINE_TTS_URL")
    # The content flows' request bodies (a whole report: evaluation, slides, podcast, prose edits).
    web_max_content_bytes: int = Field(default=1024 * 1024, ge=64 * 1024, le=16 * 1024 * 1024,
                                       alias="DEERFLOW_WEB_MAX_CONTENT_BYTES")
    # DeerFlow's RAG upload (server/uploads.py): where uploaded .md/.txt files go (inside a
    # resource root; unset: uploads/ in the first root), and the caps per file and for the folder.
    web_upload_dir: Path | None = Field(default=None, alias="DEERFLOW_WEB_UPLOAD_DIR")
    web_upload_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024,
                                      alias="DEERFLOW_WEB_UPLOAD_MAX_BYTES")
    web_upload_max_total_bytes: int = Field(default=512 * 1024 * 1024, ge=1024,
                                            alias="DEERFLOW_WEB_UPLOAD_MAX_TOTAL_BYTES")

    # Traces and metrics (runtime/tracing.py, runtime/metrics.py). Traces are exported over OTLP
    # only when the standard OTEL_EXPORTER_OTLP_ENDPOINT is set (the exporter reads the other
    # OTEL_* variables itself); unset, no tracing code is even imported. The worker serves
    # Prometheus metrics (the SDK's and ours) on DEERFLOW_METRICS_ADDRESS (host:port) when set.
    # DEERFLOW_MODEL_PRICES: USD per million tokens, JSON {"model": {"input": 0.5, "output": 1.5}},
    # merged over the defaults in config/model_prices.py; a model in neither costs 0, labelled unpriced.
    otel_exporter_otlp_endpoint: str | None = Field(default=None, alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    # OTLP's transport: http/protobuf (the default) or grpc; OTEL_EXPORTER_OTLP_TRACES_PROTOCOL wins.
    # The exporters read the other OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates)
    # and the SDK OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER(_ARG) themselves.
    otel_exporter_otlp_protocol: Literal["http/protobuf", "grpc"] = Field(default="http/protobuf",
                                                                        alias="OTEL_EXPORTER_OTLP_PROTOCOL")
    otel_exporter_otlp_traces_protocol: Literal["http/protobuf", "grpc"] | None = Field(
        default=None, alias="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    metrics_address: str | None = Field(default=None, pattern=r"^\[?[A-Za-z0-9_.:-]+\]?:\d{1,5}$",
                                        alias="DEERFLOW_METRICS_ADDRESS")
    # The worker's liveness and readiness probes (runtime/health.py), host:port; unset: none.
    health_address: str | None = Field(default=None, pattern=r"^\[?[A-Za-z0-9_.:-]+\]?:\d{1,5}$",
                                       alias="DEERFLOW_HEALTH_ADDRESS")
    model_prices: dict[str, ModelPrice] = Field(default_factory=dict, alias="DEERFLOW_MODEL_PRICES")
    # Logging of the worker, API server and codec server (runtime/logs.py): level, and text or one JSON
    # object per line with the run's ids.
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(default="INFO", alias="LOG_LEVEL")
    log_format: Literal["text", "json"] = Field(default="text", alias="LOG_FORMAT")

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _any_case(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        return value.strip().upper() if info.field_name == "log_level" else value.strip().lower()

    @field_validator("model_prices", mode="before")
    @classmethod
    def _parse_model_prices(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    def model_price(self, model: str) -> ModelPrice | None:
        """The operator's price for ``model``, else the default table's; None: unpriced."""
        return self.model_prices.get(model) or default_price(model)

    # Token previews (issue #14; activities/model/token_stream.py, server/live.py): the chat activity
    # publishes its reply as it is generated to the API server's /internal/token-stream, best
    # effort and never durable. Unset URL: the sink the local `serve` announces under <home>
    # (the embedded default). The token is the shared secret between workers and API servers; a
    # server with none makes a new one at each start and announces it. Off: no streaming at all.
    token_stream: bool = Field(default=True, alias="DEERFLOW_TOKEN_STREAM")
    token_stream_url: str | None = Field(default=None, pattern=r"^https?://", alias="DEERFLOW_TOKEN_STREAM_URL")
    token_stream_token: str | None = Field(default=None, alias="DEERFLOW_TOKEN_STREAM_TOKEN")
    # Seconds one publish may take before the rest of that reply goes unpublished.
    token_stream_timeout: float = Field(default=0.5, gt=0, le=10, alias="DEERFLOW_TOKEN_STREAM_TIMEOUT")
    # Characters waiting for a slow sink before the rest of that reply goes unpublished.
    token_stream_max_pending: int = Field(default=65_536, ge=1024, le=4 * 1024 * 1024,
                                          alias="DEERFLOW_TOKEN_STREAM_MAX_PENDING")

    # Reclaiming a dead worker's attempts (hosting/inflight_journal.py, hosting/reclaim.py):
    # each worker process journals the task tokens of its attempts in flight under <home>/inflight,
    # and a worker starting on the same machine fails those of dead processes at once, so they are
    # retried without waiting for their heartbeat timeouts. Off: no journal and no reclaim.
    reclaim_lost_attempts: bool = Field(default=True, alias="DEERFLOW_RECLAIM_LOST_ATTEMPTS")
    # How long a call whose attempts keep being lost with their workers (heartbeat timeouts, crashes,
    # shutdowns) is retried before its run fails (hosting/retry_window.py); the provider's own
    # errors are bounded by count instead. Seconds, or an ISO 8601 duration (PT6H).
    worker_retry_window: timedelta = Field(default=timedelta(hours=6), gt=timedelta(0),
                                           alias="DEERFLOW_WORKER_RETRY_WINDOW")

    @field_validator("worker_retry_window", mode="before")
    @classmethod
    def _seconds_or_iso(cls, value: Any) -> Any:
        """A plain number is seconds, as in every other duration setting; pydantic would refuse it as text."""
        if isinstance(value, str) and value.strip().replace(".", "", 1).isdigit():
            return float(value)
        return value
    # Seconds a worker told to stop (SIGTERM, SIGINT) waits for its activities in flight to finish,
    # polling no more, before it cancels them to be retried elsewhere: a deploy must not pay for a
    # model call twice. The default is the model call's start-to-close timeout (workflows/
    # activity_options.py), so a call that could still succeed is never cut; docker-compose.yml's
    # stop_grace_period is set a little above it. A second signal stops the worker at once.
    worker_shutdown_grace: float = Field(default=300.0, ge=0, le=86_400, alias="DEERFLOW_WORKER_SHUTDOWN_GRACE")

    @field_validator("web_allowed_origins", "codec_allowed_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: Any) -> Any:
        return _comma_separated(value, lambda origin: origin.rstrip("/"))

    @field_validator("web_allowed_origins")
    @classmethod
    def _origins_are_origins(cls, value: list[str]) -> list[str]:
        """A browser sends ``scheme://host[:port]`` and CORS compares it exactly, so anything else
        (a JSON list, a path) would allow nothing while looking configured: refuse it by name."""
        for origin in value:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query \
                    or parts.fragment or any(c in parts.netloc for c in "\"' ,"):
                raise ValueError(f"{origin!r} is not an origin like http://localhost:3000 "
                                 "(DEERFLOW_WEB_ALLOWED_ORIGINS is a comma-separated list)")
        return value

    @field_validator("agent_recursion_limit", mode="before")
    @classmethod
    def _fallback_recursion_limit(cls, value: Any) -> int:
        # DeerFlow falls back to the default on an invalid value instead of refusing to start.
        try:
            limit = int(value)
        except (TypeError, ValueError):
            return DEFAULT_RECURSION_LIMIT
        return limit if limit > 0 else DEFAULT_RECURSION_LIMIT

    @field_validator("token_limit", mode="before")
    @classmethod
    def _ignore_invalid_token_limit(cls, value: Any) -> int | None:
        # Like the recursion limit: a bad value falls back to inference from the model name
        # instead of failing every model call of the worker.
        try:
            limit = int(value)
        except (TypeError, ValueError):
            return None
        return limit if limit > 0 else None

    def model_name(self, tier: str) -> str:
        if tier == "reasoning" and self.reasoning_model:
            return self.reasoning_model
        return self.basic_model

    def model_endpoint(self, tier: str) -> ModelEndpoint:
        """Where ``tier``'s calls go: the reasoning model's own block where it gives a value."""
        basic = ModelEndpoint(base_url=self.openai_base_url, api_key=self.openai_api_key,
                              verify_ssl=self.llm_verify_ssl, max_retries=self.llm_max_retries)
        if tier != "reasoning" or not self.reasoning_model:
            return basic
        return ModelEndpoint(
            base_url=self.reasoning_base_url or basic.base_url, api_key=self.reasoning_api_key or basic.api_key,
            verify_ssl=basic.verify_ssl if self.reasoning_verify_ssl is None else self.reasoning_verify_ssl,
            max_retries=basic.max_retries if self.reasoning_max_retries is None else self.reasoning_max_retries)

    def model_configured(self) -> bool:
        """Whether the operator named a model provider (env, .env or conf.yaml); else the offline demo.

        A key names one; so does an endpoint without a key (a local server), except OpenAI's own
        public one, which answers nothing without a key: docker-compose.yml passes it as the default
        so that an empty value never reaches openai-python, and that alone must not send a keyless
        worker to the internet instead of the demo.
        """
        return bool(self.openai_api_key or
                    (self.openai_base_url and self.openai_base_url.rstrip("/") != OPENAI_PUBLIC_BASE_URL))


class ModelEndpoint(BaseModel):
    """One model tier's endpoint, key and client options."""

    base_url: str | None
    api_key: str | None
    verify_ssl: bool
    max_retries: int


def _comma_separated(value: Any, clean: Callable[[str], str] = lambda item: item) -> Any:
    """An env value's comma-separated items, stripped, blanks dropped and each ``clean``ed;
    a value that is already a list (conf.yaml, a test) passes through."""
    if not isinstance(value, str):
        return value
    return [clean(item.strip()) for item in value.split(",") if item.strip()]


def load_settings(environ: Mapping[str, str] | None = None, conf_path: Path | None = None,
                  env_file: Path | None = None) -> Settings:
    """Env vars win over ``.env`` (``env_file``, else ``DEERFLOW_ENV_FILE``, else ``./.env``), which
    wins over ``conf.yaml`` (``conf_path``, else ``DEERFLOW_CONF``, else ``./conf.yaml``).

    An empty variable counts as unset: compose's ``${VAR:-}`` produces them for every option the
    operator did not give. ``environ`` defaults to the process's environment. ``.env`` and
    ``conf.yaml`` are read as DeerFlow reads them (config/deerflow.py). Raises :class:`ConfigError`
    with one line per problem (a refused DeerFlow key, a bad value), never a traceback's worth.
    """
    return load_settings_with_sources(environ, conf_path, env_file)[0]


def load_settings_with_sources(environ: Mapping[str, str] | None = None, conf_path: Path | None = None,
                               env_file: Path | None = None) -> tuple[Settings, dict[str, str]]:
    """:func:`load_settings`, and where each value given came from, by env name: "environment",
    the ``.env`` file's path or the ``conf.yaml`` file's path (a name absent: the default)."""
    process_env = {name: value for name, value in (os.environ if environ is None else environ).items() if value}
    dotenv_path = env_file or Path(process_env.get("DEERFLOW_ENV_FILE") or ".env")
    dotenv = read_env_file(dotenv_path)
    env = {**dotenv, **process_env}
    problems = env_problems(env)
    conf_file = conf_path or Path(env.get("DEERFLOW_CONF") or "conf.yaml")
    try:
        conf = conf_values(conf_file, env)
    except ConfigError as error:
        problems += error.problems
        conf = {}
    # DeerFlow's names for two of ours: its CORS list, and DEBUG=True for debug logging.
    aliases = {"DEERFLOW_WEB_ALLOWED_ORIGINS": "ALLOWED_ORIGINS", "LOG_LEVEL": "DEBUG"}
    if "ALLOWED_ORIGINS" in env and "DEERFLOW_WEB_ALLOWED_ORIGINS" not in env:
        env["DEERFLOW_WEB_ALLOWED_ORIGINS"] = env["ALLOWED_ORIGINS"]
    if env.get("DEBUG", "").strip().lower() in TRUE_WORDS and "LOG_LEVEL" not in env:
        env["LOG_LEVEL"] = "DEBUG"
    env_names = {field.alias for field in Settings.model_fields.values() if field.alias}
    from_env = {name: env[name] for name in env_names if env.get(name)}

    def origin(name: str) -> str | None:
        return "environment" if name in process_env else str(dotenv_path) if name in dotenv else None

    sources = {**dict.fromkeys(conf, str(conf_file)),
               **{name: origin(name) or f"{origin(aliases[name])} (as {aliases[name]})" for name in from_env}}
    try:
        settings = Settings(**{**conf, **from_env})
    except ValidationError as error:
        problems += validation_problems(error)
    if problems:
        raise ConfigError(problems)
    return settings, sources


def is_secret(name: str) -> bool:
    """Whether the setting ``name`` holds a credential, never printed."""
    return any(word in name.upper() for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))


def validation_problems(error: ValidationError) -> list[str]:
    """One line per invalid value: the setting's env name, what is wrong, and the value given
    (masked for secrets)."""
    lines = []
    for problem in error.errors(include_url=False):
        name = ".".join(str(part) for part in problem["loc"]) or "settings"
        value = problem.get("input")
        shown = "***" if is_secret(name) else repr(value)[:80]
        message = str(problem["msg"]).removeprefix("Value error, ")
        lines.append(f"{name}={shown}: {message}")
    return lines

