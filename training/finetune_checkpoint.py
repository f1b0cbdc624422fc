"""Mid-run checkpoints of a fine-tune, so that a run of CPU-hours survives a restart.

Every ``every`` steps the trainer writes everything the rest of the run depends on: the model
(backbone and projection), the objective's own parameters (MIPIC's projections), the optimiser's
moments, the learning-rate schedule, torch's random states (the host's, and the GPUs' when a
run trains on one: the dropout masks to come), the step and the trainer's bookkeeping: the loss
history with its running sum, and the sessions so far with their start and wall time (so a
run's cost adds up across restarts). The batches need not
be saved: they are drawn from the config's seed before the first step. A run restarted with the
same config and checkpoint path picks up at the saved step and ends where the uninterrupted run
would have. The file is written to a temporary name and renamed, so a crash while saving leaves
the previous checkpoint whole; it is removed when the run completes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from training.errors import FractalError

CHECKPOINT_EVERY = 250
"""Steps between checkpoints."""


@dataclass(frozen=True)
class FinetuneCheckpoint:
    """Where one run's checkpoint lives and how often it is written."""

    path: Path
    every: int = CHECKPOINT_EVERY

    def load(
        self,
        config: dict,
        parts: dict[str, nn.Module | torch.optim.Optimizer | torch.optim.lr_scheduler.LRScheduler],
    ) -> tuple[int, dict]:
        """Restore ``parts`` from the checkpoint; the step it was taken at and the trainer's
        bookkeeping then (``0, {}`` when there is none)."""
        if not self.path.is_file():
            return 0, {}
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        if state["config"] != config:
            raise FractalError(
                f"{self.path}: a checkpoint of another run (its config differs); remove it or "
                "give this run another checkpoint path"
            )
        for name, part in parts.items():
            part.load_state_dict(state[name])
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        return state["step"], state["losses"]

    def save(
        self,
        step: int,
        config: dict,
        parts: dict[str, nn.Module | torch.optim.Optimizer | torch.optim.lr_scheduler.LRScheduler],
        losses: dict,
    ) -> None:
        """Write the checkpoint of ``step``; ``losses`` is the trainer's bookkeeping (losses,
        sessions)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        state = {name: part.state_dict() for name, part in parts.items()}
        state |= {
            "config": config,
            "step": step,
            "losses": losses,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
        }
        partial = self.path.with_name(self.path.name + ".partial")
        torch.save(state, partial)
        os.replace(partial, self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
