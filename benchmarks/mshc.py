"""MSHC on CLINC-150: every stage, every removal, the VQ variants, C2F and PQ retrieval, and
fine-tuning recovery, beside the MSHC paper's numbers (its Tables 13, 14, 16, 19, 20).

    python -m benchmarks mshc                     # full run: 10k/2k texts, about 10 min, 2 cores
    python -m benchmarks mshc --smoke --out DIR   # seconds: 1,500/300 texts, a few epochs

Writes ``mshc{,_smoke}.{json,md,png}`` to ``--out`` (default ``benchmarks/results``). One torch
thread; frozen MiniLM features come from the shared cache (computed once if missing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks.harness.runner import Progress
from training.frozen_encoder import FrozenEncoder
from training.mshc import report
from training.mshc.evaluation import evaluate_mshc
from training.mshc.pipeline import MSHCConfig
from training.prepared_data import DataConfig, prepare_data

TITLE = "MSHC on CLINC-150 (benchmarks/mshc.py)"
SMOKE_CONFIG = MSHCConfig(mrl_epochs=2, vq_epochs=3, rvq_stages=2, sae_epochs=2, kd_epochs=2)


@dataclass(frozen=True)
class Settings:
    """The texts, the pipeline's knobs and the evaluation's sizes."""

    data: DataConfig = DataConfig("clinc150", 10000, 2000)
    config: MSHCConfig = field(default_factory=MSHCConfig)
    num_pairs: int = 1000
    adapter_epochs: int = 20


SMOKE = Settings(DataConfig("clinc150", 1500, 300), SMOKE_CONFIG, num_pairs=200, adapter_epochs=2)


def run(settings: Settings, progress: Progress) -> dict:
    torch.set_num_threads(1)
    data = prepare_data(settings.data, FrozenEncoder(), progress=progress.enabled)
    _, _, results = evaluate_mshc(
        data,
        settings.config,
        num_pairs=settings.num_pairs,
        adapter_epochs=settings.adapter_epochs,
        progress=progress.enabled,
    )
    targets = [
        {
            "name": name,
            "target": f"{name} {'≤' if name == 'vq_rho_loss' else '≥'} {reached['target']}",
            **{key: value for key, value in reached.items() if key != "target"},
        }
        for name, reached in report.targets(results).items()
    ]
    return results | {"machine": {"torch_threads": torch.get_num_threads()}, "targets": targets}


def markdown(results: dict) -> str:
    return report.markdown(results, TITLE)


def plot(results: dict, path: Path) -> None:
    report.plot(results, path)
