"""Every use `tinker-tui serve` makes of textual-serve's private names, in one module.

textual-serve is pinned (pyproject.toml): `AppService` starts a page's dashboard process
through a shell, from a command line; the viewer needs it started from an argument list
(no shell between, so paths need no quoting) and its process handle kept, which only
replacing its `_open_app_process` gives. Each private name used is in `PRIVATE_NAMES`; the
suite checks the installed textual-serve still has every one (tests/test_private_names.py)
and that no other module of the project reaches into its private names.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Sequence
from typing import Any

from textual_serve.app_service import AppService

#: (owner, name): the private names used below.
PRIVATE_NAMES = (
    ("textual_serve.app_service.AppService", "_open_app_process"),
    ("textual_serve.app_service.AppService", "_build_environment"),
    ("textual_serve.app_service.AppService", "_process"),
    ("textual_serve.app_service.AppService", "_stdin"),
)


class ExecAppService(AppService):
    """An `AppService` whose process is started from an argument list (no shell), its handle
    kept in `process`."""

    def __init__(self, argv: Sequence[str], **kwargs: Any) -> None:
        super().__init__(shlex.join(argv), **kwargs)
        self.argv = list(argv)
        self.process: asyncio.subprocess.Process | None = None

    async def _open_app_process(
        self, width: int = 80, height: int = 24
    ) -> asyncio.subprocess.Process:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._build_environment(width, height),
        )
        self._process = self.process
        self._stdin = self.process.stdin
        return self.process
