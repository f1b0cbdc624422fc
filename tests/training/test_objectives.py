"""Objectives: schedules, the SupCon and discard terms and the full loss against hand values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bundle.objectives import FINETUNE_OBJECTIVES
from training.finetune import ABLATABLE
from training.head import FractalHead
from training.objectives import FINETUNE_LOSSES, OBJECTIVES
from training.objectives.base import FineSpread, interpolated_schedule, supervised_contrastive
from training.objectives.inverted import inverted_schedule
from training.objectives.mrl import mrl_schedule
from training.objectives.no_prefix import no_prefix_schedule
from training.objectives.uhmt import uhmt_schedule
from training.objectives.v5 import v5_schedule
from training.train_config import HEAD_OBJECTIVES


def test_the_torch_free_objective_names_are_the_losses_names() -> None:
    assert tuple(OBJECTIVES) == HEAD_OBJECTIVES


def test_the_finetune_losses_are_the_tables_finetune_objectives() -> None:
    assert tuple(FINETUNE_LOSSES) == FINETUNE_OBJECTIVES
    assert ABLATABLE == {"mic": ("scr", "sir"), "mipic": ("sia", "pic")}
    reading_states = {name for name, loss in FINETUNE_LOSSES.items() if loss.reads_token_states}
    assert reading_states == {"mic", "mipic"}


def test_v5_schedule_is_the_papers_alphas_for_two_levels() -> None:
    np.testing.assert_allclose(v5_schedule(4, 2), [[1, 0], [0.7, 0.3], [0.3, 0.7], [0, 1]])


def test_three_level_schedule_moves_from_coarsest_to_finest() -> None:
    np.testing.assert_allclose(
        v5_schedule(4, 3), [[1, 0, 0], [0.4, 0.6, 0], [0, 0.6, 0.4], [0, 0, 1]]
    )
    np.testing.assert_allclose(interpolated_schedule([1.0, 0.5, 0.0], 3), np.eye(3))


def test_ablation_schedules() -> None:
    np.testing.assert_allclose(inverted_schedule(4, 2), v5_schedule(4, 2)[::-1])
    np.testing.assert_allclose(mrl_schedule(4, 2), [[0, 1]] * 4)
    np.testing.assert_allclose(uhmt_schedule(4, 2), [[0.5, 0.5]] * 4)
    np.testing.assert_allclose(no_prefix_schedule(4, 2), [[0.3, 0.7]] * 4)
    for schedule in OBJECTIVES.values():
        np.testing.assert_allclose(schedule.make_schedule(4, 3).sum(axis=1), 1.0)


def test_supervised_contrastive_matches_hand_value() -> None:
    # Three unit vectors: a and b share a label, c is alone (no positive: not an anchor).
    vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    labels = torch.tensor([0, 0, 1])
    t = 0.5
    # Anchor a: sims to b = 0, to c = -1; anchor b: sims to a = 0, to c = 0.
    loss_a = -(0 / t - math.log(math.exp(0 / t) + math.exp(-1 / t)))
    loss_b = -(0 / t - math.log(math.exp(0 / t) + math.exp(0 / t)))
    expected = (loss_a + loss_b) / 2
    assert supervised_contrastive(vectors, labels, t).item() == pytest.approx(expected, rel=1e-6)
    assert supervised_contrastive(vectors, torch.tensor([0, 1, 2]), t).item() == 0.0


def test_fine_spread_ratio_matches_hand_value() -> None:
    # 1-d features, two coarse classes each with two fine labels (one row per fine label).
    features = torch.tensor([[1.0], [3.0], [10.0], [14.0]])
    labels = torch.tensor([[0, 0], [0, 1], [1, 2], [1, 3]])
    spread = FineSpread.from_data(features, labels)
    # Fine means around parent means: (1-2, 3-2, 10-12, 14-12) → (1+1+4+4)/4 = 2.5.
    # Parent means (2, 12) around the global mean 7: (25+25)/2 = 25.
    assert spread.fine_within[0].item() == pytest.approx(2.5)
    assert spread.between[0].item() == pytest.approx(25.0)
    rows = torch.tensor([[2.0]])
    assert spread.ratio(rows, 0).item() == pytest.approx(2.5 / 25.0)


def _tiny_loss(objective: str, **kwargs):
    torch.manual_seed(0)
    head = FractalHead(input_dim=6, num_classes=[2, 4], dim=4, logit_scale=1.0)
    loss = OBJECTIVES[objective](
        head, [2, 4], prefix_probs=(1.0, 0.0), block_keep=(1.0, 1.0), prefix_weight=0.6, **kwargs
    )
    return head, loss


def test_v5_loss_equals_hand_computed_cross_entropies() -> None:
    head, loss_fn = _tiny_loss("v5")
    features = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([[0, 1], [1, 2], [1, 3]])
    # prefix_probs (1, 0): the sampled prefix is always the 2-d one, trained on the coarse level.
    value = loss_fn(features, labels, np.random.default_rng(0))
    e = head(features)
    w_coarse = torch.nn.functional.normalize(head.classifiers[0].weight, dim=-1)
    w_fine = torch.nn.functional.normalize(head.classifiers[1].weight, dim=-1)
    prefix = torch.nn.functional.normalize(e[:, :2], dim=-1)
    full = torch.nn.functional.normalize(e, dim=-1)
    coarse_logits = prefix @ w_coarse[:, :2].T
    fine_logits = full @ w_fine.T
    expected = torch.nn.functional.cross_entropy(fine_logits, labels[:, 1]) + 0.6 * (
        torch.nn.functional.cross_entropy(coarse_logits, labels[:, 0])
    )
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)


def test_discard_term_applies_to_the_coarse_only_prefix_of_v5_not_to_mrl() -> None:
    features = torch.randn(8, 6, generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([[0, 0], [0, 1], [1, 2], [1, 3]] * 2)
    spread = FineSpread.from_data(features, labels)
    head, v5 = _tiny_loss("v5", discard_weight=1.0, fine_spread=spread)
    assert v5.discarding == [(2, 0)]
    assert v5.discard_loss().item() == pytest.approx(
        spread.ratio(head.projection.weight[:2], 0).item()
    )
    _, inverted = _tiny_loss("inverted", discard_weight=1.0, fine_spread=spread)
    assert inverted.discarding == [(4, 0)]
    _, mrl = _tiny_loss("mrl", discard_weight=1.0, fine_spread=spread)
    assert mrl.discarding == []


def test_block_dropout_zeroes_whole_blocks() -> None:
    head = FractalHead(input_dim=3, num_classes=[2, 3], dim=4)
    loss = OBJECTIVES["v5"](head, [2, 4], prefix_probs=(0.5, 0.5), block_keep=(1.0, 0.0))
    out = loss.block_dropout(torch.ones(5, 4))
    np.testing.assert_array_equal(out.numpy(), [[1, 1, 0, 0]] * 5)
