"""`tinker-tui compare RUN RUN [...]`: several runs side by side (`app.compare`).

Each RUN is a run id, a unique prefix of one, or a sweep's id (its runs); `--db` may be
given several times, and the runs are looked up in all those stores together. With a
terminal: the comparison view (a line per run in every metric chart, the table of what
differs); runs still running are followed. Headless (`--no-ui`, no terminal) it prints
the table: status, steps, final and best reward, duration, and each setting that differs.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.app.commands.common import DEFAULT_DB, EXIT_OK
from tinker_tui.app.json_output import add_json_option

if TYPE_CHECKING:
    from tinker_tui.engine.foreign.folder_reader import FolderFormat


def add_parser(commands: Any) -> None:
    compare = commands.add_parser(
        "compare",
        help="compare runs: their curves overlaid, the settings that differ",
        description="Compare runs: every metric chart draws a line per run, over a table "
        "of each run's status, steps, final and best reward, duration and the "
        "settings that differ. Without a terminal (or with --no-ui) it prints "
        "the table.",
    )
    compare.add_argument(
        "runs", nargs="*", metavar="RUN", help="run ids, unique prefixes of them, or a sweep's id"
    )
    compare.add_argument(
        "--db",
        type=Path,
        metavar="PATH",
        action="append",
        help=f"a run store to look in (default {DEFAULT_DB}); give it "
        "again to compare runs of several stores",
    )
    compare.add_argument(
        "--cookbook",
        type=Path,
        metavar="DIR",
        action="append",
        help="a tinker-cookbook run folder to compare too (give it again for several)",
    )
    compare.add_argument(
        "--art",
        type=Path,
        metavar="DIR",
        action="append",
        help="an ART model folder to compare too (give it again for several)",
    )
    compare.add_argument(
        "--no-ui", action="store_true", help="print the table instead (also when not on a terminal)"
    )
    compare.add_argument(
        "--same-eval-protocol",
        action="store_true",
        help="refuse (exit 2) when the runs' evaluations were sampled under different "
        "protocols (without it, the table marks them)",
    )
    add_json_option(compare, "compare")


def main(args: argparse.Namespace) -> int:
    from tinker_tui.app.commands.common import wants_ui
    from tinker_tui.app.compare import (
        foreign_compared,
        load_comparison,
        resolve_runs,
    )

    stores = list(dict.fromkeys(args.db or [DEFAULT_DB]))
    folders: list[tuple[FolderFormat, Path]] = [
        *(("cookbook", f) for f in dict.fromkeys(args.cookbook or [])),
        *(("art", f) for f in dict.fromkeys(args.art or [])),
    ]
    pairs = asyncio.run(resolve_runs(stores, args.runs, others=len(folders))) if args.runs else []
    if len(pairs) + len(folders) < 2:
        from tinker_tui.engine.errors import UsageError

        raise UsageError(
            "compare needs at least two runs (ids, prefixes, a sweep id, --cookbook or "
            "--art folders)"
        )
    foreign = [foreign_compared(kind, folder) for kind, folder in folders]
    if args.same_eval_protocol:
        from tinker_tui.app.compare import check_same_protocol

        loaded = asyncio.run(load_comparison(pairs, foreign))
        check_same_protocol(loaded)
        if args.json or not wants_ui(args):
            _print(args, loaded)
            return EXIT_OK
    if args.json or not wants_ui(args):
        _print(args, asyncio.run(load_comparison(pairs, foreign)))
        return EXIT_OK
    from tinker_tui.app.compare import open_comparison
    from tinker_tui.app.screens.compare import CompareApp

    app = CompareApp([*open_comparison(pairs), *foreign])
    app.run()
    return EXIT_OK


def _print(args: argparse.Namespace, runs: list[Any]) -> None:
    """The comparison as JSON (`--json`) or as the table."""
    from tinker_tui.app.compare import comparison_document, format_comparison

    if args.json:
        from tinker_tui.app.json_output import print_json

        print_json(comparison_document(runs))
    else:
        print(format_comparison(runs))
