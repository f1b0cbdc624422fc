"""Bundle export: the ONNX graphs and the saved tokenizer alone reproduce the torch encoder and
head, the manifest verifies, and a bad export never replaces a good bundle."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from tokenizers import Tokenizer

from bundle import (
    ATTENTION_MASK,
    COARSE_LOGITS,
    EMBEDDING,
    ENCODER_FILE,
    FINE_LOGITS,
    HEADS_FILE,
    INPUT_IDS,
    MANIFEST_FILE,
    TOKENIZER_FILE,
    load_bundle,
)
from bundle.router import RouterPolicy
from training import export
from training.data.clinc import load_clinc150
from training.data.dataset import DatasetSplits
from training.data.registry import data_dir
from training.errors import FractalError
from training.evaluation.shortlist import ShortlistMeasurement, ShortlistRow
from training.export import export_bundle, export_identity_bundle, identity_prefix_dims
from training.frozen_encoder import FrozenEncoder
from training.head import FractalHead

TOLERANCE = 1e-4
PREFIX_DIMS = [64, 128, 192, 256]
GRANULARITY = {"coarse": 64, "fine": 256}
CPU = ["CPUExecutionProvider"]


def _shortlist(full_dim: int = 256) -> ShortlistMeasurement:
    """A measured C2F table (made up) in which the 128-d prefix is the first to reach 0.99."""
    return ShortlistMeasurement(
        k=10,
        shortlist_ks=(20, 40, 100),
        choice_k=40,
        target=0.99,
        full_dim=full_dim,
        documents=1000,
        queries=100,
        rows=(
            ShortlistRow(64, (0.5, 0.6, 0.7)),
            ShortlistRow(128, (0.97, 0.992, 0.999)),
            ShortlistRow(192, (0.99, 0.999, 1.0)),
        ),
        shortlist_dim=128,
    )


@pytest.fixture(scope="module")
def clinc() -> DatasetSplits:
    return load_clinc150(data_dir(), levels=2)


@pytest.fixture(scope="module")
def encoder() -> FrozenEncoder:
    return FrozenEncoder(device="cpu")


@pytest.fixture(scope="module")
def cls_encoder() -> FrozenEncoder:
    """The same backbone with CLS pooling, so that the head bundle covers the other pooling."""
    return FrozenEncoder(device="cpu", pooling="cls")


def _long_text(texts: tuple[str, ...]) -> str:
    """Real utterances joined until the text is far past MiniLM's 256-token limit."""
    return " ".join(texts[:120])


@pytest.fixture(scope="module")
def check_texts(clinc: DatasetSplits) -> list[str]:
    """16 test utterances of varying length (shortest to longest) and one over-long text."""
    by_length = sorted(clinc.test.texts, key=len)
    picks = np.linspace(0, len(by_length) - 1, 16).astype(int)
    return [by_length[i] for i in picks] + [_long_text(clinc.train.texts)]


@pytest.fixture(scope="module")
def probe_texts(clinc: DatasetSplits) -> list[str]:
    """Texts the export check never saw, including an over-long one."""
    return list(clinc.train.texts[-6:]) + [_long_text(clinc.test.texts)]


@pytest.fixture(scope="module")
def identity_dir(
    tmp_path_factory: pytest.TempPathFactory, encoder: FrozenEncoder, check_texts: list[str]
) -> Path:
    """Exported over a directory holding a stale file, to exercise ``overwrite``."""
    out_dir = tmp_path_factory.mktemp("bundles") / "identity"
    out_dir.mkdir()
    (out_dir / "stale.txt").write_text("old", encoding="utf-8")
    export_identity_bundle(out_dir, encoder, check_texts=check_texts, overwrite=True)
    return out_dir


@pytest.fixture(scope="module")
def head(clinc: DatasetSplits) -> FractalHead:
    torch.manual_seed(0)
    hierarchy = clinc.hierarchy
    return FractalHead(384, [hierarchy.num_classes(0), hierarchy.num_classes(1)], dim=256)


@pytest.fixture(scope="module")
def head_dir(
    tmp_path_factory: pytest.TempPathFactory,
    cls_encoder: FrozenEncoder,
    head: FractalHead,
    clinc: DatasetSplits,
    check_texts: list[str],
) -> Path:
    work = tmp_path_factory.mktemp("v5")
    (work / "report.json").write_text(json.dumps({"knn_accuracy": 0.5}), encoding="utf-8")
    (work / "report.md").write_text("# report\n", encoding="utf-8")
    out_dir = work / "bundle"
    export_bundle(
        out_dir,
        cls_encoder,
        head,
        name="clinc-v5-test",
        objective="v5",
        prefix_dims=PREFIX_DIMS,
        granularity=GRANULARITY,
        hierarchy=clinc.hierarchy,
        evaluation={"knn_accuracy": 0.5},
        report_files={"report.json": work / "report.json", "report.md": work / "report.md"},
        check_texts=check_texts,
        shortlist=_shortlist(),
    )
    return out_dir


def _onnx_embed(bundle_dir: Path, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings from tokenizer.json + encoder.onnx only, and the attention mask used."""
    tokenizer = Tokenizer.from_file(str(bundle_dir / TOKENIZER_FILE))
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    session = ort.InferenceSession(str(bundle_dir / ENCODER_FILE), providers=CPU)
    (embedding,) = session.run([EMBEDDING], {INPUT_IDS: ids, ATTENTION_MASK: mask})
    return embedding, mask


def test_identity_prefix_dims_rule() -> None:
    assert identity_prefix_dims(384) == [64, 128, 192, 256, 384]
    assert identity_prefix_dims(256) == [64, 128, 192, 256]
    assert identity_prefix_dims(768) == [64, 128, 192, 256, 768]


def test_identity_bundle_loads_with_its_manifest(
    identity_dir: Path, encoder: FrozenEncoder
) -> None:
    manifest = load_bundle(identity_dir)
    assert manifest.objective == "identity"
    assert manifest.dim == encoder.config.hidden_size == 384
    assert manifest.prefix_dims == (64, 128, 192, 256, 384)
    assert manifest.granularity == {"coarse": 64, "fine": 384}
    assert manifest.backbone.max_tokens == encoder.config.max_tokens
    assert manifest.hierarchy is None
    assert set(manifest.files) == {ENCODER_FILE, TOKENIZER_FILE}
    assert 0 <= manifest.onnx_max_abs_diff <= TOLERANCE
    assert not (identity_dir / "stale.txt").exists()
    assert [p.name for p in identity_dir.parent.iterdir()] == ["identity"]


def test_identity_onnx_equals_torch_on_new_texts(
    identity_dir: Path, encoder: FrozenEncoder, probe_texts: list[str]
) -> None:
    onnx_embedding, mask = _onnx_embed(identity_dir, probe_texts)
    torch_embedding = encoder.encode(probe_texts, progress=False)
    assert onnx_embedding.shape == torch_embedding.shape == (len(probe_texts), 384)
    assert np.abs(onnx_embedding - torch_embedding).max() <= TOLERANCE
    # The over-long text was cut at max_tokens; the short ones were padded to it.
    assert mask.shape[1] == encoder.config.max_tokens
    assert mask[-1].sum() == encoder.config.max_tokens
    assert mask[0].sum() < encoder.config.max_tokens


def test_saved_tokenizer_pads_to_the_longest_text(identity_dir: Path) -> None:
    tokenizer = Tokenizer.from_file(str(identity_dir / TOKENIZER_FILE))
    short, longer = tokenizer.encode_batch(["hi", "what is the balance of my savings account"])
    assert len(short.ids) == len(longer.ids) == sum(longer.attention_mask) < 32
    assert short.attention_mask[:3] == [1, 1, 1] and sum(short.attention_mask) == 3


def test_onnx_graph_has_the_contracted_inputs_and_outputs(identity_dir: Path) -> None:
    session = ort.InferenceSession(str(identity_dir / ENCODER_FILE), providers=CPU)
    inputs = {i.name: (i.type, len(i.shape)) for i in session.get_inputs()}
    assert inputs == {INPUT_IDS: ("tensor(int64)", 2), ATTENTION_MASK: ("tensor(int64)", 2)}
    (output,) = session.get_outputs()
    assert (output.name, output.type, output.shape[1]) == (EMBEDDING, "tensor(float)", 384)


def test_head_bundle_embedding_and_logits_equal_torch(
    head_dir: Path, cls_encoder: FrozenEncoder, head: FractalHead, probe_texts: list[str]
) -> None:
    manifest = load_bundle(head_dir)
    assert (manifest.dim, manifest.prefix_dims) == (256, tuple(PREFIX_DIMS))
    assert manifest.backbone.pooling == "cls"
    assert set(manifest.files) == {
        ENCODER_FILE,
        HEADS_FILE,
        TOKENIZER_FILE,
        "report.json",
        "report.md",
    }
    assert [level.name for level in manifest.hierarchy] == ["domain", "intent"]
    assert len(manifest.hierarchy[1].labels) == 150

    onnx_embedding, _ = _onnx_embed(head_dir, probe_texts)
    with torch.inference_mode():
        torch_embedding = head(torch.from_numpy(cls_encoder.encode(probe_texts, progress=False)))
        coarse = head.logits(torch_embedding, 0, GRANULARITY["coarse"]).numpy()
        fine = head.logits(torch_embedding, 1, 256).numpy()
    assert np.abs(onnx_embedding - torch_embedding.numpy()).max() <= TOLERANCE

    session = ort.InferenceSession(str(head_dir / HEADS_FILE), providers=CPU)
    onnx_coarse, onnx_fine = session.run(
        [COARSE_LOGITS, FINE_LOGITS], {EMBEDDING: torch_embedding.numpy()}
    )
    assert onnx_coarse.shape == (len(probe_texts), 10)
    assert onnx_fine.shape == (len(probe_texts), 150)
    assert np.abs(onnx_coarse - coarse).max() <= TOLERANCE
    assert np.abs(onnx_fine - fine).max() <= TOLERANCE


def test_head_bundle_records_the_measured_shortlist(head_dir: Path) -> None:
    """The shortlist measurement becomes the third resolution, an evaluation entry and a section
    of the shipped report.md (appended to the report the bundle was given)."""
    manifest = load_bundle(head_dir)
    assert manifest.granularity == {**GRANULARITY, "shortlist": 128}
    assert manifest.shortlist_dim == 128
    assert manifest.evaluation["knn_accuracy"] == 0.5
    recorded = manifest.evaluation["shortlist"]
    assert recorded == _shortlist().to_json()
    assert [row["dim"] for row in recorded["recall_at_k"]] == [64, 128, 192]
    report = (head_dir / "report.md").read_text(encoding="utf-8")
    assert report.startswith("# report\n") and "## C2F shortlist" in report
    assert "| 128 | 0.970 | 0.992 | 0.999 |" in report and "Shortlist prefix: **128**" in report


def test_refuses_to_overwrite_a_bundle(
    head_dir: Path, encoder: FrozenEncoder, check_texts: list[str]
) -> None:
    before = (head_dir / MANIFEST_FILE).read_bytes()
    with pytest.raises(FractalError, match="is not empty"):
        export_identity_bundle(head_dir, encoder, check_texts=check_texts)
    assert (head_dir / MANIFEST_FILE).read_bytes() == before


def test_failed_check_leaves_nothing_behind(
    tmp_path: Path, encoder: FrozenEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A negative tolerance is one no export can meet: the check must fail and clean up.
    monkeypatch.setattr(export, "ONNX_TOLERANCE", -1.0)
    with pytest.raises(FractalError, match="embedding differs from torch"):
        export_identity_bundle(tmp_path / "bundle", encoder, check_texts=["what is my balance"])
    assert list(tmp_path.iterdir()) == []


def _router(fine_labels: int) -> RouterPolicy:
    """A hand-made router.json policy for ``fine_labels`` intents (for the refusals)."""
    return RouterPolicy(
        features=("fine_max",), mean=(0.5,), scale=(1.0,), weights=(-1.0,), bias=0.0,
        threshold=0.5, fine_parents=tuple(i % 10 for i in range(fine_labels)),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prefix_dims": [64, 128]}, "prefix_dims must end at dim=256"),
        ({"granularity": {"coarse": 32, "fine": 256}}, r"granularity\['coarse'\] = 32"),
        ({"objective": "unknown"}, "objective 'unknown' is not one of"),
        ({"hierarchy": None}, "needs the hierarchy"),
        ({"check_texts": []}, "check_texts must be a non-empty list"),
        ({"report_files": {"../x.json": Path("x.json")}}, "must be a plain file name"),
        ({"report_files": {"report.md": Path("/nowhere/report.md")}}, "report file not found"),
        ({"report_files": {"heads.onnx": Path("x")}}, "is reserved for the bundle"),
        ({"shortlist": _shortlist(full_dim=384)}, "measured on 384-d vectors"),
        ({"report_files": {"router.json": Path("x")}}, "is reserved for the bundle"),
        ({"router": _router(149)}, "has parents for 149 fine labels, the hierarchy 150"),
        ({"router": _router(150), "with_heads": False}, "router.json routes with heads.onnx"),
    ],
)
def test_inconsistent_arguments_are_refused(
    tmp_path: Path,
    encoder: FrozenEncoder,
    head: FractalHead,
    clinc: DatasetSplits,
    change: dict,
    message: str,
) -> None:
    arguments = {
        "name": "bad",
        "objective": "v5",
        "prefix_dims": PREFIX_DIMS,
        "granularity": GRANULARITY,
        "hierarchy": clinc.hierarchy,
        "evaluation": {},
        "report_files": None,
        "check_texts": ["hello"],
    }
    with pytest.raises(FractalError, match=message):
        export_bundle(tmp_path / "bundle", encoder, head, **{**arguments, **change})
    assert list(tmp_path.iterdir()) == []


def test_head_must_match_the_hierarchy(
    tmp_path: Path, encoder: FrozenEncoder, clinc: DatasetSplits
) -> None:
    wrong = FractalHead(384, [10, 149], dim=256)
    with pytest.raises(FractalError, match=r"classifier sizes \[10, 149\] do not match"):
        export_bundle(
            tmp_path / "bundle",
            encoder,
            wrong,
            name="bad",
            objective="v5",
            prefix_dims=PREFIX_DIMS,
            granularity=GRANULARITY,
            hierarchy=clinc.hierarchy,
            evaluation={},
            report_files=None,
            check_texts=["hello"],
        )
