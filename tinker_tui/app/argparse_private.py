"""Every use the command line makes of argparse's private names, in one module.

argparse has no public way to list a parser's options or find a sub-command's parser,
which the one-line "did you mean" errors need (`app.cli`), nor to wrap help text
differently (`HelpFormatter`). They use `_actions`, `_SubParsersAction` and
`HelpFormatter._split_lines`, stable for many Python releases but private; each is in
`PRIVATE_NAMES`, and the suite checks this Python's argparse still has every one
(tests/test_private_names.py) and that no other module reaches into argparse's privates.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap

#: (owner, name): the private names used below.
PRIVATE_NAMES = (
    ("argparse.ArgumentParser", "_actions"),
    ("argparse", "_SubParsersAction"),
    ("argparse.HelpFormatter", "_split_lines"),
)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """`tinker-tui run --help`: option names in a column wide enough for the longest
    setting; examples kept as typed; a word never broken at its hyphen ("tinker-tui[wandb]"
    stays whole), which only overriding `_split_lines` gives."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34, width=min(100, _terminal_width()))

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _terminal_width() -> int:
    """The terminal's width ($COLUMNS first, as argparse does); 100 when not on one."""
    return shutil.get_terminal_size((100, 24)).columns


def actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every argument `parser` takes, options and positionals, in the order added."""
    return list(parser._actions)


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string `parser` takes (`-o`, `--output`, ...)."""
    return [s for action in parser._actions for s in action.option_strings]


def subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser of each sub-command of `parser`, by name (its aliases too)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found
