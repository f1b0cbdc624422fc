"""``fractal check INDEX_DIR``: every stored document of an embedded index folder against its
checksum, and every store's pages, with a progress bar (:mod:`index.integrity`).

It prints one line per collection, then one per problem (the document's id for a row), and ends
with exit status 0 when everything is sound and 1 when it found a problem. A folder that holds no
collection is bad input: one ``error:`` line and status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bulk.errors import BulkError


def _cmd_check(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from index.integrity import NotAnIndexDir, check_index_dir

    with tqdm(desc="check", unit="doc", disable=args.no_progress, file=sys.stderr) as bar:
        try:
            results = check_index_dir(args.index_dir, bar.update)
        except NotAnIndexDir as exc:
            raise BulkError(str(exc)) from exc
    for result in results:
        problems = result.page_problems + result.row_problems
        state = "sound" if result.sound else f"{len(problems):,} problem(s)"
        print(f"{result.collection}: {result.documents:,} documents, {state} ({result.path})")
        for problem in problems:
            print(f"  {problem}")
    return 0 if all(result.sound for result in results) else 1


def add_check_command(commands: argparse._SubParsersAction) -> None:
    """``fractal check``: an index folder's stores, page by page and row by row."""
    check = commands.add_parser(
        "check",
        help="check every document of an index dir against its checksum (exit 1 on a problem)",
    )
    check.add_argument("index_dir", type=Path, help="FRACTAL_INDEX_DIR (embedded backend)")
    check.add_argument("--no-progress", action="store_true")
    check.set_defaults(handler=_cmd_check)
