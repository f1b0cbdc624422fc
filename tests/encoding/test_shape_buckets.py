"""Encoder calls padded to a few shapes on OpenVINO (``encoding.shape_buckets``): the rule, and
that the padding changes no vector and never reaches ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bundle import load_bundle
from encoding.encoder import OnnxEncoder
from encoding.shape_buckets import bucketed_shape
from tests.encoding.recording import recorded

TEXTS = [
    "a",
    "book a table for two at the italian place on friday evening",
    "what is my balance",
    "play some jazz music please",
    "how many vacation days do i have left this year, and can i carry them over",
]


@pytest.mark.parametrize(
    ("rows", "padded"), [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 9), (17, 17), (32, 32)]
)
def test_up_to_eight_rows_go_to_a_power_of_two(rows: int, padded: int) -> None:
    assert bucketed_shape(rows, 10, 128)[0] == padded


@pytest.mark.parametrize(
    ("longest", "max_tokens", "length"),
    [(1, 128, 16), (16, 128, 16), (17, 128, 32), (120, 128, 128), (245, 250, 250), (500, 256, 500)],
)
def test_lengths_go_to_multiples_of_sixteen_within_the_backbone(
    longest: int, max_tokens: int, length: int
) -> None:
    assert bucketed_shape(1, longest, max_tokens)[1] == length


def test_a_large_call_keeps_its_exact_shape() -> None:
    assert bucketed_shape(17, 30, 128) == (17, 32)  # 510 padded tokens: bucketed
    assert bucketed_shape(18, 30, 128) == (18, 30)  # 540: exact
    assert bucketed_shape(30, 70, 256) == (30, 70)


def test_an_empty_call_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one row"):
        bucketed_shape(0, 5, 128)
    with pytest.raises(ValueError, match="at least one row"):
        bucketed_shape(3, 0, 128)


def test_openvino_calls_are_bucketed_and_the_vectors_unchanged(tiny_bundle_dir: Path) -> None:
    manifest = load_bundle(tiny_bundle_dir)
    exact = OnnxEncoder(tiny_bundle_dir, manifest, 1, runtime="openvino", shape_buckets=False)
    bucketed = OnnxEncoder(tiny_bundle_dir, manifest, 1, runtime="openvino")
    assert bucketed.shape_buckets and not exact.shape_buckets
    exact_calls, bucketed_calls = recorded(exact), recorded(bucketed)
    longest = []
    for batch in (TEXTS[:1], TEXTS[:3], TEXTS):
        want, got = exact.encode(batch), bucketed.encode(batch)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_allclose(got.vectors, want.vectors, rtol=1e-5, atol=1e-6)
        longest.append(int(want.tokens.max()))
    assert exact_calls.shapes == [(1, longest[0]), (3, longest[1]), (5, longest[2])]
    assert bucketed_calls.shapes == [
        bucketed_shape(rows, most, manifest.backbone.max_tokens)
        for rows, most in zip((1, 3, 5), longest, strict=True)
    ]
    assert all(rows in (1, 4, 8) and length % 16 == 0 for rows, length in bucketed_calls.shapes)


def test_onnx_runtime_calls_keep_their_exact_shape(tiny_bundle_dir: Path) -> None:
    manifest = load_bundle(tiny_bundle_dir)
    encoder = OnnxEncoder(tiny_bundle_dir, manifest, 1, runtime="onnxruntime")
    assert not encoder.shape_buckets
    calls = recorded(encoder)
    encoded = encoder.encode(TEXTS[:3])
    assert calls.shapes == [(3, int(encoded.tokens.max()))]
