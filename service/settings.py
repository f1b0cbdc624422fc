"""The service's settings: one class, read from ``FRACTAL_*`` environment variables.

Every field is one variable: ``bundle_dir`` is ``FRACTAL_BUNDLE_DIR``, ``max_k`` is
``FRACTAL_MAX_K``. Lists (``FRACTAL_INDEX_KINDS``) are comma-separated.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import NoDecode
from redis.connection import parse_url

from bundle import Manifest
from encoding.cores import available_cores
from encoding.length_batches import DEFAULT_BATCH_TOKENS, DEFAULT_BATCH_WINDOW
from index.search_tuning import Graph, applicable_choice
from index.settings import ENV_PREFIX as ENV_PREFIX  # re-exported: the settings doc reads it
from index.settings import StorageSettings, describe_settings_error, split_list

MIN_API_KEY_CHARS = 16


class Settings(StorageSettings):
    """Everything the service can be told: where and how collections are stored (the fields of
    :class:`index.settings.StorageSettings`, first), then the server, the encoder, the limits,
    the cache and security. Each field's description is its documentation: docs/settings.md is
    generated from them (:mod:`service.settings_doc`)."""

    host: str = Field("127.0.0.1", description="bind address (0.0.0.0 in a container)")
    port: int = Field(8000, ge=0, le=65535, description="bind port")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "info", description="logging level"
    )
    http: Literal["auto", "h11", "httptools"] = Field(
        "auto", description="uvicorn's HTTP parser; auto = httptools when installed"
    )
    loop: Literal["auto", "asyncio", "uvloop"] = Field(
        "auto", description="uvicorn's event loop; auto = uvloop when installed"
    )
    inline_search_max_k: int = Field(
        100,
        ge=0,
        description="a search of one query without a filter, with k at most this, on the "
        "embedded backend runs on the event loop: the hop to a search thread and back cost "
        "~0.3 ms of CPU, more than such a search; 0 = every search in a search thread",
    )
    lean_routes: bool = Field(
        True,
        description="answer well-formed requests on the lean path (service/lean_route.py); "
        "false: FastAPI's own handler answers every request (the same answers, more CPU)",
    )
    huge_pages: bool = Field(
        True,
        description="start the service with glibc's malloc asking for transparent huge pages "
        "(GLIBC_TUNABLES=glibc.malloc.hugetlb=1, where the kernel offers them and the "
        "environment does not set that tunable): fewer TLB misses in a graph walk over a "
        "large index (service/huge_pages.py)",
    )
    backlog: int = Field(2048, ge=1, description="connections the listening socket queues")
    keep_alive_s: int = Field(5, ge=1, description="how long an idle connection is kept open")

    encoder_threads: int = Field(
        0, ge=0, description="encoder threads (ONNX Runtime intra-op, or OpenVINO's); 0 = cores"
    )
    encoder_runtime: Literal["auto", "onnxruntime", "openvino"] = Field(
        "auto",
        description="what runs encoder.onnx; auto = OpenVINO for a bundle quantised for it "
        "(the fast twin's manifest.quantization.runtime) when the openvino package is installed "
        "and ONNX Runtime has no GPU, ONNX Runtime otherwise; onnxruntime or openvino forces "
        "one (openvino without the package: start-up fails with one error line). /info's "
        "encoder.providers names the runtime",
    )
    encoder_spin: bool = Field(
        False,
        description="ONNX Runtime threads spin-wait between calls (ONNX Runtime's own default; "
        "OpenVINO's threads never spin). Off, because spinning threads take the cores the index "
        "search and the HTTP work need: on 2 cores spinning cost 2-16% of QPS",
    )
    encoder_shape_buckets: bool = Field(
        True,
        description="pad each small OpenVINO encoder call (up to 512 padded tokens) to one of a "
        "few shapes: the token length to a multiple of 16, up to 8 rows to 1, 2, 4 or 8. OpenVINO "
        "prepares the graph again for every new shape, which cost more than the work itself on "
        "short texts; the vectors are unchanged. ONNX Runtime calls keep their exact shape",
    )
    encoder_nice: int = Field(
        0,
        ge=0,
        le=19,
        description="nice values the encoder's threads run below the rest of the service "
        "(Linux keeps one per thread): the event loop and searches then get the CPU first "
        "when both want it, and the encoder every cycle they leave; 0 = the same priority",
    )
    search_threads: int = Field(
        1,
        ge=0,
        description="FAISS OpenMP threads in each search thread; 0 = cores (/info reports the "
        "count read in a search thread)",
    )
    max_batch_size: int = Field(32, ge=1, description="texts per encoder call")
    batch_policy: Literal["length", "fifo"] = Field(
        "length",
        description="how the encoder queue makes a batch: length = its oldest text and the "
        "texts of batch_window closest to it in token count (up to max_batch_size texts and "
        "batch_tokens padded tokens), so short queries are not padded to paragraphs queued "
        "with them; fifo = its oldest texts",
    )
    batch_tokens: int = Field(
        DEFAULT_BATCH_TOKENS,
        ge=1,
        description="padded tokens (texts × the longest's tokens) per encoder batch: where the "
        "length policy stops a batch, and the size of the sub-batches the encoder cuts any "
        "larger call into",
    )
    batch_window: int = Field(
        DEFAULT_BATCH_WINDOW,
        ge=1,
        description="queued texts, from the oldest, that the length policy picks a batch from "
        "(at least max_batch_size)",
    )
    max_wait_ms: float = Field(
        0.0,
        ge=0,
        description="how long an idle encoder waits for a batch to fill; 0 = not at all (it "
        "encodes what is waiting, and batches form from requests that arrive while it is busy)",
    )
    queue_depth: int = Field(
        1024, ge=1, description="texts waiting before requests get 429 (a hard cap)"
    )
    queue_deadline_ms: float = Field(
        500.0,
        ge=0,
        description="estimated encoder queue wait (the queued texts' batches at the measured cost "
        "of a batch: a fixed part per batch and a part per text) "
        "over which encoding requests get 429 before their body is read, with Retry-After that "
        "wait rounded up; 0 = only queue_depth",
    )
    request_timeout_ms: float = Field(
        10_000.0,
        ge=0,
        description="texts still queued this long after their request arrived are dropped, and "
        "the request gets 504; 0 = no deadline",
    )
    limit_concurrency: int = Field(
        0,
        ge=0,
        description="encoding requests in progress over which new ones get 429 (in the one error "
        "shape); 0 = no limit",
    )
    max_texts: int = Field(128, ge=1, description="texts (or documents, or queries) per request")
    max_chars: int = Field(8192, ge=1, description="characters per text")

    default_k: int = Field(10, ge=1, description="hits per query when a request gives no k")
    max_k: int = Field(100, ge=1, description="the most hits a query may ask for")
    c2f_factor: int = Field(
        4,
        ge=1,
        description="C2F shortlist size = k × factor, at the bundle's shortlist prefix (the "
        "smallest prefix reaching recall@10 ≥ 0.99 at factor 4, measured at export)",
    )
    coarse_ef_search: int | None = Field(
        None,
        ge=1,
        description="HNSW beam width of coarse queries (their task, same-domain hits, is "
        "reached by a narrower walk than fine recall); unset = the bundle's measured beam with "
        "first_stage=bundle, else hnsw_ef_search",
    )
    auto_fine_threshold: float = Field(
        0.5,
        ge=0,
        le=1,
        description="granularity=auto's threshold policy (bundles without router.json): fine "
        "head confidence at or over which a query goes fine",
    )
    auto_coarse_threshold: float = Field(
        0.5,
        ge=0,
        le=1,
        description="granularity=auto's threshold policy: coarse head confidence at or over "
        "which a query goes coarse",
    )
    snapshot_interval_s: float = Field(
        300.0, ge=0, description="index snapshot period after writes; 0 = only at shutdown"
    )
    shutdown_grace_s: float = Field(
        30.0,
        ge=0,
        description="on SIGTERM, new requests get 503 and those in flight may take this long to "
        "finish; then the snapshot is written and the process exits 0",
    )

    redis_url: SecretStr | None = Field(
        None,
        description="redis://[:password@]host:port/db of the query embedding cache; unset = no "
        "cache (a secret: never logged)",
    )
    cache_ttl_s: int = Field(86400, ge=1, description="lifetime of a cached embedding")
    redis_timeout_ms: float = Field(
        100.0, gt=0, description="connect and command timeout of every Redis call"
    )
    redis_retry_s: float = Field(
        1.0,
        ge=0,
        description="after a Redis failure, serve uncached this long before trying Redis again",
    )

    api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = Field(
        (),
        description="comma-separated keys, each at least 16 characters; when set, every request "
        "needs Authorization: Bearer KEY (401 otherwise); never logged",
    )
    api_keys_file: Path | None = Field(
        None,
        description="a file of scoped keys, one per line: KEY SCOPE COLLECTIONS (scope read, "
        "write or admin; collections comma-separated, * for all); read again when it changes, "
        "so keys rotate without a restart (docs/service.md, API keys and scopes); unset = none",
    )
    public_health: bool = Field(True, description="/health and /ready answer without a key")
    public_metrics: bool = Field(True, description="/metrics answers without a key")
    public_playground: bool = Field(
        True,
        description="/ui, the playground page, answers without a key (the page holds no data; "
        "its own requests carry the key typed into it)",
    )
    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1, description="request body limit (413 above it, before parsing)"
    )
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="comma-separated origins allowed to call from a browser (* for any); "
        "empty = none",
    )

    @field_validator("api_keys", "cors_origins", mode="before")
    @classmethod
    def _split_lists(cls, value: object) -> object:
        return split_list(value)

    @field_validator("redis_url", mode="before")
    @classmethod
    def _redis_url(cls, value: object) -> object:
        """Empty means no cache; anything else must be a URL redis-py can use (the message
        never repeats the URL, which may hold a password)."""
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, str):
            if not value.strip():
                return None
            parse_url(value.strip())
            return value.strip()
        return value

    @field_validator("api_keys_file")
    @classmethod
    def _readable_key_file(cls, path: Path | None) -> Path | None:
        """A file that does not parse stops the start, naming its line (never a key)."""
        if path is not None:
            from service.access import read_key_file

            read_key_file(path)
        return path

    @field_validator("api_keys")
    @classmethod
    def _long_keys(cls, keys: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        if any(len(key.get_secret_value()) < MIN_API_KEY_CHARS for key in keys):
            raise ValueError(f"every API key must have at least {MIN_API_KEY_CHARS} characters")
        return keys

    @model_validator(mode="after")
    def _check_consistency(self) -> Settings:
        if self.default_k > self.max_k:
            raise ValueError(f"default_k ({self.default_k}) must not exceed max_k ({self.max_k})")
        if self.batch_policy == "length" and self.batch_window < self.max_batch_size:
            raise ValueError(
                f"batch_window ({self.batch_window}) must be at least max_batch_size "
                f"({self.max_batch_size}), or no batch could be full"
            )
        if self.queue_depth < self.max_texts:
            raise ValueError(
                f"queue_depth ({self.queue_depth}) must be at least max_texts ({self.max_texts}), "
                "or the largest allowed request could never be queued"
            )
        return self

    def coarse_beam(
        self, manifest: Manifest, folder: Path | None = None
    ) -> tuple[int, str, dict | None]:
        """The beam coarse queries walk with, where it comes from (``settings``:
        ``coarse_ef_search``; ``bundle``: the export's measured beam, see
        :meth:`measured_coarse_beam`; ``hnsw_ef_search``: the common beam), and the bundle's
        measurement when it is the source. ``folder``: the collection's, whose first stage
        decides the graphs' codes and degree (:meth:`first_stage_choice`)."""
        if self.coarse_ef_search is not None:
            return self.coarse_ef_search, "settings", None
        measured = self.measured_coarse_beam(manifest, folder)
        if measured is not None:
            return int(measured["ef_search"]), "bundle", measured
        return self.hnsw_ef_search, "hnsw_ef_search", None

    def c2f_walk(
        self, folder: Path | None, graph: Graph | None
    ) -> tuple[int | None, int, str, dict | None]:
        """C2F's efSearch on ``graph`` (None: the graph's common beam) and shortlist factor,
        where they come from (``index``: ``fractal tune``'s record in ``folder``, see
        :func:`index.search_tuning.applicable_choice`; ``settings``), and the record's choice
        when it is the source. An unreadable record is a :class:`ValueError`."""
        if self.c2f_tuning != "index" or graph is None:
            return None, self.c2f_factor, "settings", None
        choice = applicable_choice(folder, graph, self.first_stage_recall)
        if choice is None:
            return None, self.c2f_factor, "settings", None
        explicit = self.model_fields_set
        if {"hnsw_ef_search", "c2f_factor"} <= explicit:
            return None, self.c2f_factor, "settings", None
        ef = None if "hnsw_ef_search" in explicit else int(choice["ef_search"])
        factor = self.c2f_factor if "c2f_factor" in explicit else int(choice["factor"])
        return ef, factor, "index", choice

    @property
    def requires_keys(self) -> bool:
        """Whether a request needs an API key (``FRACTAL_API_KEYS`` or the scoped keys file)."""
        return bool(self.api_keys) or self.api_keys_file is not None

    def any_key(self) -> str | None:
        """A key the service takes (the first of ``FRACTAL_API_KEYS``, else of the keys file),
        for a local client such as the container's health check."""
        if self.api_keys:
            return self.api_keys[0].get_secret_value()
        if self.api_keys_file is not None:
            from service.access import read_key_file

            return next(iter(read_key_file(self.api_keys_file)), None)
        return None

    @property
    def threads(self) -> int:
        """ONNX Runtime intra-op threads: the setting, or the cores this process may use."""
        return self.encoder_threads or available_cores()

    @property
    def faiss_threads(self) -> int:
        """FAISS OpenMP threads in each search thread: the setting, or the cores."""
        return self.search_threads or available_cores()


def settings_or_exit(problem: str, exit_status: int) -> Settings:
    """The settings from the environment; for a bad one, a single ``{problem}: …`` line on
    stderr (naming the variables at fault) and :class:`SystemExit` with ``exit_status``."""
    try:
        return Settings()
    except ValidationError as exc:
        print(f"{problem}: {describe_settings_error(exc)}", file=sys.stderr)
        raise SystemExit(exit_status) from None
