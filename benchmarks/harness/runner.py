"""Running one benchmark module: its command line, its progress lines and its results files.

A run writes ``STEM.json`` (every number and parameter, the machine section, the ``targets``
list and the ``smoke`` flag), ``STEM.md`` (the tables the README quotes) and, when the module
draws one, ``STEM.png`` under ``--out`` (default ``benchmarks/results``). ``STEM`` is the
module's results name (its own name unless it defines ``results_name(settings)``), with
``_smoke`` added in a smoke run.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import ModuleType, UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from benchmarks.harness.machine import load_average, machine_section

RESULTS = Path(__file__).resolve().parents[1] / "results"
DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "runs" / "clinc150" / "bundle"
"""The V5 bundle the HTTP and encoder benchmarks serve unless ``--bundle`` names another."""


@dataclass
class Progress:
    """What a running benchmark gets from the harness: ``progress(message)`` prints an
    ``[elapsed s] message`` line (unless ``--quiet``), ``checkpoint(results)`` writes the results
    so far, and ``folder(name)`` is a folder for files beyond the three results files."""

    enabled: bool
    out: Path = RESULTS
    smoke: bool = False
    save: Callable[[dict, bool], object] | None = None
    started: float = field(default_factory=time.perf_counter)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"[{self.elapsed:7.1f} s] {message}", flush=True)

    def checkpoint(self, results: dict, plot: bool = False) -> None:
        """Write the JSON and Markdown of ``results`` now, so that an interrupted run keeps
        what it measured; ``plot``: the plot too (for a benchmark whose plot reads partial
        results, such as one that spans sessions)."""
        if self.save is not None:
            self.save(results, plot)

    def folder(self, name: str) -> Path:
        """``out/name`` (``out/name_smoke`` in a smoke run), created."""
        path = self.out / results_name(name, self.smoke)
        path.mkdir(parents=True, exist_ok=True)
        return path


def results_name(name: str, smoke: bool) -> str:
    """``name`` for a full run, ``name_smoke`` for a smoke run."""
    return f"{name}_smoke" if smoke else name


def int_list(text: str) -> tuple[int, ...]:
    """``"16,64,256"`` → ``(16, 64, 256)``: the type of a comma-separated option."""
    return tuple(int(part) for part in text.split(",") if part.strip())


def paths(text: str) -> tuple[Path, ...]:
    """``"a.json,b/c.json"`` → ``(Path("a.json"), Path("b/c.json"))``."""
    return tuple(Path(part.strip()) for part in text.split(",") if part.strip())


def yes_no(text: str) -> bool:
    """``yes`` / ``no`` (or true / false, 1 / 0) on the command line."""
    words = {"yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}
    if text.lower() not in words:
        raise argparse.ArgumentTypeError(f"expected yes or no, got {text!r}")
    return words[text.lower()]


def key_values(text: str) -> tuple[tuple[str, str], ...]:
    """``"queue_depth=64,http=httptools"`` → ``(("queue_depth", "64"), ("http", "httptools"))``:
    the type of an option that passes settings through (each becomes ``FRACTAL_KEY``)."""
    pairs = [part.partition("=") for part in text.split(",") if part.strip()]
    if any(not key.strip() or not sign for key, sign, _ in pairs):
        raise argparse.ArgumentTypeError(f"expected key=value pairs separated by commas: {text!r}")
    return tuple((key.strip(), value.strip()) for key, _, value in pairs)


def bundle_folder(text: str) -> Path:
    """A ``--bundle`` value: a folder with a ``manifest.json``."""
    path = Path(text)
    if not (path / "manifest.json").is_file():
        raise argparse.ArgumentTypeError(f"{path}: no manifest.json (make one with `fractal run`)")
    return path


def option(
    default: Any, help: str, *, parse: Callable[[str], Any] | None = None, required: bool = False
) -> Any:
    """A ``Settings`` field that the command line sets: ``--field-name VALUE``. ``parse`` turns
    the text into a value (default: from the field's type: numbers, text, paths, comma-separated
    tuples)."""
    return field(default=default, metadata={"help": help, "parse": parse, "required": required})


def _parser_of(hint: Any) -> Callable[[str], Any]:
    """How a command-line text becomes a value of type ``hint`` (``X | None`` reads as ``X``)."""
    if get_origin(hint) in (Union, UnionType):
        hint = next(arg for arg in get_args(hint) if arg is not type(None))
    if get_origin(hint) is tuple:
        item = get_args(hint)[0]
        return int_list if item is int else lambda text: tuple(text.split(","))
    return hint


def _text(value: object) -> str:
    """A default as it is typed on the command line (tuples comma-separated)."""
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def benchmark_parser(name: str, module: ModuleType) -> argparse.ArgumentParser:
    """The options every benchmark has, then one per :func:`option` field of its ``Settings``."""
    doc = (module.__doc__ or "").strip().split("\n\n")[0]
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks {name}", description=doc)
    parser.add_argument("--smoke", action="store_true", help="the small smoke run (CI runs it)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    hints = get_type_hints(module.Settings)
    for item in fields(module.Settings):
        if "help" in item.metadata:
            required = item.metadata["required"]
            parser.add_argument(
                "--" + item.name.replace("_", "-"),
                dest=item.name,
                type=item.metadata["parse"] or _parser_of(hints[item.name]),
                required=required,
                help=item.metadata["help"]
                + ("" if item.default is None else f" (default {_text(item.default)})"),
            )
    return parser


def settings_from(module: ModuleType, args: argparse.Namespace) -> Any:
    """``SMOKE`` or the default ``Settings``, with every option that was given."""
    base = module.SMOKE if args.smoke else module.Settings()
    given = {
        item.name: getattr(args, item.name)
        for item in fields(base)
        if getattr(args, item.name, None) is not None
    }
    return replace(base, **given)


def check_targets(targets: object) -> None:
    """Every results file has ``targets``: a list of ``{target, reached, met}`` entries."""
    if not isinstance(targets, list):
        raise TypeError(f"results['targets'] must be a list, not {type(targets).__name__}")
    for entry in targets:
        if not (isinstance(entry.get("target"), str) and isinstance(entry.get("met"), bool)):
            raise TypeError(f"a target needs a 'target' text and a 'met' flag: {entry}")
        if not isinstance(entry.get("reached"), str | int | float):
            raise TypeError(f"a target needs what was 'reached' (a number or a text): {entry}")


def write_results(out: Path, stem: str, report: dict, markdown: str) -> list[Path]:
    """``out/stem.json`` and ``out/stem.md``."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    md_path.write_text(markdown.rstrip("\n") + "\n", encoding="utf-8")
    return [json_path, md_path]


def run_benchmark(
    name: str,
    module: ModuleType,
    settings: object,
    *,
    smoke: bool,
    out: Path,
    quiet: bool,
    command: str,
) -> list[Path]:
    """Run ``module`` with ``settings`` and write its results files; their paths."""
    named = module.results_name(settings) if hasattr(module, "results_name") else name
    stem = results_name(named, smoke)
    machine = machine_section()

    def report_of(results: dict) -> dict:
        extra = results.get("machine", {})
        return {
            "smoke": smoke,
            "command": command,
            **results,
            "machine": machine | extra | {"load_average_1_5_15_min_at_end": load_average()},
        }

    def save(results: dict, plot: bool) -> list[Path]:
        report = report_of(results)
        paths = write_results(out, stem, report, module.markdown(report))
        if plot and hasattr(module, "plot"):
            module.plot(report, out / f"{stem}.png")
            paths.append(out / f"{stem}.png")
        return paths

    progress = Progress(not quiet, out, smoke, save)
    results = module.run(settings, progress)
    check_targets(results.get("targets"))
    paths = save(results | {"seconds": progress.elapsed}, plot=True)
    progress(f"wrote {out / stem}.{{{','.join(path.suffix[1:] for path in paths)}}}")
    return paths
