"""SFS, the Matryoshka contrastive loss, MIC and MIPIC against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from training.objectives.matryoshka_contrastive import MatryoshkaContrastiveLoss
from training.objectives.mic import MICLoss, soft_collapse, spectral_isotropy
from training.objectives.mipic import (
    MIPICLoss,
    checkpoint_layers,
    linear_cka,
    top_k_ratios,
)
from training.objectives.sfs import SFSLoss, fragment_normalize
from training.objectives.simcse import info_nce, simcse
from training.objectives.tensors import TokenStates


def test_fragment_similarity_is_the_mean_of_fragment_cosines() -> None:
    """``S_frag`` as :class:`SFSLoss` (and the index) compute it: the inner product of the
    fragment-normalised rows."""
    query = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    document = torch.tensor([[2.0, 0.0, 0.0, 3.0], [0.0, 1.0, 0.0, 1.0]])
    # Fragments of 2: cos([1,0],[2,0]) = 1, cos([0,1],[0,3]) = 1 → 1;
    # cos([1,0],[0,1]) = 0, cos([0,1],[0,1]) = 1 → 0.5.
    np.testing.assert_allclose(
        fragment_normalize(query, 2) @ fragment_normalize(document, 2).T, [[1.0, 0.5]], atol=1e-6
    )
    # One fragment is the global cosine: 5 / (√2·√13) and 1 / (√2·√2).
    np.testing.assert_allclose(
        fragment_normalize(query, 4) @ fragment_normalize(document, 4).T,
        [[5 / math.sqrt(26), 0.5]],
        atol=1e-6,
    )
    rng = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 12, generator=rng), torch.randn(5, 12, generator=rng)
    loops = torch.stack([
        torch.stack([
            torch.stack([
                torch.nn.functional.cosine_similarity(a[i, f:f + 3], b[j, f:f + 3], dim=0)
                for f in range(0, 12, 3)
            ]).mean() for j in range(5)
        ]) for i in range(3)
    ])
    np.testing.assert_allclose(
        fragment_normalize(a, 3) @ fragment_normalize(b, 3).T, loops, atol=1e-6
    )
    with pytest.raises(ValueError, match="divisor"):
        fragment_normalize(a, 5)


def test_sfs_loss_hand_value() -> None:
    # Fragment size 1 on 2-d vectors: S_frag = mean of the coordinate signs' products.
    embedding = torch.tensor([[1.0, 1.0], [2.0, 3.0], [-1.0, 1.0], [-1.0, -2.0]])
    labels = torch.tensor([0, 0, 1, 1])
    # S_frag matrix: rows 0,1 agree on both signs (1); 0–2 agree on one (0); 0–3 on none (−1);
    # 2–3 agree on one (0); 1–2 → 0; 1–3 → −1.
    s = [[1, 1, 0, -1], [1, 1, 0, -1], [0, 0, 1, 0], [-1, -1, 0, 1]]
    tau = 0.5

    def anchor_loss(i: int, positive: int) -> float:
        denominator = sum(math.exp(s[i][j] / tau) for j in range(4) if j != i)
        return -(s[i][positive] / tau - math.log(denominator))

    expected = np.mean([anchor_loss(0, 1), anchor_loss(1, 0), anchor_loss(2, 3), anchor_loss(3, 2)])
    got = SFSLoss(fragment_dim=1, temperature=tau)(embedding, labels)
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_matryoshka_contrastive_hand_value() -> None:
    embedding = torch.tensor([[1.0, 0.0], [2.0, 2.0], [-1.0, 0.0], [-3.0, 3.0]])
    labels = torch.tensor([0, 0, 1, 1])
    tau = 1.0
    # 1-d prefixes normalise to signs [1, 1, −1, −1]: each anchor has one positive (cos 1) and two
    # negatives (cos −1): −log(e / (e + 2e⁻¹)) for all four anchors.
    loss_1d = math.log(1 + 2 * math.exp(-2))
    # 2-d: unit vectors u0 = (1,0), u1 = (1,1)/√2, u2 = (−1,0), u3 = (−1,1)/√2.
    r = 1 / math.sqrt(2)
    cos = [[1, r, -1, -r], [r, 1, -r, 0], [-1, -r, 1, r], [-r, 0, r, 1]]
    pairs = {0: 1, 1: 0, 2: 3, 3: 2}
    loss_2d = np.mean([
        -(cos[i][p] - math.log(sum(math.exp(cos[i][j]) for j in range(4) if j != i)))
        for i, p in pairs.items()
    ])
    got = MatryoshkaContrastiveLoss([1, 2], temperature=tau)(embedding, labels)
    assert float(got) == pytest.approx((loss_1d + loss_2d) / 2, rel=1e-5)


def test_soft_collapse_hand_value_ignores_padding() -> None:
    # One sequence, three real tokens and one padding token with wild values; D = 2, d = 1.
    states = torch.tensor([[[1.0, 3.0], [2.0, 1.0], [3.0, 2.0], [100.0, -50.0]]])
    mask = torch.tensor([[1, 1, 1, 0]])
    # Prefix (1,2,3) and residual (3,1,2) both have mean 2 and std √(2/3); standardised:
    # x̃ = (−1.2247, 0, 1.2247), ỹ = (1.2247, −1.2247, 0); C = (1/3)(−1.5) = −0.5.
    std = math.sqrt(2 / 3)
    corr = (0.5 - 0.1) ** 2
    var = (1 - std) + 0.5 * (1 - std)
    got = soft_collapse(states, mask, 1, tau_corr=0.1, lambda_var=0.1)
    assert float(got) == pytest.approx(corr + 0.1 * var, rel=1e-4)


def test_spectral_isotropy_hand_value() -> None:
    pooled = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # Both dims have variance 2/9 → CV = 0. Cosines: 0, 1/√2, 1/√2; K = exp(−4(1 − cos)).
    kernel_mean = (2 * math.exp(-4) + 4 * math.exp(-4 * (1 - 1 / math.sqrt(2)))) / 6
    assert float(spectral_isotropy(pooled, t=2.0)) == pytest.approx(
        0.5 * math.log(kernel_mean), rel=1e-5
    )


def test_mic_loss_is_task_plus_gamma_times_mean_alignment() -> None:
    rng = torch.Generator().manual_seed(1)
    hidden = torch.randn(4, 5, 4, generator=rng)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    embedding = torch.randn(4, 4, generator=rng)
    labels = torch.tensor([0, 0, 1, 1])
    states = TokenStates(embedding, (hidden, hidden * 2.0), mask)
    loss = MICLoss([1, 2, 4], align_layers=[0, 1], gamma=0.6)
    m = mask[..., None].float()

    def pooled(x: torch.Tensor, d: int) -> torch.Tensor:
        return (x[..., :d] * m).sum(1) / m.sum(1)

    terms = [
        soft_collapse(x, mask, d) + spectral_isotropy(pooled(x, d))
        for x in (hidden, hidden * 2.0) for d in (1, 2)
    ]
    task = MatryoshkaContrastiveLoss([1, 2, 4])(embedding, labels)
    expected = task + 0.6 * torch.stack(terms).mean()
    assert float(loss(states, labels)) == pytest.approx(float(expected), rel=1e-6)


def test_linear_cka_matches_the_feature_space_formula() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 5))
    selected = np.array([1, 1, 0, 1, 1, 1], dtype=bool)

    def cka(a: np.ndarray, b: np.ndarray) -> float:  # Eq. 11 with d×D covariances
        a, b = a - a.mean(0), b - b.mean(0)
        return np.linalg.norm(a.T @ b) ** 2 / (np.linalg.norm(a.T @ a) * np.linalg.norm(b.T @ b))

    got = linear_cka(
        torch.tensor(x[None]), torch.tensor(y[None]), torch.tensor(selected[None])
    )
    assert float(got[0]) == pytest.approx(cka(x[selected], y[selected]), rel=1e-6)
    rotation = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    same = linear_cka(
        torch.tensor(x[None]), torch.tensor(3 * x[None] @ rotation), torch.tensor(selected[None])
    )
    assert float(same[0]) == pytest.approx(1.0, abs=1e-9)


def test_info_nce_hand_value() -> None:
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    targets = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
    r = 1 / math.sqrt(2)
    # Row 0: cos 1 (own), 1/√2; row 1: cos 0, 1/√2 (own). τ = 1.
    expected = 0.5 * (
        -(1 - math.log(math.exp(1) + math.exp(r))) - (r - math.log(math.exp(0) + math.exp(r)))
    )
    assert float(info_nce(anchors, targets, 1.0)) == pytest.approx(expected, rel=1e-6)


def test_mipic_schedules_follow_the_paper() -> None:
    assert checkpoint_layers(6, 6) == [1, 2, 3, 4, 5, 6]
    assert checkpoint_layers(12, 7) == [2, 3, 5, 7, 9, 10, 12]
    np.testing.assert_allclose(top_k_ratios(6), [0.2, 0.3, 0.4, 0.5, 0.6, 0.7])


def test_sia_attention_term_hand_value() -> None:
    # One sequence: [CLS] + 2 tokens, D = 2, nested dims (1, 2). k = max(8, ⌈0.2·2⌉) capped at 2
    # selects both tokens, and two centred points are always perfectly aligned (CKA = 1), so
    # L_SIA = KL(a_1 ‖ a_D) alone.
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 1.0], [1.0, 4.0]]])
    mask = torch.ones(1, 3, dtype=torch.long)
    loss = MIPICLoss([1, 2], sia_layers=[1], num_layers=1, hidden_size=2)
    teacher = torch.softmax(torch.tensor([1 * 3 + 2 * 1, 1 * 1 + 2 * 4]) / math.sqrt(2), 0)
    student = torch.softmax(torch.tensor([1 * 3.0, 1 * 1.0]) / math.sqrt(2), 0)  # P = [1; 0]
    expected = float((student * (student.log() - teacher.log())).sum())
    got = loss.sia_layer(hidden, mask, 1).detach()
    assert float(got) == pytest.approx(expected, rel=1e-5)


@torch.no_grad()
def test_sia_weights_scale_the_attention_and_cka_terms_apart() -> None:
    rng = torch.Generator().manual_seed(7)
    hidden = torch.randn(3, 12, 8, generator=rng)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 9:] = 0

    def sia(attention_weight: float, cka_weight: float) -> float:
        loss = MIPICLoss([2, 4, 8], sia_layers=[1], num_layers=1, hidden_size=8,
                         attention_weight=attention_weight, cka_weight=cka_weight)
        return float(loss.sia_layer(hidden, mask, 1))

    attention, cka = sia(1.0, 0.0), sia(0.0, 1.0)
    assert attention > 0 and cka > 0
    assert sia(1.0, 1.0) == pytest.approx(attention + cka, rel=1e-6)
    # Both at 1/T for T terms: the mean over SIA's terms instead of their sum.
    assert sia(0.5, 0.5) == pytest.approx((attention + cka) / 2, rel=1e-6)
    assert sia(3.0, 0.25) == pytest.approx(3 * attention + cka / 4, rel=1e-6)


def test_mipic_loss_combines_its_parts_with_alpha() -> None:
    rng = torch.Generator().manual_seed(3)
    layers = tuple(torch.randn(4, 6, 8, generator=rng) for _ in range(3))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 5 + [0], [1] * 3 + [0] * 3])
    states = TokenStates(torch.randn(4, 8, generator=rng), layers, mask)
    labels = torch.tensor([0, 0, 1, 1])
    loss = MIPICLoss([2, 4, 8], sia_layers=[1, 2], num_layers=2, hidden_size=8, alpha=0.4)
    distillation = loss.sia(states) + loss.pic(states)
    expected = 0.4 * loss.task(states.embedding, labels) + 0.6 * distillation
    assert float(loss(states, labels).detach()) == pytest.approx(float(expected.detach()), rel=1e-6)
    assert loss.checkpoints == [(1, 2), (1, 4), (2, 8)]
    value = loss(states, labels)
    value.backward()
    assert all(p.grad is not None for p in loss.projectors.parameters())


def test_simcse_hand_value() -> None:
    """Eq. 8 of the MIC appendix: each first view picks its own second view among the batch's."""
    first = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    second = torch.tensor([[3.0, 1.0], [-1.0, 2.0], [0.0, 1.0]])
    tau = 0.05

    def cos(a: list[float], b: list[float]) -> float:
        return (a[0] * b[0] + a[1] * b[1]) / math.hypot(*a) / math.hypot(*b)

    rows_a, rows_b = first.tolist(), second.tolist()
    expected = np.mean([
        -cos(rows_a[i], rows_b[i]) / tau
        + math.log(sum(math.exp(cos(rows_a[i], rows_b[j]) / tau) for j in range(3)))
        for i in range(3)
    ])
    assert float(simcse(torch.cat([first, second]), tau)) == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="even number"):
        simcse(torch.randn(5, 2), tau)
    with pytest.raises(ValueError, match="supervised, simcse"):
        MatryoshkaContrastiveLoss([1, 2], task_loss="unsupervised")


def test_matryoshka_simcse_averages_eq8_over_the_prefixes_without_labels() -> None:
    rng = torch.Generator().manual_seed(3)
    views = torch.randn(8, 6, generator=rng)
    got = MatryoshkaContrastiveLoss([2, 6], task_loss="simcse")(views, None)
    expected = (simcse(views[:, :2], 0.05) + simcse(views, 0.05)) / 2
    assert float(got) == pytest.approx(float(expected), rel=1e-6)
    # SFS under SimCSE: Eq. 8 with S_frag as the score.
    sfs = SFSLoss(3, task_loss="simcse")(views, None)
    assert float(sfs) == pytest.approx(float(simcse(fragment_normalize(views, 3), 0.05)), rel=1e-6)


def _two_view_states(batch: int = 3) -> TokenStates:
    rng = torch.Generator().manual_seed(4)
    hidden = torch.randn(2 * batch, 5, 4, generator=rng)
    mask = torch.ones(2 * batch, 5, dtype=torch.long)
    mask[1, 3:] = 0
    mask[batch + 1, 3:] = 0
    return TokenStates(torch.randn(2 * batch, 4, generator=rng), (hidden, hidden * 2.0), mask)


def test_mic_under_simcse_regularises_the_first_views_and_ablates_components() -> None:
    states = _two_view_states()
    first = states.first_rows(3)
    assert first.embedding.shape == (3, 4) and first.layers[1].shape == (3, 5, 4)
    assert torch.equal(first.attention_mask, states.attention_mask[:3])
    task = MatryoshkaContrastiveLoss([1, 2, 4], task_loss="simcse")(states.embedding, None)
    full = MICLoss([1, 2, 4], align_layers=[0, 1], task_loss="simcse")
    expected = task + 0.6 * full.alignment(first)
    assert float(full(states, None)) == pytest.approx(float(expected), rel=1e-6)
    # Seeing both views would give another value: the test can tell the two apart.
    assert float(full.alignment(states)) != pytest.approx(float(full.alignment(first)), rel=1e-3)
    m = first.attention_mask[..., None].float()
    sir_only = MICLoss([1, 2, 4], align_layers=[0, 1], task_loss="simcse", without=("scr",))
    sir_terms = [
        spectral_isotropy((x[..., :d] * m).sum(1) / m.sum(1))
        for x in first.layers for d in (1, 2)
    ]
    assert float(sir_only(states, None)) == pytest.approx(
        float(task + 0.6 * torch.stack(sir_terms).mean()), rel=1e-6
    )
    neither = MICLoss([1, 2, 4], align_layers=[0, 1], task_loss="simcse", without=("scr", "sir"))
    assert float(neither(states, None)) == pytest.approx(float(task), rel=1e-6)
    with pytest.raises(ValueError, match="components"):
        MICLoss([1, 2, 4], align_layers=[0], without=("pic",))


@torch.no_grad()
def test_mipic_ablations_drop_their_term() -> None:
    rng = torch.Generator().manual_seed(5)
    batch, layers, width = 3, 2, 4
    hidden = tuple(torch.randn(2 * batch, 6, width, generator=rng) for _ in range(layers + 1))
    mask = torch.ones(2 * batch, 6, dtype=torch.long)
    states = TokenStates(hidden[-1][:, 0] * 1.0, hidden, mask)
    kwargs = {"hidden_size": width, "task_loss": "simcse"}
    full = MIPICLoss([2, 4], [1, 2], layers, **kwargs)
    first = states.first_rows(batch)
    task = full.task(states.embedding, None)
    expected = 0.4 * task + 0.6 * (full.sia(first) + full.pic(first))
    assert float(full(states, None)) == pytest.approx(float(expected), rel=1e-6)
    no_pic = MIPICLoss([2, 4], [1, 2], layers, without=("pic",), **kwargs)
    no_pic.load_state_dict(full.state_dict())
    assert float(no_pic(states, None)) == pytest.approx(
        float(0.4 * task + 0.6 * full.sia(first)), rel=1e-6
    )
    neither = MIPICLoss([2, 4], [1, 2], layers, without=("sia", "pic"), **kwargs)
    assert float(neither(states, None)) == pytest.approx(float(0.4 * task), rel=1e-6)
