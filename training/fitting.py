"""The one small training loop shared by every learned MSHC stage (:mod:`training.mshc`) and the
fine-tuning recovery adapter (:mod:`training.evaluation.compression`): Adam over shuffled
mini-batches with gradient clipping at 1.0 (the MSHC paper's Table 8), for a fixed number of
epochs."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch
from tqdm.auto import tqdm

GRAD_CLIP = 1.0


def fit(
    parameters: Iterable[torch.nn.Parameter],
    num_rows: int,
    batch_loss: Callable[[torch.Tensor, int], torch.Tensor],
    *,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    seed: int = 42,
    desc: str = "fit",
    progress: bool = False,
) -> list[float]:
    """Minimise ``batch_loss(row_indices, epoch)``; returns the mean loss of each epoch."""
    if epochs < 1 or batch_size < 1 or num_rows < 1:
        raise ValueError("fit needs epochs, batch_size and rows >= 1")
    parameters = [p for p in parameters if p.requires_grad]
    optimizer = torch.optim.Adam(parameters, lr=learning_rate)
    generator = np.random.default_rng(seed)
    steps = max(1, num_rows // batch_size)
    history = []
    with tqdm(total=epochs * steps, desc=desc, disable=not progress, leave=False) as bar:
        for epoch in range(epochs):
            order = torch.from_numpy(generator.permutation(num_rows))
            total = 0.0
            for step in range(steps):
                loss = batch_loss(order[step * batch_size : (step + 1) * batch_size], epoch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(parameters, GRAD_CLIP)
                optimizer.step()
                total += float(loss.detach())
                bar.update()
            history.append(total / steps)
    return history
