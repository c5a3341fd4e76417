"""What every `tinker-tui` command shares: the run store's flag and default place, the run
settings taken from the flags, and whether a dashboard can be shown.

A leaf: it imports nothing of the app, so any command (and the modules they use: resume,
the run summary) can import it without importing another command. When this lived in
`app.commands.run`, every command imported the `run` command to find the store, and `run`
imports what imports it back: a cycle through seven modules.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tinker_tui.engine.did_you_mean import did_you_mean
from tinker_tui.engine.errors import EXIT_OK, UsageError

__all__ = [
    "BACKENDS",
    "DEFAULT_DB",
    "EXIT_OK",
    "TENSORBOARD_BESIDE_STORE",
    "add_db_option",
    "config_overrides",
    "store_path",
    "wants_ui",
    "NAME_LENGTH",
    "NOTE_LENGTH",
    "add_label_options",
    "run_label",
    "check_label",
    "one_of",
]

DEFAULT_DB = Path("runs") / "tinker-tui.db"
#: The backends `--backend` takes.
BACKENDS = ("local", "tinker")
#: `--tensorboard` without a folder: `tensorboard/` beside the store.
TENSORBOARD_BESIDE_STORE = "<beside the store>"


def add_db_option(parser: Any) -> None:
    """`--db PATH`, the same for every command."""
    parser.add_argument(
        "--db",
        type=Path,
        metavar="PATH",
        help=f"the SQLite run store (default {DEFAULT_DB}; its folder must "
        "exist unless it is the default)",
    )


def one_of(choices: Iterable[str]) -> Callable[[str], str]:
    """An argparse `type` that takes one of `choices`, checked where they are declared:
    the error (one line, with the closest choice) is ours, so nothing reads argparse's
    wording, which changes between Python versions. Give `choices=` too: help and the
    reference list them."""
    allowed = tuple(choices)

    def check(value: str) -> str:
        if value in allowed:
            return value
        listed = ", ".join(repr(c) for c in allowed)
        raise argparse.ArgumentTypeError(
            f"invalid choice: {value!r} (choose from {listed}){did_you_mean(value, allowed)}"
        )

    return check


def store_path(args: argparse.Namespace) -> Path:
    return Path(args.db) if args.db is not None else DEFAULT_DB


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The run settings the command line set (one flag per `engine.config.SETTINGS`)."""
    from tinker_tui.engine.config import SETTINGS

    overrides = {
        name: getattr(args, name) for name in SETTINGS if getattr(args, name, None) is not None
    }
    if overrides.get("tensorboard_dir") == TENSORBOARD_BESIDE_STORE:
        overrides["tensorboard_dir"] = str(store_path(args).parent / "tensorboard")
    return overrides


def wants_ui(args: argparse.Namespace) -> bool:
    """A dashboard, unless `--no-ui`, `--json`, CI, or not on a terminal."""
    if args.no_ui or getattr(args, "json", False) or os.environ.get("CI"):
        return False
    return sys.stdout.isatty() and sys.stderr.isatty()


#: The longest run name and note (a name is for legends and lists: a few words).
NAME_LENGTH = 60
NOTE_LENGTH = 2000


def add_label_options(parser: Any) -> None:
    """`--name TEXT` and `--note TEXT`: the run's own name (header, `runs`, legends,
    trackers) and a note."""
    parser.add_argument(
        "--name",
        dest="run_name",
        metavar="TEXT",
        help="a short name for the run, shown with its id (header, runs, compare, W&B)",
    )
    parser.add_argument("--note", metavar="TEXT", help="a note kept with the run")


def run_label(args: argparse.Namespace) -> tuple[str, str]:
    """The checked (name, note) the command line gives the run ("" for none)."""
    name = " ".join((getattr(args, "run_name", None) or "").split())
    note = (getattr(args, "note", None) or "").strip()
    check_label(name, note)
    return name, note


def check_label(name: str, note: str) -> None:
    """UsageError for a name or note too long to show."""
    if len(name) > NAME_LENGTH:
        raise UsageError(f"--name is {len(name)} characters; at most {NAME_LENGTH}")
    if len(note) > NOTE_LENGTH:
        raise UsageError(f"--note is {len(note)} characters; at most {NOTE_LENGTH}")
