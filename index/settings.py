"""The settings of where and how collections are stored: the ``FRACTAL_*`` variables that the
service and ``fractal import`` read alike, so that both open a collection the same way
(:func:`index.catalog.catalog_for`). The service's settings class extends this one.

Every field is one variable: ``index_dir`` is ``FRACTAL_INDEX_DIR``. Lists
(``FRACTAL_INDEX_KINDS``) are comma-separated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bundle import Manifest
from index.faiss_indexes import HnswParams, PqParams
from index.first_stage import FLOORS as FIRST_STAGE_FLOORS
from index.search_tuning import recorded_first_stage

ENV_PREFIX = "FRACTAL_"
IndexKind = Literal["exact", "hnsw", "pq"]
HnswStorage = Literal["flat", "sq8", "sq8u", "sq4", "tq4"]
FirstStageSource = Literal["settings", "bundle", "index"]


def split_list(value: object) -> object:
    """A comma-separated variable as a tuple of its non-empty parts; anything else as it is."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


class StorageSettings(BaseSettings):
    """The bundle, the index folder or Milvus server, and the indexes built. Each field's
    description is its documentation (docs/settings.md)."""

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
    index_backend: Literal["embedded", "milvus"] = Field(
        "embedded",
        description="where documents and indexes live: embedded (SQLite + FAISS in index_dir, "
        "one store per replica) or milvus (a Milvus server shared by stateless replicas)",
    )

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
    hnsw_storage: HnswStorage = Field(
        "flat",
        description="HNSW vectors as float32 (flat) or 8-bit or 4-bit scalar-quantised codes "
        "(sq8, sq4: a quarter or an eighth of the bytes; their ranges learnt; sq8u: sq8's "
        "bytes, one range learnt over all coordinates), or 4-bit "
        "TurboQuant-MSE codes (tq4: sq4's bytes, levels computed for unit vectors); float32 "
        "until 10,000 vectors exist",
    )
    hnsw_native_walk: bool = Field(
        True,
        description="C2F (walk and re-rank) and a graph's plain search (the coarse route) walk "
        "a float32 (flat), sq8 or sq8u graph in Fractal's own C code, which overlaps the walk's "
        "memory loads (where its extension is built: /info says which); false: through FAISS's "
        "walk and refine, with the same answers",
    )
    hnsw_packed_links: bool = Field(
        True,
        description="a natively walked graph keeps its links packed while it is only read "
        "(from opening, a rebuild or a snapshot to the next write): each node's bottom-level "
        "list sorted and bit-packed, about a quarter of FAISS's link bytes (about 66 B per "
        "node instead of 272 at M 32), at the same walk speed (/info's index bytes count what "
        "the graph holds now); false: FAISS's arrays throughout (a collection written all the "
        "time then skips remaking them at its first write after each snapshot)",
    )
    first_stage: FirstStageSource = Field(
        "settings",
        description="C2F's first stage: from these settings (the bundle's measured shortlist "
        "prefix, FRACTAL_HNSW_STORAGE and FRACTAL_HNSW_M); bundle: the fastest graph (prefix, "
        "codes, degree) the export measured reaching FRACTAL_FIRST_STAGE_RECALL within its "
        "memory budget, for each of the three that is not set explicitly, and the coarse "
        "route's measured beam unless coarse_ef_search is set (bundles without the "
        "measurement keep the settings); index: the same from `fractal tune --first-stages`'s "
        "record in each collection's folder (measured on its own documents, at its own size), "
        "the bundle's where a collection has none (embedded backend; a changed graph is "
        "rebuilt from the stored vectors when the collection opens)",
    )
    first_stage_recall: float = Field(
        0.95,
        description="the recall@10 floor whose measured choices apply (first_stage=bundle, "
        "c2f_tuning=index): 0.95 or 0.99 (the floors measured)",
    )
    c2f_tuning: Literal["settings", "index"] = Field(
        "settings",
        description="C2F's efSearch and shortlist factor: from hnsw_ef_search and c2f_factor, or "
        "index: from `fractal tune`'s record in the collection's folder at first_stage_recall, "
        "for each of the two not set explicitly, while the record's graph is the one served",
    )
    pq_m: int = Field(
        16,
        ge=1,
        description="PQ sub-quantisers (divides the coarse, shortlist and fine dims); where the "
        "bundle ships PQ codebooks (MSHC) the index uses those instead",
    )
    pq_nbits: int = Field(8, ge=1, le=16, description="bits per PQ code")
    sfs: bool = Field(False, description="build SFS indexes for a bundle without fragment_dim")
    sfs_fragment_dim: int = Field(
        32, ge=1, description="SFS fragment size when the bundle has none"
    )
    store_check: Literal["quick", "full", "off"] = Field(
        "quick",
        description="check of every store at start: quick (PRAGMA quick_check), full "
        "(integrity_check, then every document against its checksum), off (for very large "
        "stores on slow disks); every read checks its rows' checksums whatever this says",
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

    @field_validator("index_kinds", mode="before")
    @classmethod
    def _split_kinds(cls, value: object) -> object:
        return split_list(value)

    @field_validator("fine_index_kinds", mode="before")
    @classmethod
    def _split_fine_kinds(cls, value: object) -> object:
        """Unset or empty: as ``index_kinds``; ``none``: no index at the fine prefix."""
        if isinstance(value, str):
            if value.strip().lower() == "none":
                return ()
            return split_list(value) or None
        return value

    @model_validator(mode="after")
    def _check_kinds(self) -> StorageSettings:
        if not self.index_kinds or len(set(self.index_kinds)) != len(self.index_kinds):
            raise ValueError("index_kinds must list some of exact, hnsw, pq, each once")
        fine = self.fine_index_kinds or ()
        if len(set(fine)) != len(fine):
            raise ValueError("fine_index_kinds must list each kind once")
        if self.first_stage_recall not in FIRST_STAGE_FLOORS:
            floors = " or ".join(map(str, FIRST_STAGE_FLOORS))
            raise ValueError(f"first_stage_recall must be {floors} (the floors measured)")
        return self

    @property
    def hnsw(self) -> HnswParams:
        return HnswParams(
            m=self.hnsw_m,
            ef_construction=self.hnsw_ef_construction,
            ef_search=self.hnsw_ef_search,
            storage=self.hnsw_storage,
            native_walk=self.hnsw_native_walk,
            packed_links=self.hnsw_packed_links,
        )

    def first_stage_choice(
        self, manifest: Manifest, folder: Path | None = None
    ) -> tuple[dict[str, Any] | None, FirstStageSource]:
        """The measured first stage at ``first_stage_recall`` (its prefix ``dim``, ``storage``,
        ``m`` and what it measured) and where it comes from:

        - ``index`` (``first_stage`` index): ``fractal tune --first-stages``'s record in the
          collection's ``folder`` (:func:`index.search_tuning.recorded_first_stage`);
        - ``bundle`` (``first_stage`` bundle, or index where the folder has no record or no
          choice at the floor): the export's measurement in the manifest;
        - ``settings`` (None): ``first_stage`` settings, or nothing measured reached the floor.

        A record that is unreadable, or names a graph this bundle cannot serve, is a
        :class:`ValueError` naming it."""
        if self.first_stage == "settings":
            return None, "settings"
        if self.first_stage == "index":
            recorded = recorded_first_stage(folder, self.first_stage_recall)
            if recorded is not None:
                _check_recorded(recorded, manifest, folder)
                return recorded, "index"
        measured = manifest.evaluation.get("shortlist", {}).get("first_stage", {})
        choice = measured.get("choices", {}).get(str(self.first_stage_recall))
        return (choice, "bundle") if isinstance(choice, dict) else (None, "settings")

    def measured_first_stage(
        self, manifest: Manifest, folder: Path | None = None
    ) -> dict[str, Any] | None:
        """The choice of :meth:`first_stage_choice`, without its source."""
        return self.first_stage_choice(manifest, folder)[0]

    def measured_coarse_beam(self, manifest: Manifest, folder: Path | None = None) -> dict | None:
        """The bundle's measured coarse beam for the graphs' storage (its ``ef_search`` and
        what it measured, :mod:`index.coarse_beam`) when ``first_stage`` is not ``settings``;
        None otherwise, when the bundle recorded none for that storage, or when it measured
        another graph (a prefix other than the coarse one, or another degree: a sparser graph
        needs a wider beam). ``folder``: the collection's (see :meth:`first_stage_choice`)."""
        if self.first_stage == "settings":
            return None
        applied = self.for_collection(manifest, folder)
        measured = manifest.evaluation.get("shortlist", {}).get("coarse_beam", {})
        if (measured.get("dim"), measured.get("m")) != (manifest.coarse_dim, applied.hnsw_m):
            return None
        choice = measured.get("choices", {}).get(applied.hnsw_storage)
        return choice if isinstance(choice, dict) else None

    def for_collection(self, manifest: Manifest, folder: Path | None = None) -> StorageSettings:
        """These settings with the measured first stage's codes and degree where the
        environment did not set them (:meth:`first_stage_choice`; ``folder``: the
        collection's)."""
        choice = self.measured_first_stage(manifest, folder)
        if choice is None:
            return self
        update = {
            field: choice[key]
            for field, key in (("hnsw_storage", "storage"), ("hnsw_m", "m"))
            if field not in self.model_fields_set
        }
        return self.model_copy(update=update)

    def shortlist_dim(self, manifest: Manifest, folder: Path | None = None) -> int:
        """The prefix C2F shortlists at by default: the measured first stage's (see
        :meth:`first_stage_choice`; ``folder``: the collection's), else the bundle's measured
        shortlist prefix."""
        choice = self.measured_first_stage(manifest, folder)
        if choice is None or int(choice["dim"]) not in manifest.prefix_dims:
            return manifest.shortlist_dim
        return int(choice["dim"])

    def index_layout(
        self, coarse_dim: int, fine_dim: int, shortlist_dim: int | None = None
    ) -> dict[int, tuple[str, ...]]:
        """The index kinds built at each served prefix: ``index_kinds`` at the coarse one and at
        C2F's shortlist prefix (default: the coarse one), and ``fine_index_kinds`` (default:
        the same) at the fine one. Where two of them are one prefix, it gets both sets."""
        fine = self.index_kinds if self.fine_index_kinds is None else self.fine_index_kinds
        shortlist_dim = coarse_dim if shortlist_dim is None else shortlist_dim
        layout: dict[int, tuple[str, ...]] = {}
        for dim, kinds in (
            (coarse_dim, self.index_kinds),
            (shortlist_dim, self.index_kinds),
            (fine_dim, fine),
        ):
            layout[dim] = tuple(dict.fromkeys(layout.get(dim, ()) + kinds))
        return layout

    @property
    def pq(self) -> PqParams:
        return PqParams(m=self.pq_m, nbits=self.pq_nbits)


def _check_recorded(choice: dict[str, Any], manifest: Manifest, folder: Path | None) -> None:
    """A recorded first stage this bundle can serve: one of its prefixes, a graph storage, a
    degree of at least 2; else a :class:`ValueError` naming the record."""
    dim, storage, m = choice.get("dim"), choice.get("storage"), choice.get("m")
    if (
        dim not in manifest.prefix_dims
        or storage not in get_args(HnswStorage)
        or not isinstance(m, int)
        or m < 2
    ):
        raise ValueError(
            f"the first-stage record in {folder} chose a {dim}-d {storage} graph of degree {m}, "
            f"which bundle {manifest.name} cannot serve (prefixes {list(manifest.prefix_dims)}); "
            "run fractal tune --first-stages again"
        )


def describe_settings_error(error: ValidationError) -> str:
    """One line naming the environment variables at fault, for a start-up failure."""
    problems = []
    for item in error.errors():
        variable = f"{ENV_PREFIX}{item['loc'][0]}".upper() if item["loc"] else "settings"
        message = item["msg"].removeprefix("Value error, ")
        problems.append(f"{variable}: {message}")
    return "invalid settings: " + "; ".join(problems)
