"""Export a frozen encoder (+ trained head) as a bundle: ONNX graphs, tokenizer, report, manifest.

``encoder.onnx`` fuses backbone, pooling and the head's projection into one graph, so the service
needs nothing but ONNX Runtime and ``tokenizers``. The graphs come from the TorchScript exporter
(``torch.onnx.export(..., dynamo=False)``): for MiniLM it takes about a second and writes one
self-contained file, where the torch.export-based exporter took several times longer and wrote the
weights to a separate ``.data`` file. Whatever the exporter, the bundle is only written after the
ONNX graph, fed by the saved tokenizer alone, reproduces torch on the caller's ``check_texts``.
"""

from __future__ import annotations

import copy
import shutil
import warnings
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import nn

from bundle import (
    ATTENTION_MASK,
    COARSE,
    COARSE_LOGITS,
    EMBEDDING,
    ENCODER_FILE,
    FINE,
    FINE_LOGITS,
    HEADS_FILE,
    INPUT_IDS,
    MANIFEST_FILE,
    REPORT_MD_FILE,
    SHORTLIST,
    TOKENIZER_FILE,
    Backbone,
    BundleError,
    Compression,
    Manifest,
    check_out_dir,
    install_bundle,
    staging_dir,
)
from bundle.router import ROUTER_FILE, RouterPolicy, write_router
from training.bundle_embeddings import cpu_session, onnx_embeddings, tokenize_batch
from training.data.dataset import LabelHierarchy
from training.errors import FractalError, bundle_errors_as_fractal
from training.evaluation.shortlist import ShortlistMeasurement
from training.frozen_encoder import FrozenEncoder
from training.head import FractalHead
from training.objectives.tensors import pool

ONNX_OPSET = 17
# Largest |ONNX − torch| allowed on any embedding coordinate (or logit) of the check texts. Both run
# float32 on the same weights, so only kernel order differs: MiniLM shows ~1e-6. A wrong tokenizer,
# pooling or traced-in shape shows 1e-2 or more.
ONNX_TOLERANCE = 1e-3
# The identity bundle serves the backbone's own prefixes: those a trained bundle has too
# (multiples of 64 up to 256) that are shorter than the hidden size, then the full hidden size.
IDENTITY_PREFIX_STEP = 64
IDENTITY_PREFIX_LIMIT = 256


class _FusedEncoder(nn.Module):
    """Token ids + mask → transformer → pooling → projection (if any): the served embedding."""

    def __init__(self, encoder: FrozenEncoder, projection: nn.Module | None) -> None:
        super().__init__()
        self.backbone = encoder.model
        self.pooling = encoder.config.pooling
        self.projection = projection if projection is not None else nn.Identity()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.projection(pool(hidden, attention_mask, self.pooling))


class _Heads(nn.Module):
    """Embedding → (coarsest level's logits from the coarse prefix, finest level's from all)."""

    def __init__(self, head: FractalHead, coarse_dim: int) -> None:
        super().__init__()
        self.head = head
        self.coarse_dim = coarse_dim

    def forward(self, embedding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        fine_level = len(self.head.classifiers) - 1
        return (
            self.head.logits(embedding, 0, self.coarse_dim),
            self.head.logits(embedding, fine_level, self.head.dim),
        )


def _save_tokenizer(encoder: FrozenEncoder, path: Path) -> Tokenizer:
    """The encoder's Rust tokenizer, truncating at max_tokens and padding to a batch's longest."""
    hf_tokenizer = encoder.tokenizer
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise FractalError(
            f"the encoder {encoder.config.source} has no fast (Rust) tokenizer to put in a bundle"
        )
    tokenizer = Tokenizer.from_str(backend.to_str())
    tokenizer.enable_truncation(
        max_length=encoder.config.max_tokens, direction=hf_tokenizer.truncation_side
    )
    tokenizer.enable_padding(
        direction=hf_tokenizer.padding_side,
        pad_id=hf_tokenizer.pad_token_id,
        pad_token=hf_tokenizer.pad_token,
    )
    tokenizer.save(str(path))
    return Tokenizer.from_file(str(path))


def export_onnx(
    module: nn.Module,
    args: tuple[torch.Tensor, ...],
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
) -> None:
    """Trace ``module`` (in eval mode) on ``args`` into the ONNX graph ``path`` (TorchScript
    exporter, opset :data:`ONNX_OPSET`); axes named in ``dynamic_axes`` stay free."""
    with warnings.catch_warnings():
        # The tracer warns about Python control flow in transformers' masking code and the
        # exporter about its own deprecation; the numerical check after export is what counts.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            args,
            str(path),
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            opset_version=ONNX_OPSET,
            dynamo=False,
        )


def _export_graphs(
    folder: Path,
    encoder: FrozenEncoder,
    head: FractalHead | None,
    tokenizer: Tokenizer,
    coarse_dim: int,
    with_heads: bool = True,
) -> None:
    device = encoder.device
    head_copy = copy.deepcopy(head).to(device).eval() if head is not None else None
    projection = head_copy.projection if head_copy is not None else None
    ids, mask = tokenize_batch(
        tokenizer, ["fractal", "a longer text, so that the batch has padding"]
    )
    example = (torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device))
    batch_and_seq = {0: "batch", 1: "sequence"}
    export_onnx(
        _FusedEncoder(encoder, projection),
        example,
        folder / ENCODER_FILE,
        [INPUT_IDS, ATTENTION_MASK],
        [EMBEDDING],
        {INPUT_IDS: batch_and_seq, ATTENTION_MASK: batch_and_seq, EMBEDDING: {0: "batch"}},
    )
    if head_copy is not None and with_heads:
        export_onnx(
            _Heads(head_copy, coarse_dim),
            (torch.zeros(2, head_copy.dim, device=device),),
            folder / HEADS_FILE,
            [EMBEDDING],
            [COARSE_LOGITS, FINE_LOGITS],
            {name: {0: "batch"} for name in (EMBEDDING, COARSE_LOGITS, FINE_LOGITS)},
        )


def max_abs_diff(name: str, onnx_values: np.ndarray, torch_values: np.ndarray) -> float:
    """The largest ``|ONNX − torch|`` of output ``name``; a :class:`FractalError` above
    :data:`ONNX_TOLERANCE`."""
    diff = float(np.abs(onnx_values - torch_values).max())
    if not diff <= ONNX_TOLERANCE:
        raise FractalError(
            f"ONNX export check failed: {name} differs from torch by {diff:.3g} "
            f"(tolerance {ONNX_TOLERANCE:g})"
        )
    return diff


def _check_against_torch(
    folder: Path,
    encoder: FrozenEncoder,
    head: FractalHead | None,
    coarse_dim: int,
    check_texts: list[str],
    with_heads: bool = True,
) -> float:
    """Run ``check_texts`` through tokenizer.json + ONNX and through torch; the largest difference.

    The tokenisation is compared exactly, the embeddings (and logits) within ``ONNX_TOLERANCE``.
    """
    tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    reference_ids = encoder.tokenizer(
        check_texts, truncation=True, max_length=encoder.config.max_tokens
    )["input_ids"]
    saved_ids = [
        [token for token, real in zip(e.ids, e.attention_mask, strict=True) if real]
        for e in tokenizer.encode_batch(check_texts)
    ]
    for text, expected, got in zip(check_texts, reference_ids, saved_ids, strict=True):
        if got != list(expected):
            raise FractalError(f"{TOKENIZER_FILE} tokenises {text[:60]!r} unlike the encoder")
    onnx_embedding = onnx_embeddings(folder, check_texts)
    features = torch.from_numpy(encoder.encode(check_texts, progress=False))
    if head is None:
        return max_abs_diff(EMBEDDING, onnx_embedding, features.numpy())
    cpu_head = copy.deepcopy(head).cpu().eval()
    with torch.inference_mode():
        embedding = cpu_head(features)
    diff = max_abs_diff(EMBEDDING, onnx_embedding, embedding.numpy())
    if not with_heads:
        return diff
    with torch.inference_mode():
        torch_logits = _Heads(cpu_head, coarse_dim)(embedding)
    logit_names = [COARSE_LOGITS, FINE_LOGITS]
    onnx_logits = cpu_session(folder / HEADS_FILE).run(logit_names, {EMBEDDING: embedding.numpy()})
    for name, got, expected in zip(logit_names, onnx_logits, torch_logits, strict=True):
        max_abs_diff(name, got, expected.numpy())
    return diff


def _check_arguments(
    out_dir: Path,
    encoder: FrozenEncoder,
    head: FractalHead | None,
    hierarchy: LabelHierarchy | None,
    report_files: dict[str, Path],
    overwrite: bool,
    check_texts: list[str],
    with_heads: bool = True,
    router: RouterPolicy | None = None,
) -> None:
    for file_name, source in report_files.items():
        if PurePosixPath(file_name).name != file_name or file_name in ("", ".", ".."):
            raise FractalError(f"report file name {file_name!r} must be a plain file name")
        if file_name in (ENCODER_FILE, HEADS_FILE, TOKENIZER_FILE, MANIFEST_FILE, ROUTER_FILE):
            raise FractalError(f"report file name {file_name!r} is reserved for the bundle")
        if not Path(source).is_file():
            raise FractalError(f"report file not found: {source}")
    with bundle_errors_as_fractal():
        check_out_dir(out_dir, overwrite)
    if not check_texts or not all(isinstance(t, str) and t.strip() for t in check_texts):
        raise FractalError("check_texts must be a non-empty list of non-empty texts")
    if head is None:
        return
    if head.input_dim != encoder.config.hidden_size:
        raise FractalError(
            f"head input_dim {head.input_dim} != encoder hidden size {encoder.config.hidden_size}"
        )
    if not with_heads:
        return
    if hierarchy is None:
        raise FractalError("a bundle with heads needs the hierarchy the heads were trained on")
    widths = [c.out_features for c in head.classifiers]
    expected = [hierarchy.num_classes(level) for level in range(hierarchy.depth)]
    if widths != expected:
        raise FractalError(f"head classifier sizes {widths} do not match the hierarchy {expected}")
    if router is not None and len(router.fine_parents) != expected[-1]:
        raise FractalError(
            f"{ROUTER_FILE} has parents for {len(router.fine_parents)} fine labels, the hierarchy "
            f"{expected[-1]}"
        )


def _write_shortlist_report(path: Path, shortlist: ShortlistMeasurement, name: str) -> None:
    """Append the "C2F shortlist" section to the bundle's ``report.md`` (started when the bundle
    ships none)."""
    before = path.read_text(encoding="utf-8").rstrip("\n") if path.is_file() else f"# {name}"
    path.write_text("\n".join([before, "", *shortlist.markdown()]) + "\n", encoding="utf-8")


def export_bundle(
    out_dir: Path,
    encoder: FrozenEncoder,
    head: FractalHead | None,
    *,
    name: str,
    objective: str,
    prefix_dims: list[int],
    granularity: dict[str, int],
    hierarchy: LabelHierarchy | None,
    evaluation: dict,
    report_files: dict[str, Path] | None,
    check_texts: list[str],
    fragment_dim: int | None = None,
    overwrite: bool = False,
    with_heads: bool = True,
    extra_files: dict[str, Path] | None = None,
    compression: Compression | None = None,
    shortlist: ShortlistMeasurement | None = None,
    router: RouterPolicy | None = None,
) -> Manifest:
    """Write the bundle for ``encoder`` (+ ``head``) to ``out_dir`` and return its manifest.

    With ``head`` the served embedding is ``head.projection`` of the pooled backbone vector and
    ``heads.onnx`` holds its coarse and fine classifiers; without it (``identity``) it is the
    pooled vector itself. ``report_files`` maps a file name in the bundle to the file to copy.
    ``with_heads=False`` serves the head's projection without ``heads.onnx`` (objectives trained
    without classifiers: MSHC, contrastive MRL, MIC, MIPIC, SFS);
    ``extra_files`` (copied like the report) and ``compression`` are an objective's extra parts,
    described in the manifest (see :mod:`bundle.format`). ``shortlist``, C2F's recall measured on
    the run's data (:func:`training.evaluation.shortlist.measure_shortlist`), becomes the
    manifest's ``granularity.shortlist`` and ``evaluation.shortlist``, and a section of
    ``report.md``. ``router`` is the ``granularity=auto``
    policy fitted for the heads (:mod:`training.router_fit`), written as ``router.json``.
    The bundle is built in a temporary directory beside ``out_dir`` and moved into place only once
    complete and verified; a non-empty ``out_dir`` is replaced only with ``overwrite=True``.
    Raises :class:`FractalError` for inconsistent arguments or a failed ONNX check.
    """
    out_dir = Path(out_dir)
    report_files = {**(report_files or {}), **(extra_files or {})}
    if router is not None and (head is None or not with_heads):
        raise FractalError(f"{ROUTER_FILE} routes with heads.onnx: a bundle without it has none")
    _check_arguments(
        out_dir, encoder, head, hierarchy, report_files, overwrite, check_texts, with_heads, router
    )
    dim = head.dim if head is not None else encoder.config.hidden_size
    granularity = dict(granularity)
    if shortlist is not None:
        if shortlist.full_dim != dim:
            raise FractalError(
                f"the shortlist was measured on {shortlist.full_dim}-d vectors, the bundle "
                f"serves {dim}-d ones"
            )
        granularity[SHORTLIST] = shortlist.shortlist_dim
        evaluation = {**evaluation, SHORTLIST: shortlist.to_json()}
    try:
        draft = Manifest(
            name=name,
            objective=objective,
            backbone=Backbone(**encoder.config.to_json()),
            dim=dim,
            prefix_dims=tuple(prefix_dims),
            granularity=granularity,
            fragment_dim=fragment_dim,
            compression=compression,
            hierarchy=None if hierarchy is None else hierarchy.manifest_levels(),
            evaluation=evaluation,
            onnx_max_abs_diff=0.0,
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
    except BundleError as exc:
        raise FractalError(f"cannot export bundle {name!r}: {exc}") from exc
    with staging_dir(out_dir) as staging:
        for file_name, source in report_files.items():
            shutil.copyfile(source, staging / file_name)
        if shortlist is not None:
            _write_shortlist_report(staging / REPORT_MD_FILE, shortlist, name)
        if router is not None:
            write_router(staging / ROUTER_FILE, router)
        tokenizer = _save_tokenizer(encoder, staging / TOKENIZER_FILE)
        _export_graphs(staging, encoder, head, tokenizer, draft.coarse_dim, with_heads)
        diff = _check_against_torch(
            staging, encoder, head, draft.coarse_dim, check_texts, with_heads
        )
        return install_bundle(staging, replace(draft, onnx_max_abs_diff=diff), out_dir)


def identity_prefix_dims(hidden_size: int) -> list[int]:
    """Multiples of 64 up to 256 that are below ``hidden_size``, then ``hidden_size`` itself."""
    trained = range(IDENTITY_PREFIX_STEP, IDENTITY_PREFIX_LIMIT + 1, IDENTITY_PREFIX_STEP)
    return [d for d in trained if d < hidden_size] + [hidden_size]


def export_identity_bundle(
    out_dir: Path,
    encoder: FrozenEncoder,
    *,
    check_texts: list[str],
    name: str = "identity",
    overwrite: bool = False,
) -> Manifest:
    """The raw encoder as a bundle: no head, prefixes of the pooled backbone vector.

    Coarse is the smallest prefix, fine the full hidden vector (MiniLM: 64 and 384).
    """
    prefix_dims = identity_prefix_dims(encoder.config.hidden_size)
    return export_bundle(
        out_dir,
        encoder,
        None,
        name=name,
        objective="identity",
        prefix_dims=prefix_dims,
        granularity={COARSE: prefix_dims[0], FINE: prefix_dims[-1]},
        hierarchy=None,
        evaluation={},
        report_files=None,
        check_texts=check_texts,
        overwrite=overwrite,
    )
