"""`tinker-tui`: the command line. Each sub-command lives in `app/commands/`.

Exit codes: 0 the run completed (or was stopped from the dashboard with `q`); 1 the run
failed; 2 bad usage (unknown task, bad setting, missing Tinker key, unusable store);
130 stopped by SIGINT (Ctrl+C) and 143 by SIGTERM, both after a graceful shutdown
(current step finished, checkpoint written, store flushed). A second signal exits at once.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from tinker_tui.engine.errors import EXIT_FAILED, EXIT_USAGE, TinkerTuiError

#: Sub-command modules under app/commands, in the order `--help` lists them.
COMMANDS = ("run", "show", "attach", "runs", "export")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinker-tui",
        description="Run and watch RL post-training of language models, locally or on Tinker.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"tinker_tui.app.commands.{name}").add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = importlib.import_module(f"tinker_tui.app.commands.{args.command}")
    try:
        return command.main(args)
    except TinkerTuiError as exc:  # the one place an error becomes an exit code
        return report(exc, exc.exit_code)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug or a failing backend
        return report(exc, EXIT_FAILED)


def report(exc: Exception, code: int) -> int:
    """One line on stderr; a usage error is the user's to fix, anything else failed the run
    (its traceback with TINKER_TUI_DEBUG=1). Returns `code`."""
    if code == EXIT_USAGE:
        print(f"tinker-tui: error: {exc}", file=sys.stderr)
        return code
    if os.environ.get("TINKER_TUI_DEBUG"):
        traceback.print_exception(exc)
    print(f"tinker-tui: run failed: {type(exc).__name__}: {exc} "
          "(set TINKER_TUI_DEBUG=1 for the traceback)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
