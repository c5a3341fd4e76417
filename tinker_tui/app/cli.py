"""`tinker-tui`: the command line. Each sub-command lives in `app/commands/`.

Exit codes: 0 the run completed (or was stopped from the dashboard with `q`); 1 the run
failed, or another command did (one line that names it: "eval failed: ..."); 2 bad usage
(unknown task, bad setting, missing Tinker key, unusable store); 130 stopped by SIGINT
(Ctrl+C) and 143 by SIGTERM, both after a graceful shutdown (current step finished,
checkpoint written, store flushed). A second signal exits at once.

A SIGINT or SIGTERM before the command handles signals itself ends it with 130 or 143 and
one line (`app.interrupts`); the module imports little, so that starts early.

Everything that can be checked without a model (arguments, settings, the task file, the
store, the Tinker key) is checked before torch, transformers or the dashboard are imported,
so a mistake is answered in well under a second.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from tinker_tui.app.argparse_private import option_strings, subcommand_parsers
from tinker_tui.app.commands.common import one_of
from tinker_tui.app.interrupts import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    exit_now,
    handlers_kept,
    interrupting,
    signal_of,
)
from tinker_tui.engine.did_you_mean import did_you_mean
from tinker_tui.engine.errors import TinkerTuiError

#: Sub-commands in the order `--help` lists them; each one's module is its name with "_"
#: for "-" (`agent-skill`: app/commands/agent_skill.py).
COMMANDS = (
    "run",
    "sweep",
    "show",
    "attach",
    "compare",
    "eval",
    "serve",
    "runs",
    "export",
    "export-model",
    "chat",
    "cost",
    "mcp",
    "agent-skill",
)


class ArgumentParser(argparse.ArgumentParser):
    """argparse without abbreviations (`--learning-rat` is an error, not `--learning-rate`)
    whose errors are one line, without the usage block."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        # Choices are checked where they are declared (`commands.common.one_of`), with the
        # suggestion in their own words: the message is only passed on, never read.
        self.exit(
            EXIT_USAGE, f"{self.prog}: error: {message}\n(`{self.prog} --help` lists the options)\n"
        )

    def option_strings(self) -> list[str]:
        return option_strings(self)

    def subcommand(self, name: str) -> ArgumentParser | None:
        parser = subcommand_parsers(self).get(name)
        return parser if isinstance(parser, ArgumentParser) else None


def unrecognized(extra: Sequence[str], parser: ArgumentParser) -> str:
    """The error for arguments no option took, naming the closest options."""
    options = parser.option_strings()
    parts = []
    after_option = False  # a value that followed an unknown option is not named again
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag.startswith("-") and len(flag) > 1 and not _is_number(flag):
            parts.append(f"unknown option {flag}{did_you_mean(flag, options)}")
            after_option = "=" not in arg
        elif not after_option:
            parts.append(f"unexpected argument {arg!r}")
        else:
            after_option = False
    return "; ".join(parts)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="tinker-tui",
        description="Run and watch RL post-training of language models, locally or on Tinker.",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=ArgumentParser
    )
    for name in COMMANDS:
        module = name.replace("-", "_")
        importlib.import_module(f"tinker_tui.app.commands.{module}").add_parser(commands)
    return parser


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parsed arguments; a usage error exits with code 2 and one line."""
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    # The command is the first word that is not an option (the top level takes no values).
    command = next((w for w in words if not w.startswith("-")), None)
    if command is not None:
        try:
            one_of(subcommand_parsers(parser))(command)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument COMMAND: {exc}")
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = parser.subcommand(args.command) or parser
        sub.error(unrecognized(extra, sub))
    return args


def main(argv: list[str] | None = None) -> int:
    """The command line (`argv`: the process's own when None). Called for the process, it
    does not return: the process ends with the command's code at once (`exit_now`). Tests
    pass `argv` and get the code back."""
    if argv is not None:
        with handlers_kept():
            return _main(argv)
    try:
        code = _main(None)
    except SystemExit as exc:  # argparse's usage errors and --help (their words are out)
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or EXIT_OK
        else:  # sys.exit("message"), as Python would say it
            print(exc.code, file=sys.stderr)
            code = EXIT_FAILED
    exit_now(code)


def _main(argv: list[str] | None) -> int:
    command_name = ""  # what failed, in the one line that says so
    try:
        with interrupting():  # a signal now: one line and 130/143, never a traceback
            args = parse(argv)
            command_name = args.command
            args.argv = list(sys.argv[1:] if argv is None else argv)  # a dashboard's engine
            module = args.command.replace("-", "_")
            command = importlib.import_module(f"tinker_tui.app.commands.{module}")
        return command.main(args)
    except TinkerTuiError as exc:  # the one place an error becomes an exit code
        return report(exc, exc.exit_code, command_name)
    except BrokenPipeError:  # `tinker-tui show | head`: the reader has all it wanted
        quiet_stdout()
        return EXIT_OK
    except KeyboardInterrupt as exc:
        signum = signal_of(exc)
        if signum is None:  # Python's own, where a command lets Ctrl+C through
            return EXIT_INTERRUPTED
        # before the command handled signals (`app.interrupts`): nothing has started
        print(
            f"tinker-tui: stopped by {signal.Signals(signum).name}; nothing was started",
            file=sys.stderr,
        )
        return EXIT_CODES[signum]
    except Exception as exc:  # a bug or a failing backend
        return report(exc, EXIT_FAILED, command_name)


def report(exc: Exception, code: int, command: str = "") -> int:
    """One line on stderr; a usage error is the user's to fix, anything else failed the
    command, which the line names ("run failed: ...", "eval failed: ..."; its traceback
    with TINKER_TUI_DEBUG=1). Returns `code`."""
    if code == EXIT_USAGE:
        print(f"tinker-tui: error: {exc}", file=sys.stderr)
        return code
    if os.environ.get("TINKER_TUI_DEBUG"):
        import traceback

        traceback.print_exception(exc)
    print(
        f"tinker-tui: {command or 'command'} failed: {type(exc).__name__}: {exc} "
        "(set TINKER_TUI_DEBUG=1 for the traceback)",
        file=sys.stderr,
    )
    return code


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush into the closed pipe
    does not print a second BrokenPipeError."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
