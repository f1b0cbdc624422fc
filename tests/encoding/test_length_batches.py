"""Batches by token count (:mod:`encoding.length_batches`), and the encoder cutting one call into
sub-batches by its token budget with the vectors of the uncut call."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bundle import load_bundle
from encoding.encoder import OnnxEncoder
from encoding.length_batches import nearest_batch, padded_tokens, token_batches
from tests.encoding.recording import recorded


def test_token_batches_sort_by_length_within_the_budget() -> None:
    lengths = np.array([5, 30, 3, 10, 40, 4])
    batches = token_batches(lengths, budget=40)
    assert [list(batch) for batch in batches] == [[2, 5, 0, 3], [1], [4]]
    assert all(padded_tokens(list(lengths[batch])) <= 40 for batch in batches)
    assert list(np.concatenate(batches)) == list(np.argsort(lengths, kind="stable"))


def test_padded_tokens_is_size_times_longest() -> None:
    assert padded_tokens([3, 9, 4]) == 27
    assert padded_tokens([]) == 0


def test_nearest_batch_takes_the_oldest_and_the_closest_in_length() -> None:
    # The oldest is long: the other long ones join it, not the short ones in between.
    assert nearest_batch([50, 11, 48, 12, 55, 10], max_texts=3, budget=10_000) == [0, 2, 4]
    # Among equally close texts the older go first.
    assert nearest_batch([20, 21, 19, 21, 19], max_texts=3, budget=10_000) == [0, 1, 2]


def test_nearest_batch_always_holds_the_oldest_even_over_the_budget() -> None:
    assert nearest_batch([300, 10, 10], max_texts=8, budget=256) == [0]
    assert nearest_batch([7], max_texts=8, budget=1) == [0]


def test_nearest_batch_stays_within_the_budget_and_max_texts() -> None:
    lengths = [20, 40, 21, 19, 22, 18, 60]
    chosen = nearest_batch(lengths, max_texts=8, budget=100)
    assert chosen == [0, 2, 3, 4]  # 4 × 22 ≤ 100; a fifth (18) would make 5 × 22 > 100
    assert padded_tokens([lengths[p] for p in chosen]) <= 100
    assert nearest_batch(lengths, max_texts=2, budget=10_000) == [0, 2]


def test_nearest_batch_skips_a_text_over_the_budget_for_a_farther_one_within_it() -> None:
    # 30 is closer to 20 than 9 is, but 2 × 30 > 50; 2 × 20 fits.
    assert nearest_batch([20, 30, 9], max_texts=8, budget=50) == [0, 2]


TEXTS = [
    "what is my balance",
    "a much longer text about a trip to the mountains with friends, where it rained for three "
    "days and nobody had brought a tent, so we slept in the car and drank cold coffee",
    "freeze my card",
    "set a timer for ten minutes",
    "another long one: the quarterly report says that revenue grew while costs fell, and the "
    "board would like a summary of the reasons before the meeting on thursday morning",
    "hi",
]


def test_the_encoder_splits_a_call_by_its_token_budget_with_the_same_vectors(
    identity_bundle_dir: Path,
) -> None:
    manifest = load_bundle(identity_bundle_dir)
    whole = OnnxEncoder(identity_bundle_dir, manifest, threads=1, batch_tokens=100_000)
    split = OnnxEncoder(identity_bundle_dir, manifest, threads=1, batch_tokens=96)
    recording = recorded(split)

    expected = whole.encode(TEXTS)
    encoded = split.encode(TEXTS)

    np.testing.assert_array_equal(encoded.tokens, expected.tokens)
    np.testing.assert_allclose(encoded.vectors, expected.vectors, rtol=0, atol=1e-5)
    lengths = sorted(expected.tokens.tolist())
    assert len(recording.shapes) > 1  # cut, and every part within the budget or a lone text
    assert all(rows * longest <= 96 or rows == 1 for rows, longest in recording.shapes)
    assert sum(rows for rows, _ in recording.shapes) == len(TEXTS)
    # Each part is padded to its own longest text: the shortest part is not padded to the
    # longest text of the call.
    assert recording.shapes[0][1] < lengths[-1]
    longest_per_part = [longest for _, longest in recording.shapes]
    assert longest_per_part == sorted(longest_per_part)


def test_the_encoder_takes_token_ids_in_sub_batches_in_the_callers_order(
    identity_bundle_dir: Path,
) -> None:
    manifest = load_bundle(identity_bundle_dir)
    encoder = OnnxEncoder(identity_bundle_dir, manifest, threads=1, batch_tokens=64)
    token_ids = encoder.token_ids(TEXTS)
    by_ids = encoder.encode(token_ids)
    one_by_one = np.stack([encoder.encode([text]).vectors[0] for text in TEXTS])
    np.testing.assert_allclose(by_ids.vectors, one_by_one, rtol=0, atol=1e-5)
    assert by_ids.tokens.tolist() == [len(ids) for ids in token_ids]


def test_the_encoder_refuses_an_empty_budget(tiny_bundle_dir: Path) -> None:
    with pytest.raises(ValueError, match="batch_tokens must be at least 1"):
        OnnxEncoder(tiny_bundle_dir, load_bundle(tiny_bundle_dir), 1, batch_tokens=0)
