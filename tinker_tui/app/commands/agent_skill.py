"""`tinker-tui agent-skill`: print the skill file shipped in the package
(`tinker_tui/agent_skill.md`): how a coding agent should watch a run, what healthy looks
like, when to pause or roll back, and what never to do. Save it where an agent reads skills
(e.g. `tinker-tui agent-skill > .claude/skills/tinker-tui/SKILL.md`)."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from typing import Any

from tinker_tui.app.commands.common import EXIT_OK

SKILL_FILE = "agent_skill.md"


def add_parser(commands: Any) -> None:
    commands.add_parser(
        "agent-skill",
        help="print the skill file for coding agents",
        description="Print how a coding agent should watch and steer a run "
        "(a skill file, in Markdown).",
    )


def skill_text() -> str:
    return resources.files("tinker_tui").joinpath(SKILL_FILE).read_text(encoding="utf-8")


def main(args: argparse.Namespace) -> int:
    sys.stdout.write(skill_text())
    return EXIT_OK
