"""A tiny, valid bundle made without torch: for tests that need *a* bundle, not a trained one.

It is shaped like the identity bundle of MiniLM (objective ``identity``, no heads, 384-d, prefixes
64 … 384, coarse 64, fine 384), so that a test can serve either. Its parts:

- ``tokenizer.json``: a BERT-style WordPiece tokenizer over single characters (lower-cased, accents
  stripped, ``[CLS] … [SEP]`` around every text), so any text has tokens and different texts
  different ones;
- ``encoder.onnx``: token embeddings → mean over the attention mask → a fixed projection, with
  weights drawn from a seeded generator, written with ``onnx.helper``;
- ``manifest.json``: written and checked by the bundle package (:func:`bundle.write_manifest`,
  :func:`bundle.load_bundle`);
- with ``heads=True``: ``heads.onnx`` (embedding → coarse and fine logits, two fixed seeded
  linear maps) over a 3-domain, 6-intent hierarchy (:data:`TINY_HIERARCHY`), objective ``v5``;
  and with a ``router`` policy, its ``router.json``.

:func:`add_fixed_heads` gives a tiny bundle a ``heads.onnx`` whose heads pick the same labels
for every text, and the label hierarchy they name, for tests of what ``granularity=auto`` reports.

The same seed gives the same files, hence the same bundle hash.
"""

from __future__ import annotations

import string
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

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
    SHORTLIST,
    TOKENIZER_FILE,
    Backbone,
    HierarchyLevel,
    Manifest,
    load_bundle,
    write_manifest,
)
from bundle.router import ROUTER_FILE, RouterPolicy, write_router

NAME = "tiny"
DIM = 384
PREFIX_DIMS = (64, 128, 192, 256, 384)
MAX_TOKENS = 128
SEED = 13
ONNX_OPSET = 17
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
CHARACTERS = string.ascii_lowercase + string.digits + string.punctuation
TINY_HIERARCHY = (
    HierarchyLevel("domain", ("banking", "travel", "utility")),
    HierarchyLevel("intent", ("balance", "transfer", "book_flight", "lost_luggage", "alarm",
                              "timer")),
)  # fmt: skip
TINY_FINE_PARENTS = (0, 0, 1, 1, 2, 2)
"""The coarse parent of every intent of :data:`TINY_HIERARCHY`."""


def _vocabulary() -> dict[str, int]:
    """Special tokens, every character as a word start and as a continuation (``##c``)."""
    tokens = [*SPECIAL_TOKENS, *CHARACTERS, *(f"##{c}" for c in CHARACTERS)]
    return {token: position for position, token in enumerate(tokens)}


def tiny_tokenizer() -> Tokenizer:
    """The bundle's tokenizer, truncating at ``MAX_TOKENS`` and padding to a batch's longest."""
    vocabulary = _vocabulary()
    tokenizer = Tokenizer(models.WordPiece(vocabulary, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", vocabulary["[CLS]"]), ("[SEP]", vocabulary["[SEP]"])],
    )
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.enable_padding(pad_id=vocabulary["[PAD]"], pad_token="[PAD]")
    return tokenizer


def tiny_encoder(vocabulary_size: int, seed: int = SEED) -> onnx.ModelProto:
    """input_ids + attention_mask (int64, [batch, sequence]) → embedding (float32, [batch, DIM]):
    embedding lookup, mean over the real tokens, then a fixed projection."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((vocabulary_size, DIM)).astype(np.float32)
    projection = (rng.standard_normal((DIM, DIM)) / np.sqrt(DIM)).astype(np.float32)
    batch_and_sequence = ["batch", "sequence"]
    nodes = [
        helper.make_node("Gather", ["table", INPUT_IDS], ["tokens"]),
        helper.make_node("Cast", [ATTENTION_MASK], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "last_axis"], ["mask_column"]),
        helper.make_node("Mul", ["tokens", "mask_column"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "sequence_axis"], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["mask", "sequence_axis"], ["counts"], keepdims=1),
        helper.make_node("Max", ["counts", "one"], ["divisor"]),
        helper.make_node("Div", ["summed", "divisor"], ["pooled"]),
        helper.make_node("MatMul", ["pooled", "projection"], [EMBEDDING]),
    ]
    initializers = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(projection, "projection"),
        numpy_helper.from_array(np.array([2], np.int64), "last_axis"),
        numpy_helper.from_array(np.array([1], np.int64), "sequence_axis"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_encoder",
        [
            helper.make_tensor_value_info(INPUT_IDS, TensorProto.INT64, batch_and_sequence),
            helper.make_tensor_value_info(ATTENTION_MASK, TensorProto.INT64, batch_and_sequence),
        ],
        [helper.make_tensor_value_info(EMBEDDING, TensorProto.FLOAT, ["batch", DIM])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    onnx.checker.check_model(model, full_check=True)
    return model


def linear_heads(maps: dict[str, tuple[np.ndarray, np.ndarray]]) -> onnx.ModelProto:
    """``heads.onnx``'s shape: embedding (float32, [batch, DIM]) → ``embedding @ weight + bias``
    for each output name in ``maps`` (name → (weight [DIM, width], bias [width]))."""
    initializers, nodes, outputs = [], [], []
    for name, (weight, bias) in maps.items():
        initializers += [
            numpy_helper.from_array(weight.astype(np.float32), f"{name}_weight"),
            numpy_helper.from_array(bias.astype(np.float32), f"{name}_bias"),
        ]
        nodes += [
            helper.make_node("MatMul", [EMBEDDING, f"{name}_weight"], [f"{name}_product"]),
            helper.make_node("Add", [f"{name}_product", f"{name}_bias"], [name]),
        ]
        width = len(bias)
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", width]))
    graph = helper.make_graph(
        nodes,
        "tiny_heads",
        [helper.make_tensor_value_info(EMBEDDING, TensorProto.FLOAT, ["batch", DIM])],
        outputs,
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    onnx.checker.check_model(model, full_check=True)
    return model


def tiny_heads(seed: int = SEED) -> onnx.ModelProto:
    """coarse_logits [batch, 3] and fine_logits [batch, 6] of :data:`TINY_HIERARCHY`: two fixed
    seeded linear maps (shaped like ``heads.onnx``, not trained)."""
    rng = np.random.default_rng(seed + 1)
    coarse, fine = TINY_HIERARCHY
    return linear_heads({
        output: (rng.standard_normal((DIM, size)) * 0.2, np.zeros(size))
        for output, size in ((COARSE_LOGITS, len(coarse.labels)), (FINE_LOGITS, len(fine.labels)))
    })  # fmt: skip


def build_tiny_bundle(
    out_dir: Path,
    *,
    shortlist_dim: int | None = None,
    heads: bool = False,
    router: RouterPolicy | None = None,
    evaluation: dict | None = None,
) -> Manifest:
    """Write the tiny bundle to ``out_dir`` (created, or an empty folder) and return its
    manifest, read back and verified as the service reads it. ``shortlist_dim`` records a C2F
    shortlist prefix in the granularity map, as a measured export does (default: none, so C2F
    shortlists at the coarse prefix); ``heads`` adds ``heads.onnx`` and the hierarchy, ``router``
    (with ``heads``) a ``router.json``; ``evaluation`` is the manifest's measurements."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_tokenizer()
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    onnx.save(tiny_encoder(tokenizer.get_vocab_size()), out_dir / ENCODER_FILE)
    granularity = {COARSE: PREFIX_DIMS[0], FINE: PREFIX_DIMS[-1]}
    if shortlist_dim is not None:
        granularity[SHORTLIST] = shortlist_dim
    if heads:
        onnx.save(tiny_heads(), out_dir / HEADS_FILE)
    if router is not None:
        write_router(out_dir / ROUTER_FILE, router)
    write_manifest(
        out_dir,
        Manifest(
            name=NAME,
            objective="v5" if heads else "identity",
            backbone=Backbone(
                source="tests/tiny_bundle.py",
                pooling="mean",
                max_tokens=MAX_TOKENS,
                hidden_size=DIM,
                fingerprint=f"seed-{SEED}",
            ),
            dim=DIM,
            prefix_dims=PREFIX_DIMS,
            granularity=granularity,
            hierarchy=TINY_HIERARCHY if heads else None,
            evaluation=evaluation or {},
            onnx_max_abs_diff=0.0,
            created_at="2024-01-01T00:00:00+00:00",
        ),
    )
    return load_bundle(out_dir)


def fixed_heads(
    num_coarse: int, num_fine: int, coarse_choice: int, fine_choice: int
) -> onnx.ModelProto:
    """coarse_logits [batch, num_coarse] and fine_logits [batch, num_fine] that ignore the
    embedding: 20 for the chosen label, 0 for the others, so the heads pick ``coarse_choice`` and
    ``fine_choice`` with softmax > 0.99 for every text."""
    maps = {}
    for name, width, choice in (
        (COARSE_LOGITS, num_coarse, coarse_choice),
        (FINE_LOGITS, num_fine, fine_choice),
    ):
        bias = np.zeros(width)
        bias[choice] = 20.0
        maps[name] = (np.zeros((DIM, width)), bias)
    return linear_heads(maps)


def add_fixed_heads(
    bundle_dir: Path, hierarchy: tuple[HierarchyLevel, ...], coarse_choice: int, fine_choice: int
) -> Manifest:
    """Add :func:`fixed_heads` (over the first and last level of ``hierarchy``) to the tiny
    bundle in ``bundle_dir``, record ``hierarchy`` in its manifest, and return it as read back."""
    heads = fixed_heads(
        len(hierarchy[0].labels), len(hierarchy[-1].labels), coarse_choice, fine_choice
    )
    onnx.save(heads, bundle_dir / HEADS_FILE)
    write_manifest(bundle_dir, replace(load_bundle(bundle_dir), hierarchy=hierarchy))
    return load_bundle(bundle_dir)
