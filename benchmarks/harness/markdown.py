"""Markdown pieces the benchmarks' renderers share: tables, bullet lists, speed-ups in words."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub Markdown table; floats are written as given (format them before)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def targets_table(targets: Sequence[Mapping]) -> str:
    """A benchmark's ``targets`` list as a table: target, the number reached, met (a missed
    one in bold)."""
    return markdown_table(
        ["target", "reached", "met"],
        [[t["target"], t["reached"], "yes" if t["met"] else "**no**"] for t in targets],
    )


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
