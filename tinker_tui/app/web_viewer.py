"""The dashboard process behind one browser page of `tinker-tui serve`.

`python -m tinker_tui.app.web_viewer --db PATH RUN [--read-only]`, started by the server
(`app.web_serve`) for each page, with textual-serve's web driver in its environment. A run
with a control endpoint is followed as `attach` follows it (its commands go to the run,
or, read-only, every control key is disabled); any other run is drawn as `show` draws it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

#: What a read-only page says when a control command is tried.
READ_ONLY_WHY = "read-only view (served with --read-only): the run cannot be steered from here"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tinker_tui.app.web_viewer")
    parser.add_argument("run", metavar="RUN")
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--read-only", action="store_true")
    return parser.parse_args(argv)


def session_for(db_path: Path, run_id: str, *, read_only: bool) -> object:
    """A `StoreSession` on the run: followed (and steered unless read-only) while it has a
    control endpoint, else the stored run."""
    from tinker_tui.app.commands.attach import connect
    from tinker_tui.app.store_session import ReadOnlyControl, StoreSession
    from tinker_tui.engine.control.client import control_file_path
    from tinker_tui.engine.errors import UsageError
    from tinker_tui.engine.store import find_run

    run = asyncio.run(find_run(db_path, run_id))
    control_file = control_file_path(db_path, run.run_id)
    if run.finished() is None and control_file.is_file():
        if read_only:
            return StoreSession(db_path, run, control=ReadOnlyControl(READ_ONLY_WHY), follow=True)
        try:
            control, _ = connect(db_path, run.run_id)
        except UsageError:  # the run ended between the check and now
            pass
        else:
            return StoreSession(db_path, run, control=control, follow=True)
    return StoreSession(db_path, run)


def main(argv: list[str] | None = None) -> int:
    from tinker_tui.app.tui import TinkerTuiApp

    args = parse(argv)
    app = TinkerTuiApp(session_for(args.db, args.run, read_only=args.read_only))  # type: ignore[arg-type]
    app.run()
    if app.run_error:
        print(app.run_error, file=sys.stderr)
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
