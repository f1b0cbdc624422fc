"""``python -m benchmarks NAME [--smoke] [--out DIR] [--quiet] [options]`` and
``python -m benchmarks --list``; see :mod:`benchmarks`."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import BENCHMARKS
from benchmarks.harness.runner import benchmark_parser, run_benchmark, settings_from

USAGE = "usage: python -m benchmarks NAME [--smoke] [--out DIR] [--quiet] [options] | --list"


def summary(name: str) -> str:
    """The first sentence of a benchmark's docstring, read without importing the module."""
    source = (Path(__file__).parent / f"{name}.py").read_text(encoding="utf-8")
    paragraph = (ast.get_docstring(ast.parse(source)) or "").split("\n\n")[0]
    return " ".join(paragraph.split()).replace("``", "`")


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """Run the benchmark ``argv`` names; the paths of the files it wrote."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--list"]:
        width = max(map(len, BENCHMARKS))
        print("\n".join(f"{name:<{width}}  {summary(name)}" for name in BENCHMARKS))
        return []
    if not argv or argv[0] not in BENCHMARKS:
        given = f"unknown benchmark {argv[0]!r}; " if argv and argv[0][:1] != "-" else ""
        raise SystemExit(f"{USAGE}\n{given}benchmarks: {', '.join(BENCHMARKS)}")
    name, options = argv[0], argv[1:]
    module = importlib.import_module(f"benchmarks.{name}")
    args = benchmark_parser(name, module).parse_args(options)
    return run_benchmark(
        name,
        module,
        settings_from(module, args),
        smoke=args.smoke,
        out=args.out,
        quiet=args.quiet,
        command=" ".join(["python -m benchmarks", *argv]),
    )


if __name__ == "__main__":
    main()
