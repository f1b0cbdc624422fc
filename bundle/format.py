"""The bundle: the one contract between the offline trainer and the online service.

A bundle is a directory, immutable once written::

    manifest.json    what the bundle is (this module's ``Manifest``) and a sha256 of every file
    encoder.onnx     input_ids + attention_mask (int64, [batch, seq]) → embedding (float32,
                     [batch, dim], unnormalised): backbone, pooling and projection in one graph
    tokenizer.json   the ``tokenizers`` file, truncation to ``backbone.max_tokens`` and padding
                     to the longest text of a batch already switched on
    heads.onnx       optional: embedding → coarse_logits (level 0, read from the normalised coarse
                     prefix) and fine_logits (finest level, read from the normalised full vector)
    router.json      optional, with heads.onnx: the granularity=auto policy (``bundle.router``)
    report.*, *.png  optional: how the bundle scored when it was made
    pq_codebooks.npy optional (MSHC): float32 [m, 2^nbits, dim / m] PQ sub-centroids of the
                     L2-normalised ``compression.pq.dim`` prefix, for an index of m-byte codes
    sae.onnx         optional (MSHC): embedding (the L2-normalised ``compression.sae.input_dim``
                     prefix, float32) → code (float32, [batch, output_dim], sparse)

The writers (``training.export``, ``training.quantize``, through ``bundle.writing``) and the reader
(``service``) all use this module, so it imports only the standard library: the service must load
a bundle without torch.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

from bundle.objectives import OBJECTIVES

FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS = (FORMAT_VERSION,)
QUANTIZATION_RUNTIMES = ("onnxruntime", "openvino")
"""Where a quantised ``encoder.onnx`` runs fastest: ONNX Runtime's dynamic int8 graphs, or
OpenVINO's static int8 ones (both run on either; see :class:`Quantization`)."""

MANIFEST_FILE = "manifest.json"
ENCODER_FILE = "encoder.onnx"
HEADS_FILE = "heads.onnx"
PQ_CODEBOOKS_FILE = "pq_codebooks.npy"
SAE_FILE = "sae.onnx"
SAE_CODE = "code"
TOKENIZER_FILE = "tokenizer.json"
REPORT_JSON_FILE = "report.json"
REPORT_MD_FILE = "report.md"
REQUIRED_FILES = (ENCODER_FILE, TOKENIZER_FILE)

# ONNX input and output names, in encoder.onnx and heads.onnx.
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
EMBEDDING = "embedding"
COARSE_LOGITS = "coarse_logits"
FINE_LOGITS = "fine_logits"

POOLING_MODES = ("mean", "cls")
COARSE = "coarse"
FINE = "fine"
SHORTLIST = "shortlist"

LABEL_PATH_SEPARATOR = " / "
"""Joins the names on a label's path from the root into the name shown for it (``banking /
balance``). A label is identified by its path, so one name may sit under several parents
(``LOC / other``, ``NUM / other``)."""

_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK_BYTES = 1 << 20


class BundleError(ValueError):
    """A bundle directory that cannot be served: missing, malformed, tampered or unsupported."""


@dataclass(frozen=True)
class Backbone:
    """The frozen encoder the bundle was made from (``training.frozen_encoder.EncoderConfig``)."""

    source: str
    pooling: str
    max_tokens: int
    hidden_size: int
    fingerprint: str


@dataclass(frozen=True)
class HierarchyLevel:
    """One level of the label hierarchy: its name, its label names indexed by logit column and,
    below the first level, ``parents[i]``: the id of label ``i``'s parent in the level above.

    ``parents`` is None on the first level, and on every level of a manifest written before
    parents were recorded (the JSON has no ``parents`` key): a label's path then starts at it.
    """

    name: str
    labels: tuple[str, ...]
    parents: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "labels": list(self.labels)}
        if self.parents is not None:
            data["parents"] = list(self.parents)
        return data


def label_paths(
    level_names: Sequence[str],
    labels: Sequence[Sequence[str]],
    parents: Sequence[Sequence[int] | None],
) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """Every label's path from the root, names coarse first: ``paths[level][label_id]``.

    ``parents[level]`` holds one parent id (in ``level - 1``) per label of ``level``, or None where
    the parents are not known: the paths of that level then start there. The first level has no
    parents (None or empty). Raises ValueError, naming the level, for parents on the first level,
    a count other than one per label, an id that is not a label of the level above, or two labels
    with the same path.
    """
    paths: list[tuple[tuple[str, ...], ...]] = []
    for level, (level_name, names, ids) in enumerate(
        zip(level_names, labels, parents, strict=True)
    ):
        if level == 0 and ids:
            raise ValueError(f"level {level_name!r} is the first level and cannot have parents")
        level_paths: tuple[tuple[str, ...], ...]
        if ids is None or level == 0:
            level_paths = tuple((name,) for name in names)
        else:
            above = paths[level - 1]
            if len(ids) != len(names):
                raise ValueError(
                    f"level {level_name!r} has {len(names)} labels and {len(ids)} parent ids; "
                    "it needs one parent id per label"
                )
            for name, parent in zip(names, ids, strict=True):
                if not _is_int(parent) or not 0 <= parent < len(above):
                    raise ValueError(
                        f"level {level_name!r}: the parent of label {name!r} is {parent!r}, not "
                        f"a label id of level {level_names[level - 1]!r} (0 to {len(above) - 1})"
                    )
            level_paths = tuple(
                (*above[parent], name) for name, parent in zip(names, ids, strict=True)
            )
        if len(set(level_paths)) != len(level_paths):
            twice = next(path for path in level_paths if level_paths.count(path) > 1)
            raise ValueError(
                f"level {level_name!r} has two labels with the path "
                f"{LABEL_PATH_SEPARATOR.join(twice)!r}"
            )
        paths.append(level_paths)
    return tuple(paths)


def label_display_name(path: Sequence[str]) -> str:
    """The name shown for a label: its path joined by :data:`LABEL_PATH_SEPARATOR`."""
    return LABEL_PATH_SEPARATOR.join(path)


@dataclass(frozen=True)
class PQPart:
    """``compression.pq``: ``file`` holds float32 ``shape = [m, 2^nbits, dim / m]`` sub-centroids
    of the L2-normalised ``dim`` prefix, for an index of ``m``-byte codes."""

    file: str
    dim: int
    m: int
    nbits: int
    shape: tuple[int, ...]
    bytes_per_vector: int


@dataclass(frozen=True)
class SAEPart:
    """``compression.sae``: ``file`` maps the L2-normalised ``input_dim`` prefix to an
    ``output_dim`` sparse code."""

    file: str
    input_dim: int
    output_dim: int
    bytes_per_vector: int


@dataclass(frozen=True)
class Compression:
    """An objective's extra parts (MSHC): some of ``pq`` and ``sae``; unset parts are omitted
    from the JSON."""

    pq: PQPart | None = None
    sae: SAEPart | None = None

    def parts(self) -> dict[str, PQPart | SAEPart]:
        """The set parts by their JSON name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}

    def to_json(self) -> dict[str, Any]:
        return {name: _record_json(part) for name, part in self.parts().items()}

    @classmethod
    def from_json(cls, value: object) -> Compression:
        """Parse the manifest's ``compression`` object; a :class:`BundleError` if malformed."""
        parts = sorted(f.name for f in fields(cls))
        if not isinstance(value, dict) or not set(value) <= set(parts):
            raise _fail("compression", f"must be an object with some of {parts}")
        pq, sae = value.get("pq"), value.get("sae")
        if pq is not None:
            pq = _parse_exact(PQPart, pq, "compression.pq")
            pq["shape"] = _tuple_field(pq["shape"], "compression.pq.shape")
            pq = PQPart(**pq)
        if sae is not None:
            sae = SAEPart(**_parse_exact(SAEPart, sae, "compression.sae"))
        return cls(pq=pq, sae=sae)


@dataclass(frozen=True)
class CosineToFP32:
    """How close a quantised encoder's embeddings stay to the fp32 graph's: the cosine of each
    check text's two embeddings, its mean and minimum over ``texts`` texts."""

    texts: int
    mean: float
    min: float


@dataclass(frozen=True)
class KnnProbe:
    """One k-NN probe of a quantised encoder: the accuracy on the labels of hierarchy level
    ``level`` at the ``dim`` prefix, through the fp32 graph and through the quantised one."""

    level: str
    dim: int
    fp32: float
    quantized: float


@dataclass(frozen=True)
class KnnCost:
    """What a quantised encoder costs in k-NN accuracy on ``dataset``: each of ``test_texts``
    test texts takes the label most of its ``k`` nearest (cosine) of ``train_texts`` training
    texts have. ``coarse`` probes the first level's labels at the coarse prefix, ``fine`` the
    finest level's at the fine prefix; ``points`` is the larger of the two drops, in accuracy
    points (negative when the quantised graph scored higher on both)."""

    dataset: str
    k: int
    train_texts: int
    test_texts: int
    coarse: KnnProbe
    fine: KnnProbe
    points: float

    @classmethod
    def from_json(cls, value: object) -> KnnCost:
        """Parse ``quantization.knn_cost``; a :class:`BundleError` if malformed."""
        data = _parse_exact(cls, value, "quantization.knn_cost")
        for probe in ("coarse", "fine"):
            field_name = f"quantization.knn_cost.{probe}"
            data[probe] = KnnProbe(**_parse_exact(KnnProbe, data[probe], field_name))
        return cls(**data)


@dataclass(frozen=True)
class Quantization:
    """How ``encoder.onnx`` was quantised after export (``training.quantize``): the recipe, the
    source bundle (name and content hash) and what it cost against the fp32 graph: cosines and,
    in twins written since it was recorded, k-NN accuracy (``knn_cost``; None in older ones)."""

    method: str
    weight_type: str
    per_channel: bool
    activations: str
    source_bundle: str
    source_bundle_hash: str
    cosine_to_fp32: CosineToFP32
    knn_cost: KnnCost | None = None
    runtime: str = "onnxruntime"
    """The runtime the graph was made and measured for (:data:`QUANTIZATION_RUNTIMES`); the
    service's ``FRACTAL_ENCODER_RUNTIME=auto`` runs it there when it can. Manifests written
    before this field existed mean ``onnxruntime``."""

    def to_json(self) -> dict[str, Any]:
        """The record's object. Fields added after twins shipped are left out at their
        defaults (``knn_cost`` unset, ``runtime`` ``onnxruntime``), so that those twins'
        manifests, and content hashes, are unchanged."""
        data = asdict(self)
        if self.knn_cost is None:
            del data["knn_cost"]
        if self.runtime == "onnxruntime":
            del data["runtime"]
        return data

    @classmethod
    def from_json(cls, value: object) -> Quantization:
        """Parse the manifest's ``quantization`` object; a :class:`BundleError` if malformed."""
        data = _parse_exact(cls, value, "quantization", optional=("knn_cost", "runtime"))
        data.setdefault("runtime", "onnxruntime")
        if data["runtime"] not in QUANTIZATION_RUNTIMES:
            raise _fail(
                "quantization.runtime",
                f"{data['runtime']!r} is not one of {', '.join(QUANTIZATION_RUNTIMES)}",
            )
        data["cosine_to_fp32"] = CosineToFP32(
            **_parse_exact(CosineToFP32, data["cosine_to_fp32"], "quantization.cosine_to_fp32")
        )
        if data.get("knn_cost") is not None:
            data["knn_cost"] = KnnCost.from_json(data["knn_cost"])
        return cls(**data)


def _record_json(record: DataclassInstance) -> dict[str, Any]:
    """A record's JSON object: its fields by name, tuples as lists."""
    return {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in asdict(record).items()
    }


@dataclass(frozen=True)
class Manifest:
    """What ``manifest.json`` holds; constructing one checks that the fields agree.

    ``prefix_dims`` are the prefixes the service may serve, ascending and ending at ``dim``;
    ``granularity`` names two of them (``coarse`` and ``fine``), and a third, ``shortlist``, when
    the export measured it: the prefix C2F takes its shortlist at (the smallest whose C2F recall
    reached the bar, :mod:`training.evaluation.shortlist`; the full dim when none did).
    ``hierarchy`` lists levels coarse first, as ``training.data.dataset.LabelHierarchy.to_json()``
    writes them, each label with its parent's id in the level above (see :class:`HierarchyLevel`).
    ``files`` maps every bundle file but the manifest (POSIX path relative to the bundle) to its
    sha256.
    ``compression`` describes an objective's extra parts (MSHC); ``quantization`` is set when
    ``encoder.onnx`` was quantised after export.
    """

    name: str
    objective: str
    backbone: Backbone
    dim: int
    prefix_dims: tuple[int, ...]
    granularity: dict[str, int]
    onnx_max_abs_diff: float
    created_at: str
    fragment_dim: int | None = None
    compression: Compression | None = None
    quantization: Quantization | None = None
    hierarchy: tuple[HierarchyLevel, ...] | None = None
    evaluation: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        _check_manifest(self)

    @property
    def coarse_dim(self) -> int:
        return self.granularity[COARSE]

    @property
    def fine_dim(self) -> int:
        return self.granularity[FINE]

    def label_display_names(self, level: int) -> tuple[str, ...]:
        """The names shown for the labels of hierarchy ``level`` (negative counts from the
        finest), by logit column: their paths from the root (:func:`label_display_name`)."""
        if self.hierarchy is None:
            raise ValueError("the manifest has no label hierarchy")
        paths = label_paths(
            [lv.name for lv in self.hierarchy],
            [lv.labels for lv in self.hierarchy],
            [lv.parents for lv in self.hierarchy],
        )
        return tuple(label_display_name(path) for path in paths[level])

    @property
    def shortlist_dim(self) -> int:
        """The prefix C2F shortlists at: the measured one, or the coarse prefix for a bundle made
        before the measurement (or without data to measure it on: ``identity``)."""
        return self.granularity.get(SHORTLIST, self.coarse_dim)

    @property
    def content_hash(self) -> str:
        """A sha256 over the manifest, hence over every file's hash: the bundle's identity."""
        return hashlib.sha256(_dump(self.to_json()).encode("utf-8")).hexdigest()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["prefix_dims"] = list(self.prefix_dims)
        data["hierarchy"] = (
            None
            if self.hierarchy is None
            else {"levels": [level.to_json() for level in self.hierarchy]}
        )
        data["compression"] = None if self.compression is None else self.compression.to_json()
        if self.quantization is None:
            # Added after format 1 shipped: absent rather than null, so that the manifests (and
            # content hashes) of bundles written before it are unchanged.
            del data["quantization"]
        else:
            data["quantization"] = self.quantization.to_json()
        return data

    @classmethod
    def from_json(cls, data: object) -> Manifest:
        """Parse and check a decoded ``manifest.json``; every problem is a :class:`BundleError`."""
        if not isinstance(data, dict):
            raise BundleError(f"{MANIFEST_FILE} must hold a JSON object")
        version = data.get("format_version")
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise BundleError(
                f"{MANIFEST_FILE}: format_version {version!r} is not supported "
                f"(this reader supports {', '.join(map(str, SUPPORTED_FORMAT_VERSIONS))})"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BundleError(f"{MANIFEST_FILE}: unknown field(s) {', '.join(unknown)}")
        required = {"name", "objective", "backbone", "dim", "prefix_dims", "granularity",
                    "onnx_max_abs_diff", "created_at", "files"}
        missing = sorted(required - set(data))
        if missing:
            raise BundleError(f"{MANIFEST_FILE}: missing required field(s) {', '.join(missing)}")
        values = dict(data)
        values["backbone"] = _parse_backbone(data["backbone"])
        values["prefix_dims"] = _tuple_field(data["prefix_dims"], "prefix_dims")
        values["hierarchy"] = _parse_hierarchy(data.get("hierarchy"))
        if data.get("compression") is not None:
            values["compression"] = Compression.from_json(data["compression"])
        if data.get("quantization") is not None:
            values["quantization"] = Quantization.from_json(data["quantization"])
        return cls(**values)


def _fail(field_name: str, problem: str) -> BundleError:
    return BundleError(f"{MANIFEST_FILE}: {field_name} {problem}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _tuple_field(value: object, field_name: str) -> tuple:
    if not isinstance(value, list | tuple):
        raise _fail(field_name, f"must be a list, not {value!r}")
    return tuple(value)


def _parse_backbone(value: object) -> Backbone:
    if not isinstance(value, dict):
        raise _fail("backbone", "must be an object")
    names = [f.name for f in fields(Backbone)]
    missing = [name for name in names if name not in value]
    if missing:
        raise _fail("backbone", f"is missing {', '.join(missing)}")
    return Backbone(**{name: value[name] for name in names})


def _parse_hierarchy(value: object) -> tuple[HierarchyLevel, ...] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("levels"), list):
        raise _fail(
            "hierarchy", 'must be an object {"levels": [{"name", "labels", "parents"}, ...]}'
        )
    levels = []
    for position, level in enumerate(value["levels"]):
        if not isinstance(level, dict) or "name" not in level or "labels" not in level:
            raise _fail(
                f"hierarchy level {position}",
                'must be {"name": ..., "labels": [...]} (+ "parents": [...] below the first)',
            )
        labels = _tuple_field(level["labels"], f"hierarchy level {position} labels")
        parents = level.get("parents")
        if parents is not None:
            parents = _tuple_field(parents, f"hierarchy level {position} parents")
        levels.append(HierarchyLevel(name=level["name"], labels=labels, parents=parents))
    return tuple(levels)


def _parse_exact(
    cls: type, value: object, field_name: str, optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``value``'s fields for record ``cls``: an object with exactly ``cls``'s field names, less
    any of the ``optional`` ones."""
    names = tuple(f.name for f in fields(cls))
    if not isinstance(value, dict):
        raise _fail(field_name, "must be an object")
    if not set(names) - set(optional) <= set(value) <= set(names):
        some_optional = f" ({', '.join(optional)} optional)" if optional else ""
        raise _fail(field_name, f"must have exactly the fields {names}{some_optional}")
    return dict(value)


def _check_manifest(manifest: Manifest) -> None:
    """Every rule a manifest's fields obey on their own; ``load_bundle`` checks the files."""
    if manifest.format_version not in SUPPORTED_FORMAT_VERSIONS:
        raise _fail("format_version", f"{manifest.format_version!r} is not supported")
    if not isinstance(manifest.name, str) or not manifest.name.strip():
        raise _fail("name", "must be a non-empty string")
    if manifest.objective not in OBJECTIVES:
        raise _fail("objective", f"{manifest.objective!r} is not one of {', '.join(OBJECTIVES)}")
    _check_backbone(manifest.backbone)
    dim = manifest.dim
    if not _is_int(dim) or dim < 1:
        raise _fail("dim", f"must be a positive integer, not {dim!r}")
    _check_prefix_dims(manifest.prefix_dims, dim)
    _check_granularity(manifest.granularity, manifest.prefix_dims)
    fragment = manifest.fragment_dim
    if fragment is not None and (not _is_int(fragment) or fragment < 1 or dim % fragment):
        raise _fail("fragment_dim", f"must be a positive divisor of dim={dim}, not {fragment!r}")
    if manifest.hierarchy is not None:
        _check_hierarchy(manifest.hierarchy)
    if manifest.compression is not None:
        _check_compression(manifest.compression, manifest.prefix_dims)
    _check_json_object(manifest.evaluation, "evaluation")
    if manifest.quantization is not None:
        _check_quantization(manifest.quantization, manifest.prefix_dims)
    diff = manifest.onnx_max_abs_diff
    if not _is_finite(diff) or diff < 0:
        raise _fail("onnx_max_abs_diff", f"must be a finite number >= 0, not {diff!r}")
    if not isinstance(manifest.created_at, str) or not manifest.created_at:
        raise _fail("created_at", "must be a non-empty ISO 8601 string")
    _check_files(manifest.files)


def _check_json_object(value: object, field_name: str) -> None:
    if not isinstance(value, dict):
        raise _fail(field_name, "must be an object")
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise _fail(field_name, f"must be JSON-serialisable: {exc}") from exc


def _check_backbone(backbone: Backbone) -> None:
    if not isinstance(backbone.source, str) or not isinstance(backbone.fingerprint, str):
        raise _fail("backbone", "source and fingerprint must be strings")
    if backbone.pooling not in POOLING_MODES:
        raise _fail(
            "backbone.pooling", f"{backbone.pooling!r} is not one of {', '.join(POOLING_MODES)}"
        )
    for name in ("max_tokens", "hidden_size"):
        value = getattr(backbone, name)
        if not _is_int(value) or value < 1:
            raise _fail(f"backbone.{name}", f"must be a positive integer, not {value!r}")


def _check_prefix_dims(prefix_dims: tuple[int, ...], dim: int) -> None:
    if not prefix_dims or not all(_is_int(d) and d > 0 for d in prefix_dims):
        raise _fail("prefix_dims", f"must be a non-empty list of positive ints, not {prefix_dims}")
    if any(a >= b for a, b in zip(prefix_dims, prefix_dims[1:], strict=False)):
        raise _fail("prefix_dims", f"must be strictly ascending, not {list(prefix_dims)}")
    if prefix_dims[-1] != dim:
        raise _fail("prefix_dims", f"must end at dim={dim}, not {prefix_dims[-1]}")


def _check_granularity(granularity: object, prefix_dims: tuple[int, ...]) -> None:
    if not isinstance(granularity, dict):
        raise _fail("granularity", f"must be an object like {{{COARSE!r}: 64, {FINE!r}: 256}}")
    for key in (COARSE, FINE):
        if key not in granularity:
            raise _fail("granularity", f"must name a {key!r} dimension")
    for key, value in granularity.items():
        if not _is_int(value) or value not in prefix_dims:
            raise _fail(
                f"granularity[{key!r}]", f"= {value!r} is not in prefix_dims {list(prefix_dims)}"
            )
    coarse, fine = granularity[COARSE], granularity[FINE]
    if coarse > fine:
        raise _fail("granularity", f"coarse ({coarse}) must not exceed fine ({fine})")
    shortlist = granularity.get(SHORTLIST, coarse)
    if shortlist > fine:
        raise _fail("granularity", f"shortlist ({shortlist}) must not exceed fine ({fine})")


def _check_hierarchy(levels: tuple[HierarchyLevel, ...]) -> None:
    if not levels:
        raise _fail("hierarchy", "must have at least one level")
    for position, level in enumerate(levels):
        if not isinstance(level.name, str) or not level.name:
            raise _fail(f"hierarchy level {position}", "needs a non-empty name")
        if not level.labels or not all(isinstance(label, str) for label in level.labels):
            raise _fail(f"hierarchy level {level.name!r}", "needs a non-empty list of label names")
    try:
        label_paths(
            [level.name for level in levels],
            [level.labels for level in levels],
            [level.parents for level in levels],
        )
    except ValueError as exc:
        raise _fail("hierarchy", str(exc)) from exc


def _check_compression(compression: object, prefix_dims: tuple[int, ...]) -> None:
    """MSHC's extra parts, each naming its file and its sizes."""
    if not isinstance(compression, Compression):
        raise _fail("compression", f"must be a Compression record, not {compression!r}")
    for part, spec in compression.parts().items():
        if not _is_safe_relative(spec.file):
            raise _fail(f"compression.{part}.file", f"{spec.file!r} is not a relative path")
        sizes = [value for name, value in asdict(spec).items() if name not in ("file", "shape")]
        if not all(_is_int(value) and value > 0 for value in sizes):
            raise _fail(f"compression.{part}", "sizes must be positive integers")
    pq = compression.pq
    if pq is not None:
        m, dim, nbits = pq.m, pq.dim, pq.nbits
        shape = (m, 2**nbits, dim // m)
        if dim not in prefix_dims or dim % m or pq.shape != shape:
            raise _fail(
                "compression.pq",
                "needs dim in prefix_dims, m dividing it and shape [m, 2^nbits, dim/m]; "
                f"got {_record_json(pq)}",
            )
    sae = compression.sae
    if sae is not None and sae.input_dim not in prefix_dims:
        raise _fail("compression.sae.input_dim", f"{sae.input_dim} is not in prefix_dims")


def _check_quantization(quantization: object, prefix_dims: tuple[int, ...]) -> None:
    if not isinstance(quantization, Quantization):
        raise _fail("quantization", f"must be a Quantization record, not {quantization!r}")
    texts = ("method", "weight_type", "activations", "source_bundle", "source_bundle_hash")
    if not all(isinstance(getattr(quantization, name), str) for name in texts):
        raise _fail("quantization", f"{', '.join(texts)} must be strings")
    if not isinstance(quantization.per_channel, bool):
        raise _fail("quantization.per_channel", "must be true or false")
    if quantization.runtime not in QUANTIZATION_RUNTIMES:
        raise _fail(
            "quantization.runtime",
            f"{quantization.runtime!r} is not one of {', '.join(QUANTIZATION_RUNTIMES)}",
        )
    cosine = quantization.cosine_to_fp32
    if not isinstance(cosine, CosineToFP32) or not _is_int(cosine.texts) or cosine.texts < 1:
        raise _fail("quantization.cosine_to_fp32", "needs a positive number of texts")
    if not all(_is_finite(value) for value in (cosine.mean, cosine.min)):
        raise _fail("quantization.cosine_to_fp32", "mean and min must be finite numbers")
    if quantization.knn_cost is not None:
        _check_knn_cost(quantization.knn_cost, prefix_dims)


def _check_knn_cost(cost: object, prefix_dims: tuple[int, ...]) -> None:
    field_name = "quantization.knn_cost"
    if not isinstance(cost, KnnCost):
        raise _fail(field_name, f"must be a KnnCost record, not {cost!r}")
    if not isinstance(cost.dataset, str) or not cost.dataset:
        raise _fail(f"{field_name}.dataset", "must be a non-empty string")
    counts = (cost.k, cost.train_texts, cost.test_texts)
    if not all(_is_int(count) and count > 0 for count in counts):
        raise _fail(field_name, "k, train_texts and test_texts must be positive integers")
    if not _is_finite(cost.points):
        raise _fail(f"{field_name}.points", f"must be a finite number, not {cost.points!r}")
    for name in ("coarse", "fine"):
        probe = getattr(cost, name)
        if not isinstance(probe, KnnProbe) or not isinstance(probe.level, str):
            raise _fail(f"{field_name}.{name}", "must be a probe with a level name")
        if probe.dim not in prefix_dims:
            raise _fail(f"{field_name}.{name}.dim", f"{probe.dim!r} is not in prefix_dims")
        if not all(_is_finite(v) and 0 <= v <= 1 for v in (probe.fp32, probe.quantized)):
            raise _fail(f"{field_name}.{name}", "accuracies must be numbers from 0 to 1")


def _check_files(files: object) -> None:
    if not isinstance(files, dict):
        raise _fail("files", "must map relative paths to sha256 hex digests")
    for path, digest in files.items():
        if not _is_safe_relative(path) or path == MANIFEST_FILE:
            raise _fail("files", f"lists {path!r}, which is not a relative path inside the bundle")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise _fail(f"files[{path!r}]", "is not a sha256 hex digest")


def _is_safe_relative(path: object) -> bool:
    if not isinstance(path, str) or not path or "\\" in path:
        return False
    parts = PurePosixPath(path).parts
    return not PurePosixPath(path).is_absolute() and ".." not in parts and "." not in parts


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_manifest(bundle_dir: Path, manifest: Manifest) -> Manifest:
    """Hash every file under ``bundle_dir`` (except the manifest) and write ``manifest.json``.

    Returns the manifest with ``files`` filled in; whatever ``files`` it held is replaced.
    """
    bundle_dir = Path(bundle_dir)
    files = {
        path.relative_to(bundle_dir).as_posix(): sha256_file(path)
        for path in sorted(bundle_dir.rglob("*"))
        if path.is_file() and path != bundle_dir / MANIFEST_FILE
    }
    written = replace(manifest, files=files)
    tmp = bundle_dir / f".{MANIFEST_FILE}.tmp"
    tmp.write_text(_dump(written.to_json()), encoding="utf-8")
    tmp.replace(bundle_dir / MANIFEST_FILE)
    return written


def load_bundle(bundle_dir: Path) -> Manifest:
    """Read and verify a bundle: manifest fields, required files, and every file's sha256.

    Files on disk that the manifest does not list are ignored (they are not part of the bundle).
    Raises :class:`BundleError` naming the file or field at fault, or the file this process may
    not read (:func:`unreadable_bundle`).
    """
    bundle_dir = Path(bundle_dir)
    try:
        return _read_bundle(bundle_dir)
    except PermissionError as exc:
        raise unreadable_bundle(bundle_dir, exc) from exc


def unreadable_bundle(bundle_dir: Path, error: PermissionError) -> BundleError:
    """The error for a bundle this process may not read: the path refused, the user asking, and
    the command that lets every user read the bundle."""
    path = error.filename or bundle_dir
    return BundleError(
        f"permission denied reading {path} (this process runs as uid {os.getuid()}): make the "
        f"bundle readable by every user with: chmod -R a+rX {bundle_dir}"
    )


def _read_bundle(bundle_dir: Path) -> Manifest:
    """:func:`load_bundle`'s reading and checks."""
    if not bundle_dir.is_dir():
        raise BundleError(f"bundle directory not found: {bundle_dir}")
    manifest_path = bundle_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise BundleError(f"{manifest_path} not found: not a bundle directory")
    try:
        data = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{manifest_path} is not valid JSON: {exc}") from exc
    manifest = Manifest.from_json(data)
    for required in REQUIRED_FILES:
        if required not in manifest.files:
            raise BundleError(f"{manifest_path}: required file {required} is not listed in files")
    if HEADS_FILE in manifest.files and manifest.hierarchy is None:
        raise BundleError(f"{manifest_path}: {HEADS_FILE} is listed but hierarchy is missing")
    for part, spec in (manifest.compression.parts() if manifest.compression else {}).items():
        if spec.file not in manifest.files:
            raise BundleError(f"{manifest_path}: compression.{part} file {spec.file} is not "
                              "listed in files")
    for relative, expected in manifest.files.items():
        path = bundle_dir / relative
        if not path.is_file():
            raise BundleError(f"bundle file missing: {path}")
        if sha256_file(path) != expected:
            raise BundleError(
                f"bundle file {path} does not match its sha256 in {MANIFEST_FILE} "
                "(changed after export?)"
            )
    return manifest
