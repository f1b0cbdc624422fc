"""The service's settings: one class, read from ``FRACTAL_*`` environment variables.

Every field is one variable: ``bundle_dir`` is ``FRACTAL_BUNDLE_DIR``, ``max_k`` is
``FRACTAL_MAX_K``. Lists (``FRACTAL_INDEX_KINDS``) are comma-separated.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from redis.connection import parse_url

from encoding.cores import available_cores
from encoding.length_batches import DEFAULT_BATCH_TOKENS, DEFAULT_BATCH_WINDOW
from index import HnswParams, PqParams
from index.catalog import CatalogSettings, index_layout

ENV_PREFIX = "FRACTAL_"
IndexKind = Literal["exact", "hnsw", "pq"]
MIN_API_KEY_CHARS = 16


class Settings(BaseSettings):
    """Everything the service can be told. Each field's description is its documentation:
    docs/settings.md is generated from them (:mod:`service.settings_doc`)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    bundle_dir: Path = Field(
        description="the bundle to serve (required; its manifest and every file's sha256 are "
        "checked at start)"
    )
    index_dir: Path = Field(
        Path("fractal-index"),
        description="the SQLite store of record, the index snapshots, and which bundle made the "
        "stored vectors",
    )
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
        description="estimated encoder queue wait (texts queued × measured seconds per text) "
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

    index_kinds: Annotated[tuple[IndexKind, ...], NoDecode] = Field(
        ("hnsw", "exact"),
        description="index kinds (comma-separated: exact, hnsw, pq) built at the coarse prefix, "
        "at the bundle's C2F shortlist prefix, and at the fine one unless fine_index_kinds says "
        "otherwise; the first is the default",
    )
    fine_index_kinds: Annotated[tuple[IndexKind, ...] | None, NoDecode] = Field(
        None,
        description="index kinds at the fine prefix; unset = index_kinds, 'none' = no index "
        "(fine queries go through C2F over the shortlist prefix's index, re-ranked from the "
        "full vectors on disk: the tiered layout)",
    )
    full_vectors_dtype: Literal["float32", "float16"] = Field(
        "float32",
        description="the full vectors C2F re-ranks with, in a memory-mapped file in index_dir: "
        "float32 (exact) or float16 (half the disk and page cache; cosines within ~1e-3)",
    )
    hnsw_m: int = Field(32, ge=2, description="HNSW graph degree (M)")
    hnsw_ef_construction: int = Field(200, ge=1, description="HNSW beam width while building")
    hnsw_ef_search: int = Field(128, ge=1, description="HNSW beam width while searching")
    hnsw_storage: Literal["flat", "sq8"] = Field(
        "flat",
        description="HNSW vectors as float32 (flat) or 8-bit scalar-quantised codes (sq8: a "
        "quarter of the bytes; float32 until 10,000 vectors exist to learn the ranges)",
    )
    pq_m: int = Field(
        16,
        ge=1,
        description="PQ sub-quantisers (divides the coarse, shortlist and fine dims); where the "
        "bundle ships PQ codebooks (MSHC) the index uses those instead",
    )
    pq_nbits: int = Field(8, ge=1, le=16, description="bits per PQ code")

    default_k: int = Field(10, ge=1, description="hits per query when a request gives no k")
    max_k: int = Field(100, ge=1, description="the most hits a query may ask for")
    c2f_factor: int = Field(
        4,
        ge=1,
        description="C2F shortlist size = k × factor, at the bundle's shortlist prefix (the "
        "smallest prefix reaching recall@10 ≥ 0.99 at factor 4, measured at export)",
    )
    sfs: bool = Field(False, description="build SFS indexes for a bundle without fragment_dim")
    sfs_fragment_dim: int = Field(
        32, ge=1, description="SFS fragment size when the bundle has none"
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
    store_check: Literal["quick", "full", "off"] = Field(
        "quick",
        description="SQLite check of every store at start: quick (PRAGMA quick_check), full "
        "(integrity_check), off (for very large stores on slow disks)",
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

    index_backend: Literal["embedded", "milvus"] = Field(
        "embedded",
        description="where documents and indexes live: embedded (SQLite + FAISS in index_dir, "
        "one store per replica) or milvus (a Milvus server shared by stateless replicas)",
    )
    milvus_uri: str = Field(
        "http://127.0.0.1:19530",
        description="the Milvus server (index_backend=milvus); a user:password@ part never "
        "shows in logs or messages",
    )
    milvus_token: SecretStr | None = Field(
        None, description="Milvus credentials, user:password or an API key (never logged)"
    )
    milvus_prefix: str = Field(
        "fractal",
        pattern=r"^[A-Za-z][A-Za-z0-9]{0,31}$",
        description="Milvus collection names start with it (letters and digits): "
        "{prefix}_default and {prefix}_c_{name}; deployments can share one Milvus",
    )
    milvus_timeout_s: float = Field(
        10.0, gt=0, description="each Milvus call's deadline (then 503)"
    )
    milvus_connect_timeout_s: float = Field(
        60.0,
        ge=0,
        description="how long a start waits for Milvus to answer (then it fails with one line)",
    )
    milvus_ann_index: Literal["HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8"] = Field(
        "HNSW",
        description="the Milvus index type behind index kind hnsw (HNSW_SQ: 8-bit); the hnsw_* "
        "settings apply to the HNSW types",
    )
    milvus_ivf_nlist: int = Field(1024, ge=1, description="IVF lists (IVF_* and kind pq)")
    milvus_ivf_nprobe: int = Field(32, ge=1, description="IVF lists searched per query")

    api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = Field(
        (),
        description="comma-separated keys, each at least 16 characters; when set, every request "
        "needs Authorization: Bearer KEY (401 otherwise); never logged",
    )
    public_health: bool = Field(True, description="/health and /ready answer without a key")
    public_metrics: bool = Field(True, description="/metrics answers without a key")
    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1, description="request body limit (413 above it, before parsing)"
    )
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="comma-separated origins allowed to call from a browser (* for any); "
        "empty = none",
    )

    @field_validator("index_kinds", "api_keys", "cors_origins", mode="before")
    @classmethod
    def _split_lists(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("fine_index_kinds", mode="before")
    @classmethod
    def _split_fine_kinds(cls, value: object) -> object:
        """Unset or empty: as ``index_kinds``; ``none``: no index at the fine prefix."""
        if isinstance(value, str):
            if value.strip().lower() == "none":
                return ()
            return cls._split_lists(value) or None
        return value

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

    @field_validator("api_keys")
    @classmethod
    def _long_keys(cls, keys: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        if any(len(key.get_secret_value()) < MIN_API_KEY_CHARS for key in keys):
            raise ValueError(f"every API key must have at least {MIN_API_KEY_CHARS} characters")
        return keys

    @model_validator(mode="after")
    def _check_consistency(self) -> Settings:
        if not self.index_kinds or len(set(self.index_kinds)) != len(self.index_kinds):
            raise ValueError("index_kinds must list some of exact, hnsw, pq, each once")
        fine = self.fine_index_kinds or ()
        if len(set(fine)) != len(fine):
            raise ValueError("fine_index_kinds must list each kind once")
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

    @property
    def hnsw(self) -> HnswParams:
        return HnswParams(
            m=self.hnsw_m,
            ef_construction=self.hnsw_ef_construction,
            ef_search=self.hnsw_ef_search,
            storage=self.hnsw_storage,
        )

    def index_layout(
        self, coarse_dim: int, fine_dim: int, shortlist_dim: int | None = None
    ) -> dict[int, tuple[str, ...]]:
        """The index kinds built at each served prefix (:func:`index.catalog.index_layout`)."""
        return index_layout(
            self.index_kinds, self.fine_index_kinds, coarse_dim, fine_dim, shortlist_dim
        )

    @property
    def pq(self) -> PqParams:
        return PqParams(m=self.pq_m, nbits=self.pq_nbits)

    @property
    def catalog_settings(self) -> CatalogSettings:
        """What opening the collections reads of these settings
        (:func:`index.catalog.catalog_for`)."""
        return CatalogSettings(
            index_backend=self.index_backend,
            index_dir=self.index_dir,
            bundle_dir=self.bundle_dir,
            index_kinds=self.index_kinds,
            fine_index_kinds=self.fine_index_kinds,
            hnsw=self.hnsw,
            pq=self.pq,
            full_vectors_dtype=self.full_vectors_dtype,
            store_check=self.store_check,
            sfs=self.sfs,
            sfs_fragment_dim=self.sfs_fragment_dim,
            milvus_uri=self.milvus_uri,
            milvus_token=self.milvus_token.get_secret_value() if self.milvus_token else None,
            milvus_prefix=self.milvus_prefix,
            milvus_timeout_s=self.milvus_timeout_s,
            milvus_connect_timeout_s=self.milvus_connect_timeout_s,
            milvus_ann_index=self.milvus_ann_index,
            milvus_ivf_nlist=self.milvus_ivf_nlist,
            milvus_ivf_nprobe=self.milvus_ivf_nprobe,
        )

    @property
    def threads(self) -> int:
        """ONNX Runtime intra-op threads: the setting, or the cores this process may use."""
        return self.encoder_threads or available_cores()

    @property
    def faiss_threads(self) -> int:
        """FAISS OpenMP threads in each search thread: the setting, or the cores."""
        return self.search_threads or available_cores()


def describe_settings_error(error: ValidationError) -> str:
    """One line naming the environment variables at fault, for a start-up failure."""
    problems = []
    for item in error.errors():
        variable = f"{ENV_PREFIX}{item['loc'][0]}".upper() if item["loc"] else "settings"
        message = item["msg"].removeprefix("Value error, ")
        problems.append(f"{variable}: {message}")
    return "invalid settings: " + "; ".join(problems)


def settings_or_exit(problem: str, exit_status: int) -> Settings:
    """The settings from the environment; for a bad one, a single ``{problem}: …`` line on
    stderr (naming the variables at fault) and :class:`SystemExit` with ``exit_status``."""
    try:
        return Settings()
    except ValidationError as exc:
        print(f"{problem}: {describe_settings_error(exc)}", file=sys.stderr)
        raise SystemExit(exit_status) from None
