"""The bundle format on its own: manifest round trip and every way ``load_bundle`` refuses a bundle.

The ONNX and tokenizer files here are placeholder bytes: the format checks presence and hashes,
not content (tests/training/test_export.py covers real graphs).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bundle import (
    ENCODER_FILE,
    FORMAT_VERSION,
    HEADS_FILE,
    MANIFEST_FILE,
    TOKENIZER_FILE,
    Backbone,
    BundleError,
    Compression,
    HierarchyLevel,
    Manifest,
    Quantization,
    load_bundle,
    sha256_file,
    write_manifest,
)

BACKBONE = Backbone(
    source="/models/minilm", pooling="mean", max_tokens=256, hidden_size=384, fingerprint="abc123"
)


def _manifest(**changes: object) -> Manifest:
    fields: dict = {
        "name": "test-v5",
        "objective": "v5",
        "backbone": BACKBONE,
        "dim": 256,
        "prefix_dims": (64, 128, 192, 256),
        "granularity": {"coarse": 64, "fine": 256},
        "hierarchy": (
            HierarchyLevel("domain", ("banking", "travel")),
            HierarchyLevel("intent", ("balance", "transfer", "book_flight"), (0, 0, 1)),
        ),
        "evaluation": {"knn_accuracy": {"64": 0.9, "256": 0.8}},
        "onnx_max_abs_diff": 1.5e-6,
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    fields.update(changes)
    return Manifest(**fields)


@pytest.fixture
def bundle_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / ENCODER_FILE).write_bytes(b"encoder graph bytes")
    (folder / HEADS_FILE).write_bytes(b"heads graph bytes")
    (folder / TOKENIZER_FILE).write_text('{"model": {}}', encoding="utf-8")
    (folder / "plots").mkdir()
    (folder / "plots" / "accuracy.png").write_bytes(b"\x89PNG")
    write_manifest(folder, _manifest())
    return folder


def _edit_manifest(folder: Path, edit: Callable[[dict], None]) -> None:
    path = folder / MANIFEST_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_round_trip(bundle_dir: Path) -> None:
    manifest = load_bundle(bundle_dir)
    assert manifest == Manifest.from_json(manifest.to_json())
    assert manifest.format_version == FORMAT_VERSION
    assert set(manifest.files) == {ENCODER_FILE, HEADS_FILE, TOKENIZER_FILE, "plots/accuracy.png"}
    assert (manifest.coarse_dim, manifest.fine_dim) == (64, 256)
    assert manifest.hierarchy[1].labels == ("balance", "transfer", "book_flight")
    assert (manifest.hierarchy[0].parents, manifest.hierarchy[1].parents) == (None, (0, 0, 1))
    assert manifest.label_display_names(0) == ("banking", "travel")
    assert manifest.label_display_names(-1) == (
        "banking / balance", "banking / transfer", "travel / book_flight"
    )  # fmt: skip
    levels = json.loads((bundle_dir / MANIFEST_FILE).read_text(encoding="utf-8"))["hierarchy"]
    assert levels == {"levels": [
        {"name": "domain", "labels": ["banking", "travel"]},
        {"name": "intent", "labels": ["balance", "transfer", "book_flight"], "parents": [0, 0, 1]},
    ]}  # fmt: skip
    assert manifest.evaluation == {"knn_accuracy": {"64": 0.9, "256": 0.8}}
    assert len(manifest.content_hash) == 64


def test_shortlist_prefix_round_trips_and_falls_back_to_coarse(bundle_dir: Path) -> None:
    """``granularity.shortlist`` is measured at export; a manifest without it (made before the
    measurement, or an identity bundle) shortlists at the coarse prefix and keeps its bytes."""
    before = load_bundle(bundle_dir)
    assert "shortlist" not in before.to_json()["granularity"]
    assert before.shortlist_dim == before.coarse_dim == 64
    granularity = {"coarse": 64, "fine": 256, "shortlist": 128}
    written = write_manifest(bundle_dir, _manifest(granularity=granularity))
    loaded = load_bundle(bundle_dir)
    assert loaded == written == Manifest.from_json(written.to_json())
    assert (loaded.coarse_dim, loaded.shortlist_dim, loaded.fine_dim) == (64, 128, 256)
    assert written.content_hash != before.content_hash
    at_full = _manifest(granularity={"coarse": 64, "fine": 256, "shortlist": 256})
    assert at_full.shortlist_dim == 256  # no smaller prefix reached the bar


def test_rewriting_the_manifest_rehashes_the_files(bundle_dir: Path) -> None:
    before = load_bundle(bundle_dir)
    (bundle_dir / HEADS_FILE).write_bytes(b"other heads")
    after = write_manifest(bundle_dir, before)
    assert after.files[HEADS_FILE] != before.files[HEADS_FILE]
    assert after.content_hash != before.content_hash
    assert load_bundle(bundle_dir) == after


def test_unlisted_extra_files_are_ignored(bundle_dir: Path) -> None:
    (bundle_dir / "notes.txt").write_text("not part of the bundle", encoding="utf-8")
    assert "notes.txt" not in load_bundle(bundle_dir).files


def test_reader_needs_neither_torch_nor_numpy() -> None:
    code = "import sys, bundle; sys.exit(bool({'torch', 'numpy', 'onnx'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2])
    assert result.returncode == 0


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="bundle directory not found"):
        load_bundle(tmp_path / "nowhere")


def test_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="manifest.json not found"):
        load_bundle(tmp_path)


def test_missing_file(bundle_dir: Path) -> None:
    (bundle_dir / TOKENIZER_FILE).unlink()
    with pytest.raises(BundleError, match=r"bundle file missing: .*tokenizer\.json"):
        load_bundle(bundle_dir)


def test_tampered_file(bundle_dir: Path) -> None:
    (bundle_dir / ENCODER_FILE).write_bytes(b"encoder graph bytes, changed")
    with pytest.raises(BundleError, match=r"encoder\.onnx does not match its sha256"):
        load_bundle(bundle_dir)


def test_bad_json(bundle_dir: Path) -> None:
    (bundle_dir / MANIFEST_FILE).write_text('{"name": ', encoding="utf-8")
    with pytest.raises(BundleError, match="manifest.json is not valid JSON"):
        load_bundle(bundle_dir)


def test_required_file_not_listed(tmp_path: Path) -> None:
    (tmp_path / TOKENIZER_FILE).write_text("{}", encoding="utf-8")
    write_manifest(tmp_path, _manifest(hierarchy=None))
    with pytest.raises(BundleError, match="required file encoder.onnx is not listed"):
        load_bundle(tmp_path)


def test_heads_without_hierarchy(bundle_dir: Path) -> None:
    write_manifest(bundle_dir, _manifest(hierarchy=None))
    with pytest.raises(BundleError, match="heads.onnx is listed but hierarchy is missing"):
        load_bundle(bundle_dir)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(format_version=2), "format_version 2 is not supported"),
        (lambda m: m.pop("format_version"), "format_version None is not supported"),
        (lambda m: m.pop("dim"), "missing required field.s. dim"),
        (lambda m: m.update(colour="blue"), "unknown field.s. colour"),
        (lambda m: m.update(objective="magic"), "objective 'magic' is not one of"),
        (lambda m: m.update(dim=0), "dim must be a positive integer"),
        (lambda m: m.update(prefix_dims=[64, 128]), "prefix_dims must end at dim=256, not 128"),
        (lambda m: m.update(prefix_dims=[128, 64, 256]), "prefix_dims must be strictly ascending"),
        (lambda m: m.update(prefix_dims=[]), "prefix_dims must be a non-empty list"),
        (lambda m: m.update(prefix_dims="64,256"), "prefix_dims must be a list"),
        (
            lambda m: m.update(granularity={"coarse": 100, "fine": 256}),
            r"granularity\['coarse'\] = 100 is not in prefix_dims \[64, 128, 192, 256\]",
        ),
        (lambda m: m.update(granularity={"coarse": 64}), "granularity must name a 'fine'"),
        (
            lambda m: m.update(granularity={"coarse": 256, "fine": 64}),
            r"coarse \(256\) must not exceed fine \(64\)",
        ),
        (
            lambda m: m["granularity"].update(shortlist=100),
            r"granularity\['shortlist'\] = 100 is not in prefix_dims",
        ),
        (
            lambda m: m.update(granularity={"coarse": 64, "fine": 128, "shortlist": 192}),
            r"shortlist \(192\) must not exceed fine \(128\)",
        ),
        (lambda m: m["granularity"].update(shortlist="128"), "'128' is not in prefix_dims"),
        (lambda m: m.update(fragment_dim=48), "fragment_dim must be a positive divisor of dim"),
        (lambda m: m["backbone"].update(pooling="max"), "backbone.pooling 'max' is not one of"),
        (lambda m: m["backbone"].pop("hidden_size"), "backbone is missing hidden_size"),
        (lambda m: m.update(hierarchy={"levels": []}), "hierarchy must have at least one level"),
        (lambda m: m.update(hierarchy=[]), "hierarchy must be an object"),
        (
            lambda m: m["hierarchy"]["levels"][1].update(parents=[0]),
            "hierarchy level 'intent' has 3 labels and 1 parent ids; it needs one parent id per",
        ),
        (
            lambda m: m["hierarchy"]["levels"][1].update(parents=[0, 0, 2]),
            r"hierarchy level 'intent': the parent of label 'book_flight' is 2, not a label id "
            r"of level 'domain' \(0 to 1\)",
        ),
        (
            lambda m: m["hierarchy"]["levels"][1].update(parents=[0, "0", 1]),
            "the parent of label 'transfer' is '0', not a label id",
        ),
        (
            lambda m: m["hierarchy"]["levels"][1].update(parents=[0, True, 1]),
            "the parent of label 'transfer' is True, not a label id",
        ),
        (
            lambda m: m["hierarchy"]["levels"][1].update(parents="0,0,1"),
            "hierarchy level 1 parents must be a list",
        ),
        (
            lambda m: m["hierarchy"]["levels"][0].update(parents=[0, 0]),
            "hierarchy level 'domain' is the first level and cannot have parents",
        ),
        (
            lambda m: m["hierarchy"]["levels"][1].update(labels=["balance", "balance", "x"]),
            "hierarchy level 'intent' has two labels with the path 'banking / balance'",
        ),
        (lambda m: m.update(onnx_max_abs_diff=-1), "onnx_max_abs_diff must be a finite number"),
        (lambda m: m.update(evaluation=None), "evaluation must be an object"),
        (lambda m: m.update(quantization="int8"), "quantization must be an object"),
        (lambda m: m["files"].update({"../x": "0" * 64}), "lists '../x', which is not a relative"),
        (lambda m: m["files"].update({ENCODER_FILE: "abc"}), "is not a sha256 hex digest"),
        (lambda m: m.pop("files"), "missing required field.s. files"),
    ],
)
def test_invalid_manifest(bundle_dir: Path, edit: Callable[[dict], None], message: str) -> None:
    _edit_manifest(bundle_dir, edit)
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle_dir)


def test_manifest_without_parents_still_loads_with_bare_names(bundle_dir: Path) -> None:
    """Parents came after format 1 shipped: a manifest without them reads (its labels are shown
    by name alone) and rewrites byte for byte, so its content hash is unchanged."""
    path = bundle_dir / MANIFEST_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    del data["hierarchy"]["levels"][1]["parents"]
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"  # as written
    path.write_text(text, encoding="utf-8")
    manifest = load_bundle(bundle_dir)
    assert manifest.hierarchy[1].parents is None
    assert manifest.label_display_names(-1) == ("balance", "transfer", "book_flight")
    assert write_manifest(bundle_dir, manifest).content_hash == manifest.content_hash
    assert path.read_text(encoding="utf-8") == text


def test_one_name_under_two_parents_is_two_labels(bundle_dir: Path) -> None:
    hierarchy = (
        HierarchyLevel("type", ("LOC", "NUM")),
        HierarchyLevel("detail", ("city", "other", "other"), (0, 0, 1)),
    )
    written = write_manifest(bundle_dir, _manifest(hierarchy=hierarchy))
    assert load_bundle(bundle_dir) == written
    assert written.label_display_names(1) == ("LOC / city", "LOC / other", "NUM / other")
    with pytest.raises(BundleError, match="two labels with the path 'LOC / other'"):
        _manifest(hierarchy=(hierarchy[0], HierarchyLevel("detail", ("other", "other"), (0, 0))))
    with pytest.raises(ValueError, match="no label hierarchy"):
        _manifest(hierarchy=None).label_display_names(0)


def test_manifest_checks_its_fields_when_built() -> None:
    with pytest.raises(BundleError, match="prefix_dims must end at dim=384"):
        _manifest(dim=384)
    with pytest.raises(BundleError, match="evaluation must be JSON-serialisable"):
        _manifest(evaluation={"plot": object()})
    assert isinstance(BundleError("x"), ValueError)


_PQ = {"file": "pq_codebooks.npy", "dim": 64, "m": 8, "nbits": 8, "shape": [8, 256, 8],
       "bytes_per_vector": 8}
_SAE = {"file": "sae.onnx", "input_dim": 64, "output_dim": 32, "bytes_per_vector": 128}
_QUANTIZATION = {
    "method": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8",
    "per_channel": True, "activations": "uint8, scale per batch at run time",
    "source_bundle": "test-v5", "source_bundle_hash": "0" * 64,
}
_COSINE = {"texts": 64, "mean": 0.991234, "min": 0.95}
_KNN_COST = {
    "dataset": "clinc150", "k": 5, "train_texts": 10000, "test_texts": 2000,
    "coarse": {"level": "domain", "dim": 64, "fp32": 0.953, "quantized": 0.951},
    "fine": {"level": "intent", "dim": 256, "fp32": 0.9485, "quantized": 0.946},
    "points": 0.25,
}


@pytest.mark.parametrize(
    ("compression", "message"),
    [
        ({"pq": _PQ}, "compression.pq file pq_codebooks.npy is not listed in files"),
        ({"pq": {**_PQ, "shape": [8, 256, 12]}}, "compression.pq needs dim in prefix_dims"),
        ({"pq": {**_PQ, "dim": 96}}, "compression.pq needs dim in prefix_dims"),
        ({"pq": {**_PQ, "m": 0}}, "sizes must be positive integers"),
        ({"pq": {"file": "pq_codebooks.npy"}}, "compression.pq must have exactly the fields"),
        ({"lsh": {}}, "compression must be an object with some of"),
        (
            {"sae": {"file": "sae.onnx", "input_dim": 96, "output_dim": 32,
                     "bytes_per_vector": 128}},
            "compression.sae.input_dim 96 is not in prefix_dims",
        ),
    ],
)
def test_invalid_compression_parts(bundle_dir: Path, compression: dict, message: str) -> None:
    _edit_manifest(bundle_dir, lambda m: m.update(compression=compression))
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle_dir)


def test_compression_parts_round_trip(bundle_dir: Path) -> None:
    (bundle_dir / "pq_codebooks.npy").write_bytes(b"codebook bytes")
    written = write_manifest(bundle_dir, _manifest(compression=Compression.from_json({"pq": _PQ})))
    assert load_bundle(bundle_dir) == written and written.compression.pq.m == 8


def test_manifests_without_quantization_keep_their_bytes_and_hash(bundle_dir: Path) -> None:
    """``quantization`` came after format 1 shipped: a bundle without it must read, hash and
    rewrite exactly as before (no ``"quantization": null``), or index folders made with it
    would be refused as made by another bundle."""
    text = (bundle_dir / MANIFEST_FILE).read_text(encoding="utf-8")
    assert "quantization" not in text
    manifest = load_bundle(bundle_dir)
    assert manifest.quantization is None and "quantization" not in manifest.to_json()
    assert write_manifest(bundle_dir, manifest).content_hash == manifest.content_hash
    assert (bundle_dir / MANIFEST_FILE).read_text(encoding="utf-8") == text


def test_quantization_round_trips_and_changes_the_hash(bundle_dir: Path) -> None:
    before = load_bundle(bundle_dir)
    quantization = Quantization.from_json({**_QUANTIZATION, "cosine_to_fp32": _COSINE})
    written = write_manifest(bundle_dir, _manifest(quantization=quantization))
    assert load_bundle(bundle_dir) == written and written.quantization == quantization
    assert written.content_hash != before.content_hash


def test_a_graph_made_for_openvino_says_so(bundle_dir: Path) -> None:
    record = {**_QUANTIZATION, "cosine_to_fp32": _COSINE, "runtime": "openvino"}
    written = write_manifest(bundle_dir, _manifest(quantization=Quantization.from_json(record)))
    data = json.loads((bundle_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert data["quantization"]["runtime"] == "openvino"
    assert load_bundle(bundle_dir) == written and written.quantization.runtime == "openvino"
    assert Quantization.from_json({**_QUANTIZATION, "cosine_to_fp32": _COSINE}).runtime == (
        "onnxruntime"
    )
    # A record built in code is checked before it is written, not only when it is read.
    unknown = dataclasses.replace(written.quantization, runtime="tensorrt")
    with pytest.raises(BundleError, match="quantization.runtime 'tensorrt' is not one of"):
        write_manifest(bundle_dir, _manifest(quantization=unknown))
    assert load_bundle(bundle_dir) == written


def _twin(**knn_cost: object) -> dict:
    """A twin's ``quantization`` object whose ``knn_cost`` has the given fields changed."""
    return {**_QUANTIZATION, "cosine_to_fp32": _COSINE, "knn_cost": {**_KNN_COST, **knn_cost}}


def test_knn_cost_round_trips(bundle_dir: Path) -> None:
    quantization = Quantization.from_json(_twin())
    written = write_manifest(bundle_dir, _manifest(quantization=quantization))
    loaded = load_bundle(bundle_dir)
    assert loaded == written
    cost = loaded.quantization.knn_cost
    assert (cost.coarse.level, cost.coarse.dim, cost.coarse.quantized) == ("domain", 64, 0.951)
    assert (cost.fine.level, cost.fine.fp32, cost.points) == ("intent", 0.9485, 0.25)
    data = json.loads((bundle_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert data["quantization"]["knn_cost"] == _KNN_COST
    assert data["format_version"] == FORMAT_VERSION == 1


def test_a_twin_without_knn_cost_still_loads_and_keeps_its_hash(bundle_dir: Path) -> None:
    """Twins written before the k-NN cost was recorded: ``knn_cost`` absent, read as None, and
    written back without a ``"knn_cost": null`` (the content hash is unchanged)."""
    _edit_manifest(
        bundle_dir, lambda m: m.update(quantization={**_QUANTIZATION, "cosine_to_fp32": _COSINE})
    )
    manifest = load_bundle(bundle_dir)
    assert manifest.quantization.knn_cost is None
    assert "knn_cost" not in manifest.to_json()["quantization"]
    assert write_manifest(bundle_dir, manifest).content_hash == manifest.content_hash


def test_typed_parts_rewrite_their_manifest_byte_for_byte(bundle_dir: Path) -> None:
    """``compression`` and ``quantization`` as the writer put them in ``manifest.json`` before
    they were typed records: read and written again, the file and the content hash are the same."""
    parts = {"pq_codebooks.npy": b"codebook bytes", "sae.onnx": b"sae graph bytes"}
    for name, content in parts.items():
        (bundle_dir / name).write_bytes(content)
    _edit_manifest(bundle_dir, lambda m: m.update(
        compression={"pq": _PQ, "sae": _SAE},
        quantization={**_QUANTIZATION, "cosine_to_fp32": _COSINE},
        files={**m["files"], **{name: sha256_file(bundle_dir / name) for name in parts}},
    ))
    written = write_manifest(bundle_dir, load_bundle(bundle_dir))
    text = (bundle_dir / MANIFEST_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    assert data["compression"] == {"pq": _PQ, "sae": _SAE}
    assert data["quantization"] == {**_QUANTIZATION, "cosine_to_fp32": _COSINE}
    assert text == json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    again = write_manifest(bundle_dir, load_bundle(bundle_dir))
    assert (bundle_dir / MANIFEST_FILE).read_text(encoding="utf-8") == text
    assert again.content_hash == written.content_hash
    assert written.compression.sae.output_dim == 32
    assert written.quantization.cosine_to_fp32.mean == _COSINE["mean"]


def test_parts_must_be_records() -> None:
    with pytest.raises(BundleError, match="compression must be a Compression record"):
        _manifest(compression={"pq": _PQ})
    with pytest.raises(BundleError, match="quantization must be a Quantization record"):
        _manifest(quantization={**_QUANTIZATION, "cosine_to_fp32": _COSINE})


@pytest.mark.parametrize(
    ("quantization", "message"),
    [
        ({**_QUANTIZATION, "cosine_to_fp32": _COSINE, "bits": 8}, "must have exactly the fields"),
        (_QUANTIZATION, "quantization must have exactly the fields"),
        (
            {**_QUANTIZATION, "cosine_to_fp32": {**_COSINE, "texts": 0}},
            "cosine_to_fp32 needs a positive number of texts",
        ),
        ({**_QUANTIZATION, "cosine_to_fp32": [1]}, "cosine_to_fp32 must be an object"),
        (
            {**_QUANTIZATION, "cosine_to_fp32": _COSINE, "runtime": "tensorrt"},
            "quantization.runtime 'tensorrt' is not one of onnxruntime, openvino",
        ),
        (_twin(k=0), "k, train_texts and test_texts must be positive integers"),
        (_twin(fine={**_KNN_COST["fine"], "dim": 100}), "knn_cost.fine.dim 100 is not in prefix"),
        (
            _twin(coarse={**_KNN_COST["coarse"], "quantized": 95.1}),
            "knn_cost.coarse accuracies must be numbers from 0 to 1",
        ),
        (_twin(points=None), "knn_cost.points must be a finite number"),
        (_twin(fine=None), "knn_cost.fine must be an object"),
    ],
)
def test_invalid_quantization(bundle_dir: Path, quantization: dict, message: str) -> None:
    _edit_manifest(bundle_dir, lambda m: m.update(quantization=quantization))
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle_dir)
