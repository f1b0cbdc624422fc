"""MSHC stage 5: knowledge distillation from the frozen MRL teacher (MSHC paper, §3.1 and
Table 3; Hinton et al., 2015): T = 2.0, α = 0.7.

``L_KD = α · T² · KL(softmax(t / T) ‖ softmax(s / T)) + (1 − α) · CE(s, y)``, where ``t`` are the
teacher's finest-label logits (its cosine classifier on the 96-d MRL prefix) and ``s`` a
student cosine classifier's logits on the 32-d code. The student is the 32-d encoder (the SAE's,
or a plain linear map in the "without SAE" ablation) plus that classifier; both are trained.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from training.fitting import fit

PAPER_TEMPERATURE = 2.0
PAPER_ALPHA = 0.7
LOGIT_SCALE = 16.0


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = PAPER_TEMPERATURE,
    alpha: float = PAPER_ALPHA,
) -> torch.Tensor:
    soft = F.kl_div(
        F.log_softmax(student_logits / temperature, dim=1),
        F.log_softmax(teacher_logits / temperature, dim=1),
        log_target=True,
        reduction="batchmean",
    )
    return alpha * temperature**2 * soft + (1 - alpha) * F.cross_entropy(student_logits, labels)


class CosineClassifier(nn.Module):
    """``scale · unit(x) @ unit(W)ᵀ``, as :meth:`training.head.FractalHead.logits`."""

    def __init__(self, dim: int, num_classes: int, scale: float = LOGIT_SCALE) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_classes, dim) * dim**-0.5)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * F.normalize(x, dim=1) @ F.normalize(self.weight, dim=1).T


def distil(
    student: nn.Module,
    inputs: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    *,
    code_dim: int,
    temperature: float = PAPER_TEMPERATURE,
    alpha: float = PAPER_ALPHA,
    epochs: int = 20,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    seed: int = 42,
    progress: bool = False,
) -> nn.Module:
    """Train ``student`` (inputs → code) in place; returns it in eval mode."""
    torch.manual_seed(seed)
    classifier = CosineClassifier(code_dim, num_classes)
    teacher_logits = teacher_logits.detach()
    fit(
        [*student.parameters(), *classifier.parameters()],
        len(inputs),
        lambda rows, _epoch: distillation_loss(
            classifier(student(inputs[rows])), teacher_logits[rows], labels[rows],
            temperature, alpha,
        ),
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        seed=seed,
        desc="kd",
        progress=progress,
    )
    return student.eval()
