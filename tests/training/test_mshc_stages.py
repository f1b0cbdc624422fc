"""MSHC stages: each loss against a value computed by hand on a tiny tensor, the annealing
schedule, code sizes, and the behaviour each stage exists for."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from index.faiss_indexes import pq_from_codebooks
from training.head import FractalHead
from training.mshc.baselines import baselines, binary, scalar_int8
from training.mshc.fsq import FiniteScalarQuantizer, round_straight_through
from training.mshc.kd import distillation_loss
from training.mshc.mrl import WeightedMRLLoss, paper_weights
from training.mshc.pipeline import MSHCConfig
from training.mshc.pq import ProductQuantizer
from training.mshc.residual_vq import train_residual_vq
from training.mshc.sae import sae_loss, train_sae, zero_fraction
from training.mshc.vq import (
    SoftToHardVQ,
    annealed_temperature,
    soft_assignment,
    train_vq,
    vq_loss,
)


def test_table5_weights_for_the_minilm_dims() -> None:
    assert paper_weights((96, 192, 256, 384)) == (1.5, 1.2, 1.0, 0.8)
    with pytest.raises(ValueError, match="Table 5 has no weight"):
        paper_weights((64, 384))


def test_weighted_mrl_loss_by_hand() -> None:
    head = FractalHead(2, [2], dim=2)
    with torch.no_grad():
        head.projection.weight.copy_(torch.eye(2))
        head.projection.bias.zero_()
        head.classifiers[0].weight.copy_(torch.eye(2))
    loss = WeightedMRLLoss(head, (1, 2), (1.5, 0.8))
    value = loss(torch.tensor([[3.0, 4.0]]), torch.tensor([0]))
    # 1-d prefix: unit (1, 0) → logits (16, 0); full: unit (0.6, 0.8) → logits (9.6, 12.8).
    expected = 1.5 * math.log1p(math.exp(-16.0)) + 0.8 * math.log1p(math.exp(3.2))
    assert float(value.detach()) == pytest.approx(expected, rel=1e-5)


def test_temperature_schedule_matches_eq3_and_table6() -> None:
    assert annealed_temperature(0, 100) == pytest.approx(1.0)
    for epoch, tau in ((25, 0.562), (50, 0.316), (75, 0.178), (100, 0.1)):
        assert annealed_temperature(epoch, 100) == pytest.approx(tau, abs=5e-4)
    taus = [annealed_temperature(t, 10) for t in range(11)]
    assert all(a > b for a, b in zip(taus, taus[1:], strict=False))


def test_soft_assignment_and_vq_loss_by_hand() -> None:
    x = torch.tensor([[0.0, 0.0]])
    codebook = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    p0 = math.exp(-1) / (math.exp(-1) + math.exp(-4))
    p = soft_assignment(x, codebook, 1.0)
    assert p[0].tolist() == pytest.approx([p0, 1 - p0], rel=1e-5)
    # soft q = (p0, 2(1 − p0)); nearest codeword (1, 0) is at squared distance 1.
    reconstruction = p0**2 + 4 * (1 - p0) ** 2
    assert float(vq_loss(x, codebook, 1.0, beta=0.25)) == pytest.approx(
        reconstruction + 0.25 + 0.25, rel=1e-5
    )
    # A cold temperature makes the soft term the hard one: ‖x − C[i*]‖² = 1.
    assert float(vq_loss(x, codebook, 1e-3, beta=0.0)) == pytest.approx(1.0, rel=1e-5)


def test_vq_codes_are_one_byte_and_beat_a_codebook_of_data_rows() -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(600, 8, generator=generator)
    rows = SoftToHardVQ(x[:32])
    trained = train_vq(x, size=32, epochs=15)
    assert trained.bytes_per_vector() == 1
    assert SoftToHardVQ(torch.zeros(256, 4)).bytes_per_vector() == 1
    assert SoftToHardVQ(torch.zeros(257, 4)).bytes_per_vector() == 2
    codes = trained.encode(x)
    assert codes.min() >= 0 and codes.max() < 32
    before = (rows.quantize(x) - x).pow(2).sum(1).mean()
    after = (trained.quantize(x) - x).pow(2).sum(1).mean()
    assert after < before


def test_residual_vq_costs_a_byte_per_stage_and_each_stage_helps() -> None:
    x = torch.randn(600, 8, generator=torch.Generator().manual_seed(1))
    rvq = train_residual_vq(x, num_stages=3, size=16)
    assert rvq.bytes_per_vector() == 3 and rvq.encode(x).shape == (600, 3)
    errors = []
    for stages in (1, 2, 3):
        codes = rvq.encode(x)[:, :stages]
        recon = sum(rvq.stages[s].decode(codes[:, s]) for s in range(stages))
        errors.append(float((recon - x).pow(2).sum(1).mean()))
    assert errors[0] > errors[1] > errors[2]
    assert torch.allclose(rvq.quantize(x), rvq.decode(rvq.encode(x)))


def test_fsq_grid_codes_and_straight_through_gradient() -> None:
    fsq = FiniteScalarQuantizer(dim=16, latent_dim=24, levels=7)
    assert fsq.bytes_per_vector() == math.ceil(24 * math.log2(7) / 8) == 9
    codes = fsq.encode(torch.randn(50, 16) * 10)
    assert codes.min() >= 0 and codes.max() <= 6
    z = torch.tensor([0.4, 1.6], requires_grad=True)
    rounded = round_straight_through(z)
    rounded.sum().backward()
    assert rounded.tolist() == [0.0, 2.0] and z.grad.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="odd"):
        FiniteScalarQuantizer(16, 4, 8)


def test_pq_is_eight_bytes_and_the_index_from_its_codebooks_agrees() -> None:
    x = np.random.default_rng(2).standard_normal((3000, 96)).astype(np.float32)
    pq = ProductQuantizer.trained(x)
    codes = pq.encode(x[:100])
    assert pq.bytes_per_vector() == 8 and codes.shape == (100, 8) and codes.dtype == np.uint8
    assert pq.codebooks.shape == (8, 256, 12)
    index = pq_from_codebooks(pq.codebooks)
    assert index.pq.code_size == 8 and index.is_trained
    assert np.array_equal(index.sa_encode(x[:100]), codes)
    error = np.mean(np.sum((pq.quantize(x) - x) ** 2, axis=1)) / np.mean(np.sum(x**2, axis=1))
    assert error < 0.9
    with pytest.raises(ValueError, match="must divide"):
        ProductQuantizer(100)


def test_sae_loss_by_hand_and_l1_makes_codes_sparser() -> None:
    x, reconstruction = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 2.0]])
    code = torch.tensor([[0.5, -1.0]])
    assert float(sae_loss(x, reconstruction, code, 0.01)) == pytest.approx(1.0 + 0.01 * 1.5)
    generator = torch.Generator().manual_seed(3)
    x = torch.nn.functional.normalize(torch.randn(512, 96, generator=generator))
    dense = train_sae(x, sparsity=0.0, epochs=3)
    sparse = train_sae(x, sparsity=1.0, epochs=3)
    assert dense.encoder(x).shape == (512, 32)
    assert zero_fraction(sparse.encoder(x)) > zero_fraction(dense.encoder(x))


def test_distillation_loss_by_hand() -> None:
    student, teacher = torch.tensor([[0.0, 0.0]]), torch.tensor([[2 * math.log(3.0), 0.0]])
    # T = 2: teacher soft labels softmax(ln 3, 0) = (3/4, 1/4); student (1/2, 1/2).
    kl = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    expected = 0.7 * 4 * kl + 0.3 * math.log(2.0)
    value = distillation_loss(student, teacher, torch.tensor([0]), temperature=2.0, alpha=0.7)
    assert float(value) == pytest.approx(expected, rel=1e-5)


def test_config_rejects_unknown_stages_and_quantizers() -> None:
    with pytest.raises(ValueError, match="unknown stage"):
        MSHCConfig(skip=("pca",))
    with pytest.raises(ValueError, match="quantizer"):
        MSHCConfig(quantizer="lattice")
    with pytest.raises(ValueError, match="must divide"):
        MSHCConfig(pq_m=7)


def test_baselines_bytes_and_round_trips() -> None:
    rng = np.random.default_rng(4)
    train, test = rng.standard_normal((400, 384)), rng.standard_normal((50, 384))
    _, int8_test, int8_bytes = scalar_int8(train, test)
    inside = (test >= train.min(0)) & (test <= train.max(0))
    step = (train.max(0) - train.min(0)) / 255
    assert int8_bytes == 384
    bound = np.broadcast_to(step / 2 + 1e-9, test.shape)
    assert np.all(np.abs(int8_test - test)[inside] <= bound[inside])
    bits_train, _, bits_bytes = binary(train, test)
    assert bits_bytes == 48 and set(np.unique(bits_train)) <= {-1.0, 0.0, 1.0}
    pca_train, pca_test, pca_bytes = baselines(96)["PCA 96-d"](train, test)
    assert pca_train.shape == (400, 96) and pca_test.shape == (50, 96) and pca_bytes == 384
    # PCA components are orthonormal: the projected training vectors are uncorrelated.
    covariance = np.cov(pca_train.T)
    assert np.allclose(covariance - np.diag(np.diag(covariance)), 0.0, atol=1e-8)
