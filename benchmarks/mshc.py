"""MSHC on CLINC-150: every stage, every removal, the VQ variants, C2F and PQ retrieval, and
fine-tuning recovery, beside the MSHC paper's numbers (its Tables 13, 14, 16, 19, 20).

    python -m benchmarks.mshc                     # full run: 10k/2k texts, about 10 min, 2 cores
    python -m benchmarks.mshc --smoke --out DIR   # seconds: 1,500/300 texts, a few epochs

Writes ``mshc{,_smoke}.{json,md,png}`` to ``--out`` (default ``benchmarks/results``). One torch
thread; frozen MiniLM features come from the shared cache (computed once if missing).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import torch

from training.frozen_encoder import FrozenEncoder
from training.mshc.evaluation import evaluate_mshc
from training.mshc.pipeline import MSHCConfig
from training.mshc.report import write_report
from training.prepared_data import DataConfig, prepare_data

RESULTS = Path(__file__).parent / "results"
FULL_DATA = DataConfig("clinc150", 10000, 2000)
SMOKE_DATA = DataConfig("clinc150", 1500, 300)
SMOKE_CONFIG = MSHCConfig(
    mrl_epochs=2, vq_epochs=3, rvq_stages=2, sae_epochs=2, kd_epochs=2
)


def run(*, smoke: bool, out: Path = RESULTS, progress: bool = True) -> list[Path]:
    torch.set_num_threads(1)
    start = time.perf_counter()
    data = prepare_data(SMOKE_DATA if smoke else FULL_DATA, FrozenEncoder(), progress=progress)
    config = SMOKE_CONFIG if smoke else MSHCConfig()
    options = {"num_pairs": 200, "adapter_epochs": 2} if smoke else {}
    _, _, results = evaluate_mshc(data, config, progress=progress, **options)
    results["smoke"] = smoke
    results["machine"] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1_5_15_min_at_end": list(os.getloadavg()),
        "wall_s": time.perf_counter() - start,
    }
    stem = "mshc_smoke" if smoke else "mshc"
    return write_report(results, out, "MSHC on CLINC-150 (benchmarks/mshc.py)", stem)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny data, a few epochs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    for path in run(smoke=args.smoke, out=args.out, progress=not args.no_progress):
        print(path)


if __name__ == "__main__":
    main()
