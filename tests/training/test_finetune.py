"""The trainable-encoder path: which layers train, class-balanced batches, the exported bundle of
a fine-tuned encoder (ONNX = torch, SFS fragment size in the manifest) and ``fractal finetune``'s
answer to bad input."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from bundle import load_bundle
from training.cli import main
from training.data.registry import load_dataset
from training.errors import FractalError
from training.export import ONNX_TOLERANCE
from training.finetune import (
    FinetuneConfig,
    align_layers,
    balanced_batches,
    epoch_batches,
    finetune,
)
from training.finetune_checkpoint import FinetuneCheckpoint
from training.finetune_job import run_finetune
from training.frozen_encoder import FrozenEncoder
from training.prepared_data import DataConfig
from training.token_encoder import TokenEncoder, transformer_layers


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters()}


@pytest.mark.slow
def test_unfreezing_trains_only_the_requested_layers() -> None:
    encoder = FrozenEncoder(max_tokens=16)
    before = _snapshot(encoder.model)
    splits = load_dataset("banking77", max_train=64, max_test=8)
    config = FinetuneConfig(objective="mic", unfreeze_layers=2, steps=2, batch_size=8,
                            backbone_learning_rate=1e-3)
    result = finetune(encoder, splits.train.texts, splits.train.labels[:, -1], config,
                      progress=False)
    layers = transformer_layers(encoder.model)
    trained = {name for name, p in encoder.model.named_parameters() if p.requires_grad}
    expected = {f"encoder.layer.{i}." for i in (4, 5)}
    assert trained and all(name[: len("encoder.layer.4.")] in expected for name in trained)
    assert len(trained) == sum(1 for i in (4, 5) for _ in layers[i].parameters())
    after = dict(encoder.model.named_parameters())
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and changed <= trained
    assert not any(name.startswith(("embeddings.", "encoder.layer.0.")) for name in changed)
    assert align_layers(result.model) == [5, 6]
    assert encoder.config.fingerprint != FrozenEncoder().config.fingerprint


@pytest.mark.slow
def test_head_only_and_full_unfreezing() -> None:
    encoder = FrozenEncoder()
    head_only = TokenEncoder(encoder, 384, 0)
    assert not any(p.requires_grad for p in encoder.model.parameters())
    assert head_only.first_trainable_layer == 6 and align_layers(head_only) == [6]
    full = TokenEncoder(encoder, 384, 6)
    assert all(p.requires_grad for p in encoder.model.parameters())
    assert align_layers(full) == [2, 4]
    with pytest.raises(FractalError, match="0..6"):
        TokenEncoder(encoder, 384, 7)
    ids = encoder.tokenizer(["a short text", "and a longer one here"], padding=True,
                            return_tensors="pt")
    with torch.no_grad():
        states = full.eval()(ids["input_ids"], ids["attention_mask"])
    # Identity-initialised projection: step 0 is the raw encoder.
    raw = encoder.encode(["a short text", "and a longer one here"], progress=False)
    np.testing.assert_allclose(states.embedding.numpy(), raw, atol=1e-5)
    assert len(states.layers) == 7 and states.layers[3].shape[-1] == 384


def test_epoch_batches_visit_each_text_once_an_epoch() -> None:
    batches = epoch_batches(10, 4, 5, np.random.default_rng(0))
    assert len(batches) == 5 and all(len(set(batch)) == 4 for batch in batches)
    # Two full batches an epoch (the last incomplete one dropped): no text twice in an epoch.
    for epoch in (batches[0:2], batches[2:4]):
        assert len(set(np.concatenate(epoch))) == 8
    with pytest.raises(FractalError, match="batch size 4 needs at least as many texts"):
        epoch_batches(3, 4, 1, np.random.default_rng(0))


@pytest.mark.slow
def test_simcse_trains_on_unlabelled_texts_with_two_dropout_views() -> None:
    encoder = FrozenEncoder(max_tokens=16)
    texts = load_dataset("banking77", max_train=40, max_test=8).train.texts
    before = _snapshot(encoder.model)
    config = FinetuneConfig(objective="mic", unfreeze_layers=1, steps=2, batch_size=8,
                            task_loss="simcse", without=("scr",), backbone_learning_rate=1e-3)
    result = finetune(encoder, texts, None, config, progress=False)
    assert result.loss.task.task_loss == "simcse" and result.loss.components == ["sir"]
    after = dict(encoder.model.named_parameters())
    assert any(not torch.equal(before[name], after[name]) for name in before)
    assert all(np.isfinite(entry["loss"]) for entry in result.history)
    with pytest.raises(ValueError, match="one label per text"):
        finetune(encoder, texts, None, replace(config, task_loss="supervised"), progress=False)


class _Crash(Exception):
    pass


@dataclass(frozen=True)
class _CrashAfterSave(FinetuneCheckpoint):
    """A checkpoint whose run dies right after its save at ``crash_at``."""

    crash_at: int = 0

    def save(self, step: int, *args) -> None:
        super().save(step, *args)
        if step == self.crash_at:
            raise _Crash


@pytest.mark.slow
def test_a_run_stopped_part_way_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    texts = load_dataset("banking77", max_train=40, max_test=8).train.texts
    config = FinetuneConfig(objective="mipic", unfreeze_layers=1, steps=6, batch_size=4,
                            task_loss="simcse", backbone_learning_rate=1e-3)

    def train(checkpoint: FinetuneCheckpoint | None):
        encoder = FrozenEncoder(max_tokens=16)
        return finetune(encoder, texts, None, config, progress=False, checkpoint=checkpoint)

    whole = train(None)
    path = tmp_path / "run.pt"
    with pytest.raises(_Crash):
        train(_CrashAfterSave(path, every=2, crash_at=4))
    assert path.is_file()
    older = torch.load(path, weights_only=True)  # as written before sessions were recorded
    del older["losses"]["sessions"]
    torch.save(older, tmp_path / "older.pt")
    resumed = train(FinetuneCheckpoint(path, every=2))
    assert not path.exists()  # removed once the run completed
    for name, value in whole.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[name], value, msg=name)
    for name, value in whole.loss.state_dict().items():
        torch.testing.assert_close(resumed.loss.state_dict()[name], value, msg=name)
    # The mean loss of steps 1–6 (the running sum of steps 1–4 came from the checkpoint).
    assert [h["step"] for h in resumed.history] == [h["step"] for h in whole.history] == [6]
    assert resumed.history[0]["loss"] == pytest.approx(whole.history[0]["loss"], rel=1e-5)
    # The cost adds up across the restart: the crashed session's time up to its last save.
    assert [(s["first_step"], s["last_step"]) for s in whole.sessions] == [(1, 6)]
    assert [(s["first_step"], s["last_step"]) for s in resumed.sessions] == [(1, 4), (5, 6)]
    assert all(s["seconds"] > 0 for s in resumed.sessions)
    assert resumed.sessions[0]["started_utc"] <= resumed.sessions[1]["started_utc"]
    assert resumed.train_seconds == sum(s["seconds"] for s in resumed.sessions)
    unknown = train(FinetuneCheckpoint(tmp_path / "older.pt", every=2))
    assert unknown.sessions[0] == {"first_step": 1, "last_step": 4, "started_utc": None,
                                   "seconds": None}
    assert unknown.train_seconds is None  # not a partial sum passed off as the run's cost
    # A checkpoint of another config is refused, not silently loaded.
    with pytest.raises(_Crash):
        train(_CrashAfterSave(path, every=2, crash_at=2))
    config = replace(config, seed=7)
    with pytest.raises(FractalError, match="a checkpoint of another run"):
        train(FinetuneCheckpoint(path, every=2))


@pytest.mark.slow
def test_a_loss_setting_reaches_the_loss_trained() -> None:
    texts = load_dataset("banking77", max_train=16, max_test=8).train.texts
    config = FinetuneConfig(objective="mipic", unfreeze_layers=1, steps=1, batch_size=4,
                            task_loss="simcse", options=(("attention_temperature", 0.05),))
    result = finetune(FrozenEncoder(max_tokens=16), texts, None, config, progress=False)
    assert result.loss.attention_temperature == 0.05
    assert result.config.to_json()["options"] == (("attention_temperature", 0.05),)


@pytest.mark.parametrize(
    ("objective", "options", "message"),
    [
        ("mipic", (("tau", 1.0),), "option 'tau': mipic has the settings attention_temperature"),
        ("mic", (("attention_temperature", 1.0),), "option 'attention_temperature': mic has no"),
        ("mipic", (("attention_temperature", 0.0),), "must be a positive number"),
        ("mipic", (("attention_temperature", float("nan")),), "must be a positive number"),
    ],
)
def test_bad_loss_settings_are_refused(
    objective: str, options: tuple[tuple[str, float], ...], message: str
) -> None:
    with pytest.raises(FractalError, match=message):
        FinetuneConfig(objective=objective, options=options).validate()


def test_balanced_batches_give_every_anchor_a_positive() -> None:
    labels = np.repeat(np.arange(10), 3)
    for batch in balanced_batches(labels, 8, 5, np.random.default_rng(0)):
        assert len(batch) == 8 and len(set(batch)) == 8
        assert all(count == 2 for count in np.unique(labels[batch], return_counts=True)[1])
    with pytest.raises(FractalError, match="labels with ≥ 2 texts"):
        balanced_batches(np.arange(10), 8, 1, np.random.default_rng(0))


@pytest.mark.slow
def test_sfs_bundle_of_a_fine_tuned_encoder_round_trips(tmp_path: Path) -> None:
    encoder = FrozenEncoder(max_tokens=32)
    config = FinetuneConfig(objective="sfs", dim=256, prefix_dims=(256,), fragment_dim=64,
                            unfreeze_layers=1, steps=2, batch_size=8, backbone_learning_rate=1e-3)
    bundle_dir = run_finetune(DataConfig("clinc150", 200, 40), encoder, config, tmp_path,
                              progress=False)
    manifest = load_bundle(bundle_dir)
    assert manifest.objective == "sfs" and manifest.fragment_dim == 64
    assert 0 <= manifest.onnx_max_abs_diff <= ONNX_TOLERANCE
    assert not (bundle_dir / "heads.onnx").exists()
    assert manifest.backbone.fingerprint.startswith(FrozenEncoder().config.fingerprint + "+")
    ranking = manifest.evaluation["ranking"]
    assert set(ranking) == {"cosine", "sfs-64"}
    assert all(0 <= v <= 1 for scores in ranking.values() for v in scores.values())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--objective", "nope"], "unknown objective 'nope'"),
        (["--objective", "sfs", "--dim", "256"], "sfs needs --fragment-dim"),
        (["--objective", "sfs", "--dim", "256", "--fragment-dim", "48"], "divisor"),
        (["--objective", "mic", "--fragment-dim", "16"], "applies to sfs only"),
        (["--objective", "mic", "--prefix-dims", "16,32"], "end at dim=384"),
        (["--objective", "mic", "--batch-size", "7"], "even batch size"),
        (["--objective", "mic", "--dataset", "imdb"], "unknown dataset 'imdb'"),
        (["--objective", "mic", "--task-loss", "nope"], "--task-loss must be one of"),
        (["--objective", "mrl", "--task-loss", "simcse"], "needs a trainable backbone"),
        (["--objective", "mrl", "--without", "scr"], "mrl has none to leave out"),
        (["--objective", "mipic", "--without", "scr"], "the components sia, pic"),
    ],
)
def test_finetune_cli_bad_input_exits_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["finetune", "--out", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
