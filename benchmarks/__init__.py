"""Measured tables: run each benchmark as ``python -m benchmarks.<name>`` from the repository root
(``reproduce_clinc.py`` also runs as a plain script). Results go under ``benchmarks/results/``."""
