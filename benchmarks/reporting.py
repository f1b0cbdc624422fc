"""What every benchmark shares: its command line, progress lines, and its results files.

A benchmark writes ``NAME.json`` (every number and parameter), ``NAME.md`` (the tables the
README quotes) and ``NAME.png`` under ``--out`` (default ``benchmarks/results``); a smoke run
writes ``NAME_smoke.*``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def benchmark_parser(doc: str | None, smoke_help: str) -> argparse.ArgumentParser:
    """A parser with the options every benchmark has: ``--smoke``, ``--out``, ``--quiet``."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help=smoke_help)
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


class Progress:
    """Prints ``[elapsed s] message`` lines when enabled; ``elapsed`` is since construction."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"[{self.elapsed:7.1f} s] {message}", flush=True)


def results_name(name: str, smoke: bool) -> str:
    """``name`` for a full run, ``name_smoke`` for a smoke run."""
    return f"{name}_smoke" if smoke else name


def write_results(out: Path, name: str, payload: dict, markdown: str) -> list[Path]:
    """``out/name.json`` and ``out/name.md``."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    json_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown + "\n", encoding="utf-8")
    return [json_path, md_path]


def publish(
    out: Path,
    name: str,
    report: dict,
    markdown: Callable[[dict], str],
    plot: Callable[[dict, Path], None],
    say: Progress,
) -> list[Path]:
    """Write ``name.{json,md,png}`` under ``out`` and return the three paths."""
    paths = write_results(out, name, report, markdown(report))
    plot(report, out / f"{name}.png")
    say(f"wrote {out / name}.{{json,md,png}}")
    return [*paths, out / f"{name}.png"]


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub Markdown table; floats are written as given (format them before)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def faster(ratio: float) -> str:
    """A speed-up (reference time / time) in words: ``2.50× faster``, below 1 ``1.25× slower``."""
    return f"{ratio:.2f}× faster" if ratio >= 1 else f"{1 / ratio:.2f}× slower"


def bullet_list(header: Mapping) -> str:
    """A flat dict as a bullet list; nested values are written as JSON."""
    return "\n".join(
        f"- {key.replace('_', ' ')}: "
        + (json.dumps(value) if isinstance(value, dict | list | tuple) else str(value))
        for key, value in header.items()
    )


def bullet_sections(sections: Mapping[str, Mapping]) -> list[str]:
    """Lines of one ``## title`` section per entry, each a :func:`bullet_list` of its flat dict,
    separated by blank lines: the parameter sections that end a results file."""
    lines: list[str] = []
    for title, values in sections.items():
        lines += ["", f"## {title}", "", bullet_list(values)]
    return lines[1:]


def record_end_load(header: dict) -> None:
    """Add the load average now (the end of the run) to a machine header."""
    header["load_average_1_5_15_min_at_end"] = [round(x, 2) for x in os.getloadavg()]
