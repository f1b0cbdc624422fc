"""The encoder's batch cost, fitted online: both parts recovered from batches of mixed sizes, a
queue priced as the batches it takes, and the cautious mean while sizes are alike or the fit
is nonsense."""

from __future__ import annotations

import numpy as np
import pytest

from service.batch_cost import BatchCost

FIXED = 0.002
PER_TEXT = 0.0005


def _fed(sizes: list[int], noise: float = 0.0) -> BatchCost:
    cost = BatchCost()
    rng = np.random.default_rng(0)
    for size in sizes:
        cost.observe(size, FIXED + PER_TEXT * size + noise * float(rng.standard_normal()))
    return cost


def test_nothing_measured_is_no_estimate() -> None:
    cost = BatchCost()
    assert cost.parts() is None and cost.wait_s(10, 1, 32) is None
    with pytest.raises(ValueError, match="at least one text"):
        cost.observe(0, 0.1)


def test_mixed_batch_sizes_give_both_parts_and_a_queue_is_priced_in_batches() -> None:
    cost = _fed([1, 2, 1, 8, 32, 3, 1, 16, 32, 5] * 5)
    parts = cost.parts()
    assert parts is not None
    assert parts == pytest.approx((FIXED, PER_TEXT), rel=1e-6)
    # 64 queued texts are two full batches after the one being encoded (4 texts).
    expected = 3 * FIXED + (64 + 4) * PER_TEXT
    assert cost.wait_s(64, 4, 32) == pytest.approx(expected, rel=1e-6)
    assert cost.wait_s(0, 0, 32) == 0.0
    # The per-text mean would price the same queue at several times that: what over-sheds.
    mean_per_text = FIXED + PER_TEXT  # a lightly loaded queue's batches of one
    assert (64 + 4) * mean_per_text > 4 * expected


def test_noisy_timings_still_fit_within_a_few_percent() -> None:
    cost = _fed([1, 4, 2, 32, 8, 16, 1, 24] * 20, noise=0.0001)
    parts = cost.parts()
    assert parts is not None
    assert parts[0] == pytest.approx(FIXED, rel=0.1)
    assert parts[1] == pytest.approx(PER_TEXT, rel=0.1)


def test_alike_sizes_are_priced_at_the_mean_per_text() -> None:
    cost = _fed([4] * 10)
    assert cost.parts() == pytest.approx((0.0, (FIXED + 4 * PER_TEXT) / 4))
    assert cost.wait_s(12, 4, 32) == pytest.approx(16 * (FIXED + 4 * PER_TEXT) / 4)


def test_a_fit_where_bigger_batches_are_faster_falls_back_to_the_mean() -> None:
    cost = BatchCost()
    for size, seconds in [(1, 0.010), (32, 0.002)] * 5:
        cost.observe(size, seconds)
    fixed, per_text = cost.parts() or (None, None)
    assert fixed == 0.0 and per_text is not None and per_text > 0
