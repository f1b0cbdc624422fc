"""Contrastive training of the encoder itself (MRL, MIC, MIPIC, SFS): the trainer for the
objectives that read token states or whose papers fine-tune the backbone.

The model is a :class:`~training.token_encoder.TokenEncoder`: the backbone with its top
``unfreeze_layers`` layers trainable (0 = head-only) plus a token-wise projection to ``dim``.
Under the supervised task loss, batches are class-balanced — ``batch_size / 2`` labels, two texts
each — so that every anchor of the supervised contrastive terms has a positive. Under unsupervised
SimCSE (``task_loss="simcse"``, the MIC and MIPIC papers' setting) the texts need no labels: each
epoch is a fresh shuffle cut into batches of ``batch_size`` distinct texts, and each batch goes
through the encoder twice, stacked, so that the two passes differ by their dropout masks alone
(:mod:`training.objectives.simcse`). AdamW with cosine decay, one learning rate for the
backbone (the papers' 2e-5) and one for the projection and the objectives' own parameters.

When the backbone is frozen, the transformer runs once, not once per step: MRL and SFS steps read
the cached pooled features (``projection(pool(h)) = pool(projection(h))``, so it is the same
model), MIC and MIPIC steps read the last layer's token states and every layer's pooled state,
computed once for the training texts (:class:`~training.token_encoder.CachedTokenStates`).

Training runs on the encoder's device (a GPU when torch sees one, :class:`FrozenEncoder`): the
projection, the objective's own parameters and the batches follow the backbone there.

``matched`` comparisons use the same :class:`FinetuneConfig` with only ``objective`` changed.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from bundle.objectives import FINETUNE_OBJECTIVES
from training.errors import FractalError
from training.finetune_checkpoint import FinetuneCheckpoint
from training.frozen_encoder import FrozenEncoder
from training.head import FractalHead
from training.objectives import FINETUNE_LOSSES
from training.objectives.matryoshka_contrastive import MatryoshkaContrastiveLoss
from training.objectives.mic import MICLoss
from training.objectives.mipic import MIPICLoss
from training.objectives.sfs import SFSLoss
from training.objectives.simcse import TASK_LOSSES
from training.objectives.tensors import TokenStates
from training.token_encoder import CachedTokenStates, TokenEncoder

ABLATABLE = {name: loss.components for name, loss in FINETUNE_LOSSES.items() if loss.components}
"""The components an ablation (``without``) may leave out, per objective."""
SETTABLE = {name: loss.options for name, loss in FINETUNE_LOSSES.items() if loss.options}
"""The loss settings a run may give (``options``), per objective."""
# MIC's layers for a 6-layer backbone (TinyBERT-6L, MIC paper appendix D).
MIC_PAPER_LAYERS_6L = (2, 4)
HISTORY_EVERY = 50


@dataclass(frozen=True)
class FinetuneConfig:
    """Every knob of one contrastive training run."""

    objective: str = "mic"
    dim: int = 384
    prefix_dims: tuple[int, ...] = (16, 32, 64, 128, 256, 384)
    fragment_dim: int | None = None
    unfreeze_layers: int = 6
    steps: int = 500
    batch_size: int = 32
    backbone_learning_rate: float = 2e-5
    head_learning_rate: float = 1e-3
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 42
    task_loss: str = "supervised"
    without: tuple[str, ...] = ()
    """Components of the objective left out (an ablation): MIC's ``scr``/``sir``, MIPIC's
    ``sia``/``pic``."""
    options: tuple[tuple[str, float], ...] = ()
    """Settings of the objective's loss other than its defaults, ``(name, value)`` (a reading
    of the paper screened against the default one): MIPIC's ``attention_temperature``,
    ``attention_weight`` and ``cka_weight``."""

    def validate(self) -> None:
        if self.objective not in FINETUNE_OBJECTIVES:
            raise FractalError(
                f"unknown objective {self.objective!r}: choose one of "
                f"{', '.join(FINETUNE_OBJECTIVES)}"
            )
        dims = list(self.prefix_dims)
        if not dims or dims != sorted(set(dims)) or dims[0] < 1 or dims[-1] != self.dim:
            raise FractalError(
                f"prefix dims must be increasing and end at dim={self.dim}, got {dims}"
            )
        if self.objective == "sfs":
            if self.fragment_dim is None or self.fragment_dim < 1 or self.dim % self.fragment_dim:
                raise FractalError(
                    f"sfs needs --fragment-dim, a positive divisor of dim={self.dim}, "
                    f"got {self.fragment_dim}"
                )
        elif self.fragment_dim is not None:
            raise FractalError(f"--fragment-dim applies to sfs only, not {self.objective}")
        if self.steps < 1 or self.batch_size < 4 or self.batch_size % 2:
            raise FractalError("steps ≥ 1 and an even batch size ≥ 4 are needed")
        if self.backbone_learning_rate <= 0 or self.head_learning_rate <= 0:
            raise FractalError("learning rates must be positive")
        if self.task_loss not in TASK_LOSSES:
            raise FractalError(
                f"--task-loss must be one of {', '.join(TASK_LOSSES)}, not {self.task_loss!r}"
            )
        if self.task_loss == "simcse" and self.unfreeze_layers == 0:
            raise FractalError(
                "--task-loss simcse needs a trainable backbone (--unfreeze-layers ≥ 1): its two "
                "views of a text differ only by the backbone's dropout"
            )
        allowed = ABLATABLE.get(self.objective, ())
        unknown = [name for name in self.without if name not in allowed]
        if unknown:
            components = f"the components {', '.join(allowed)}" if allowed else "none to leave out"
            raise FractalError(f"--without {','.join(unknown)}: {self.objective} has {components}")
        settable = SETTABLE.get(self.objective, ())
        for name, value in self.options:
            if name not in settable:
                known = f"the settings {', '.join(settable)}" if settable else "no settings"
                raise FractalError(f"option {name!r}: {self.objective} has {known}")
            if not math.isfinite(value) or value <= 0:
                raise FractalError(f"option {name!r} must be a positive number, got {value!r}")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class FinetuneResult:
    model: TokenEncoder
    loss: nn.Module
    config: FinetuneConfig
    history: list[dict] = field(default_factory=list)
    sessions: list[dict] = field(default_factory=list)
    """The invocations that trained the run, one unless it resumed from a checkpoint: each its
    ``first_step``, ``last_step`` (the last one it saved, or the end), ``started_utc`` and
    ``seconds`` from its start to that step (``None`` where a checkpoint did not record them).
    Steps run after a session's last save are run again by the next and counted there."""

    @property
    def train_seconds(self) -> float | None:
        """Wall time of the run summed over its sessions (``None`` if one was not recorded)."""
        seconds = [session["seconds"] for session in self.sessions]
        return None if None in seconds else sum(seconds)


def needs_token_states(objective: str) -> bool:
    return FINETUNE_LOSSES[objective].reads_token_states


def align_layers(model: TokenEncoder) -> list[int]:
    """MIC's regularised layers: the paper's (2, 4) when they train, else every trainable layer
    (the top ``unfreeze_layers``; the output layer alone when only the projection trains)."""
    first = model.first_trainable_layer
    paper = [layer for layer in MIC_PAPER_LAYERS_6L if layer >= first]
    return paper if len(paper) == len(MIC_PAPER_LAYERS_6L) else list(
        range(first, model.num_layers + 1)
    )


def build_loss(config: FinetuneConfig, model: TokenEncoder) -> nn.Module:
    task = config.task_loss
    if config.objective == "mrl":
        return MatryoshkaContrastiveLoss(config.prefix_dims, task_loss=task)
    if config.objective == "sfs":
        return SFSLoss(config.fragment_dim, task_loss=task)
    if config.objective == "mic":
        return MICLoss(
            config.prefix_dims, align_layers(model), pooling=model.pooling, task_loss=task,
            without=config.without, **dict(config.options),
        )
    return MIPICLoss(
        config.prefix_dims,
        list(range(model.first_trainable_layer, model.num_layers + 1)),
        model.num_layers,
        hidden_size=model.projection.in_features,
        pooling=model.pooling,
        task_loss=task,
        without=config.without,
        **dict(config.options),
    )


def balanced_batches(
    labels: np.ndarray, batch_size: int, steps: int, generator: np.random.Generator
) -> list[np.ndarray]:
    """``steps`` batches of ``batch_size / 2`` distinct labels × 2 texts (labels with ≥ 2 texts)."""
    by_label = [np.flatnonzero(labels == label) for label in np.unique(labels)]
    usable = [rows for rows in by_label if len(rows) >= 2]
    per_batch = batch_size // 2
    if len(usable) < per_batch:
        raise FractalError(
            f"batch size {batch_size} needs {per_batch} labels with ≥ 2 texts, "
            f"the data has {len(usable)}"
        )
    batches = []
    for _ in range(steps):
        chosen = generator.choice(len(usable), size=per_batch, replace=False)
        batches.append(
            np.concatenate([generator.choice(usable[c], size=2, replace=False) for c in chosen])
        )
    return batches


def epoch_batches(
    count: int, batch_size: int, steps: int, generator: np.random.Generator
) -> list[np.ndarray]:
    """``steps`` batches of ``batch_size`` distinct texts of ``count``: each epoch a fresh
    shuffle, its last incomplete batch dropped (so no batch holds a text twice)."""
    if count < batch_size:
        raise FractalError(f"batch size {batch_size} needs at least as many texts, got {count}")
    batches: list[np.ndarray] = []
    per_epoch = count // batch_size
    while len(batches) < steps:
        order = generator.permutation(count)
        batches += [order[i * batch_size : (i + 1) * batch_size] for i in range(per_epoch)]
    return batches[:steps]


def finetune(
    encoder: FrozenEncoder,
    texts: list[str] | tuple[str, ...],
    labels: np.ndarray | None,
    config: FinetuneConfig,
    *,
    features: np.ndarray | None = None,
    progress: bool = True,
    checkpoint: FinetuneCheckpoint | None = None,
) -> FinetuneResult:
    """Train ``encoder`` (in place, as far as unfrozen) + a projection with ``config.objective``.

    ``labels`` are one integer per text (the finest level); the ``simcse`` task loss ignores
    them (``None`` is fine). ``features`` are the frozen pooled
    features of ``texts``; with a frozen backbone and MRL/SFS they replace the transformer pass.
    On return the encoder is in eval mode, and if its weights changed its fingerprint says so, so
    that feature caches never mix fine-tuned and original features. With ``checkpoint`` the run
    saves itself every ``checkpoint.every`` steps and, started again, resumes from the last save
    (:mod:`training.finetune_checkpoint`); the result's ``sessions`` say when each invocation
    trained which steps, and for how long.
    """
    config.validate()
    clock = time.perf_counter()
    started_utc = datetime.now(timezone.utc).isoformat(timespec="seconds")
    unsupervised = config.task_loss == "simcse"
    if not unsupervised and (labels is None or len(texts) != len(labels)):
        raise ValueError("the supervised task loss needs one label per text")
    torch.manual_seed(config.seed)
    generator = np.random.default_rng(config.seed)
    device = encoder.device
    model = TokenEncoder(encoder, config.dim, config.unfreeze_layers).to(device)
    loss_fn = build_loss(config, model).to(device)
    use_features = (
        features is not None
        and config.unfreeze_layers == 0
        and not needs_token_states(config.objective)
    )
    head_parameters = [*model.projection.parameters(), *loss_fn.parameters()]
    groups = [{"params": head_parameters, "lr": config.head_learning_rate}]
    if model.backbone_parameters():
        groups.append({"params": model.backbone_parameters(), "lr": config.backbone_learning_rate})
    optimizer = torch.optim.AdamW(groups, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=config.steps)
    trainable = [p for group in groups for p in group["params"]]
    y = None if unsupervised else torch.from_numpy(np.asarray(labels, dtype=np.int64)).to(device)
    x = (
        torch.from_numpy(np.ascontiguousarray(features, np.float32)).to(device)
        if use_features
        else None
    )
    cache = (
        CachedTokenStates.compute(encoder, texts)
        if config.unfreeze_layers == 0 and needs_token_states(config.objective)
        else None
    )
    result = FinetuneResult(model=model, loss=loss_fn, config=config)
    batches = (
        epoch_batches(len(texts), config.batch_size, config.steps, generator)
        if unsupervised
        else balanced_batches(np.asarray(labels), config.batch_size, config.steps, generator)
    )
    parts = {"model": model, "loss": loss_fn, "optimizer": optimizer, "scheduler": scheduler}
    start, losses = checkpoint.load(config.to_json(), parts) if checkpoint else (0, {})
    result.history = losses.get("history", [])
    unrecorded = {"first_step": 1, "last_step": start, "started_utc": None, "seconds": None}
    earlier = losses.get("sessions", [unrecorded] if start else [])

    def sessions(step: int) -> list[dict]:
        """The earlier sessions and this one, up to ``step``."""
        this = {"first_step": start + 1, "last_step": step, "started_utc": started_utc,
                "seconds": time.perf_counter() - clock}
        return [*earlier, this]

    running, since_record = losses.get("running", 0.0), losses.get("since_record", 0)
    model.train()
    remaining = tqdm(batches[start:], desc=f"finetune {config.objective}", initial=start,
                     total=len(batches), disable=not progress, leave=False)
    for step, batch in enumerate(remaining, start + 1):
        if x is not None:
            states = TokenStates(embedding=model.projection(x[batch]))
        elif cache is not None:
            states = model.from_cache(cache, batch)
        else:
            batch_texts = [texts[i] for i in batch]
            tokens = encoder.tokenizer(
                batch_texts * 2 if unsupervised else batch_texts,
                padding=True,
                truncation=True,
                max_length=encoder.config.max_tokens,
                return_tensors="pt",
            ).to(encoder.device)
            states = model(tokens["input_ids"], tokens["attention_mask"])
        batch_labels = None if y is None else y[batch]
        loss = loss_fn(
            states if needs_token_states(config.objective) else states.embedding, batch_labels
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, config.grad_clip)
        optimizer.step()
        scheduler.step()
        running, since_record = running + float(loss.detach()), since_record + 1
        if step % HISTORY_EVERY == 0 or step == config.steps:
            result.history.append({"step": step, "loss": running / since_record})
            running, since_record = 0.0, 0
        if checkpoint is not None and step % checkpoint.every == 0 and step < config.steps:
            losses = {"history": result.history, "running": running, "since_record": since_record,
                      "sessions": sessions(step)}
            checkpoint.save(step, config.to_json(), parts, losses)
    result.sessions = sessions(config.steps)
    if checkpoint is not None:
        checkpoint.remove()
    model.eval()
    if config.unfreeze_layers:
        digest = hashlib.sha256()
        for parameter in model.backbone_parameters():
            digest.update(parameter.detach().cpu().numpy().tobytes())
        encoder.config = replace(
            encoder.config, fingerprint=f"{encoder.config.fingerprint}+{digest.hexdigest()[:12]}"
        )
    return result


@torch.no_grad()
def embed_texts(
    result: FinetuneResult, encoder: FrozenEncoder, texts: list[str] | tuple[str, ...],
    *, features: np.ndarray | None = None, progress: bool = False,
) -> np.ndarray:
    """Full, unnormalised embeddings of the trained model: the (fine-tuned) encoder's pooled
    vectors through the projection. ``features`` may stand in for the encoder when it was frozen."""
    if features is None or result.config.unfreeze_layers:
        features = encoder.encode(list(texts), progress=progress)
    pooled = torch.from_numpy(np.ascontiguousarray(features, np.float32))
    return result.model.projection.cpu()(pooled).numpy()


def as_head(result: FinetuneResult) -> FractalHead:
    """The trained projection as a classifier-free :class:`FractalHead`, the form the export
    fuses into ``encoder.onnx`` (with ``with_heads=False``)."""
    projection = result.model.projection
    head = FractalHead(projection.in_features, [], dim=projection.out_features)
    head.projection.load_state_dict(projection.state_dict())
    return head.eval()
