"""The MSHC driver: train the stages in the paper's order (MRL → VQ → PQ → SAE → KD) on frozen
features, any of them removable for the ablation (paper, Table 14), and compress vectors with
the result.

Every stage after MRL works on the L2-normalised 96-d prefix, the vector the service indexes.
Removing a stage passes its input through unchanged, except:

- without MRL the chain starts from the frozen encoder's own first 96 coordinates (the MRL head is
  still trained, as the distillation teacher and as the "full" re-ranking vector);
- without the SAE the 32-d student is a linear map ``96 → 32`` trained by distillation alone.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn

from training.fitting import fit
from training.head import FractalHead
from training.mshc.fsq import FiniteScalarQuantizer, train_fsq
from training.mshc.kd import PAPER_ALPHA, PAPER_TEMPERATURE, distil
from training.mshc.mrl import MSHC_PREFIX_DIMS, WeightedMRLLoss, paper_weights
from training.mshc.pq import PAPER_M, PAPER_NBITS, ProductQuantizer
from training.mshc.residual_vq import ResidualVQ, train_residual_vq
from training.mshc.sae import (
    PAPER_CODE_DIM,
    PAPER_SPARSITY,
    SparseAutoencoder,
    train_sae,
)
from training.mshc.vq import PAPER_EPOCHS, SoftToHardVQ, train_vq

STAGES = ("mrl", "vq", "pq", "sae", "kd")
QUANTIZERS = ("vq", "rvq", "fsq")
Quantizer = SoftToHardVQ | ResidualVQ | FiniteScalarQuantizer


@dataclass(frozen=True)
class MSHCConfig:
    """Every knob; the defaults are the paper's where it gives one (Tables 3 and 5)."""

    prefix_dims: tuple[int, ...] = MSHC_PREFIX_DIMS
    mrl_epochs: int = 10
    mrl_batch_size: int = 64
    mrl_learning_rate: float = 1e-3
    quantizer: Literal["vq", "rvq", "fsq"] = "vq"
    vq_epochs: int = PAPER_EPOCHS
    rvq_stages: int = 8
    fsq_latent_dim: int = 24
    fsq_levels: int = 7
    pq_m: int = PAPER_M
    pq_nbits: int = PAPER_NBITS
    sae_epochs: int = 30
    sparsity: float = PAPER_SPARSITY
    code_dim: int = PAPER_CODE_DIM
    kd_epochs: int = 20
    kd_temperature: float = PAPER_TEMPERATURE
    kd_alpha: float = PAPER_ALPHA
    seed: int = 42
    skip: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.skip) - set(STAGES)
        if unknown:
            raise ValueError(f"unknown stage(s) {sorted(unknown)} to skip; stages: {STAGES}")
        if self.quantizer not in QUANTIZERS:
            raise ValueError(f"quantizer must be one of {QUANTIZERS}, got {self.quantizer!r}")
        dims = list(self.prefix_dims)
        if dims != sorted(set(dims)) or len(dims) < 2:
            raise ValueError(f"prefix dims must be increasing, at least two, got {dims}")
        if self.coarse_dim % self.pq_m:
            raise ValueError(f"PQ m={self.pq_m} must divide the coarse dim {self.coarse_dim}")
        if self.code_dim >= self.coarse_dim:
            raise ValueError(f"the code dim must be below the coarse dim {self.coarse_dim}")

    @property
    def coarse_dim(self) -> int:
        return self.prefix_dims[0]

    @property
    def dim(self) -> int:
        return self.prefix_dims[-1]

    def to_json(self) -> dict:
        return asdict(self)


def unit(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(x, dim=1)


@dataclass
class MSHCModel:
    """The trained stages. ``quantizer``/``pq`` are None when skipped; ``sae`` is the autoencoder
    before distillation (None without the SAE) and ``student`` the final ``96 → 32`` encoder."""

    config: MSHCConfig
    head: FractalHead
    quantizer: Quantizer | None
    pq: ProductQuantizer | None
    sae: SparseAutoencoder | None
    student: nn.Module

    @torch.no_grad()
    def full(self, features: torch.Tensor) -> torch.Tensor:
        """The MRL head's full, unnormalised embedding (what ``encoder.onnx`` serves)."""
        return self.head(features)

    @torch.no_grad()
    def coarse(self, features: torch.Tensor) -> torch.Tensor:
        """The unit 96-d input of the compression chain."""
        source = features if "mrl" in self.config.skip else self.head(features)
        return unit(source[:, : self.config.coarse_dim])

    @torch.no_grad()
    def stages(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each stage's output for ``features``, in order: ``mrl`` (96-d), ``vq``, ``pq`` (both
        96-d reconstructions), ``sae`` (32-d code before KD, if trained) and ``kd`` (final)."""
        x = self.coarse(features)
        out = {"mrl": x}
        if self.quantizer is not None:
            x = self.quantizer.quantize(x)
            out["vq"] = x
        if self.pq is not None:
            x = torch.from_numpy(self.pq.quantize(x.numpy()))
            out["pq"] = x
        if self.sae is not None:
            out["sae"] = self.sae.encoder(x)
        out["kd"] = self.student(x)
        return out

    @torch.no_grad()
    def code(self, features: torch.Tensor) -> torch.Tensor:
        """The final 32-d code."""
        return self.stages(features)["kd"]


def train_mrl_head(
    features: torch.Tensor, fine_labels: torch.Tensor, num_fine: int, config: MSHCConfig,
    progress: bool = False,
) -> FractalHead:
    """Stage 1: a linear head ``input → dim`` trained with Eq. 2 (Table 5 weights)."""
    torch.manual_seed(config.seed)
    head = FractalHead(features.shape[1], [num_fine], dim=config.dim)
    loss = WeightedMRLLoss(head, config.prefix_dims, paper_weights(config.prefix_dims))
    fit(
        head.parameters(),
        len(features),
        lambda rows, _epoch: loss(features[rows], fine_labels[rows]),
        epochs=config.mrl_epochs,
        batch_size=config.mrl_batch_size,
        learning_rate=config.mrl_learning_rate,
        seed=config.seed,
        desc="mrl",
        progress=progress,
    )
    return head.eval()


def train_quantizer(
    x: torch.Tensor, config: MSHCConfig, progress: bool = False
) -> Quantizer:
    """Stage 2 with ``config.quantizer``: the paper's VQ, residual VQ or FSQ."""
    if config.quantizer == "rvq":
        return train_residual_vq(x, num_stages=config.rvq_stages, seed=config.seed)
    if config.quantizer == "fsq":
        return train_fsq(
            x, latent_dim=config.fsq_latent_dim, levels=config.fsq_levels, seed=config.seed,
            progress=progress,
        )
    return train_vq(x, epochs=config.vq_epochs, seed=config.seed, progress=progress)


def train_mshc(
    features: np.ndarray,
    fine_labels: np.ndarray,
    num_fine: int,
    config: MSHCConfig,
    *,
    head: FractalHead | None = None,
    progress: bool = False,
) -> MSHCModel:
    """Train every stage not in ``config.skip`` on ``features`` (``[n, input_dim]``) and their
    finest labels. A ``head`` already trained with the same config may be passed to share it
    between ablation runs."""
    x_in = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
    y = torch.from_numpy(np.asarray(fine_labels, dtype=np.int64))
    if head is None:
        head = train_mrl_head(x_in, y, num_fine, config, progress)
    model = MSHCModel(config, head, None, None, None, nn.Identity())
    x = model.coarse(x_in)
    if "vq" not in config.skip:
        model.quantizer = train_quantizer(x, config, progress)
        x = model.quantizer.quantize(x)
    if "pq" not in config.skip:
        model.pq = ProductQuantizer.trained(x.numpy(), config.pq_m, config.pq_nbits)
        x = torch.from_numpy(model.pq.quantize(x.numpy()))
    if "sae" not in config.skip:
        model.sae = train_sae(
            x, sparsity=config.sparsity, epochs=config.sae_epochs, seed=config.seed,
            progress=progress,
        )
        student: nn.Module = copy.deepcopy(model.sae.encoder)
    else:
        torch.manual_seed(config.seed)
        student = nn.Linear(config.coarse_dim, config.code_dim)
    if "kd" not in config.skip:
        with torch.no_grad():
            teacher = head.logits(head(x_in), 0, config.coarse_dim)
        student = distil(
            student, x, teacher, y, num_fine, code_dim=config.code_dim,
            temperature=config.kd_temperature, alpha=config.kd_alpha, epochs=config.kd_epochs,
            seed=config.seed, progress=progress,
        )
    model.student = student.eval()
    return model
