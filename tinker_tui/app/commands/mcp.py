"""`tinker-tui mcp`: an MCP server over stdio on the runs of one store, for coding agents
(`app.mcp_server`). It reads runs always; it steers them (pause, resume, checkpoint,
evaluate, set a knob, roll back, stop) only with `--allow-control`.

Needs the `mcp` extra (`pip install "tinker-tui[mcp]"`): the official MCP Python SDK.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from tinker_tui.app.commands.common import EXIT_OK, add_db_option, store_path
from tinker_tui.engine.errors import UsageError


def add_parser(commands: Any) -> None:
    mcp = commands.add_parser(
        "mcp",
        help="serve the runs to a coding agent (MCP over stdio)",
        description="An MCP server over stdin/stdout: tools that list the runs in the store "
        "and read a run's metrics, health, rollouts and log, and (with "
        "--allow-control) pause, resume, checkpoint, evaluate, set a knob, roll "
        "back and stop a running run. Register it with an agent as the command "
        "`tinker-tui mcp`.",
    )
    add_db_option(mcp)
    mcp.add_argument(
        "--allow-control",
        action="store_true",
        help="let the agent steer running runs (without it, acting tools refuse)",
    )


def main(args: argparse.Namespace) -> int:
    try:
        from tinker_tui.app.mcp_server import serve
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "mcp":
            raise
        raise UsageError(
            '`tinker-tui mcp` needs the MCP SDK: pip install "tinker-tui[mcp]"'
        ) from None
    asyncio.run(serve(store_path(args), allow_control=args.allow_control))
    return EXIT_OK
