"""A run's `Control` over a small authenticated HTTP endpoint on 127.0.0.1, so another
process (`tinker-tui attach`) can steer a run this process runs headless.

Server side (`ControlServer`): Starlette routes on uvicorn (`engine.loopback_http`, shared
with the policy server, whose bearer-token check it uses), started by the headless run on a
random port with a random token; it writes its address and token to a file beside the run
store that only the user can read (mode 0600) once it listens, and removes that file when it
stops. Every request must carry `Authorization: Bearer <token>`. Commands are the `Control`
methods:

    GET  /v1/state     -> {"paused", "stopping", "knobs", "run_id"}
    POST /v1/command   {"command": "pause" | "resume" | "checkpoint" | "eval" | "stop" | "set",
                        "args": {"reason": ...} | {"name": ..., "value": ...}}
                       -> {"ok": true, "state": {...}}  or 400 {"error": "..."}

The client side (`ControlClient`, `RemoteControl`, finding a run's control file) is
`engine.control.client`; the server's imports are deferred to `ControlServer.start`, so a
dashboard that imports this module loads no web framework. The protocol is documented for
users in docs/control-api.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tinker_tui.engine.config import LIVE_KNOBS
from tinker_tui.engine.control.client import (
    CONTROL_FILE_SUFFIX,
    ControlClient,
    ControlUnavailable,
    RemoteControl,
    control_file_orphaned,
    control_file_path,
    find_control_files,
    read_control_file,
)
from tinker_tui.engine.control.interface import Control

# The client side lives in `client` (one client for every front end); its names stay
# importable from here.
__all__ = [
    "COMMANDS",
    "CONTROL_FILE_SUFFIX",
    "MAX_BODY",
    "REQUEST_TIMEOUT",
    "ControlClient",
    "ControlServer",
    "ControlUnavailable",
    "RemoteControl",
    "apply_command",
    "control_app",
    "control_file_orphaned",
    "control_file_path",
    "control_state",
    "find_control_files",
    "read_control_file",
]

logger = logging.getLogger(__name__)

COMMANDS = ("pause", "resume", "checkpoint", "eval", "stop", "set", "rollback")
#: The largest command body accepted (a command is a few dozen bytes).
MAX_BODY = 64 * 1024
#: Seconds a request may take to arrive whole (head and body).
REQUEST_TIMEOUT = 10.0


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable and writable by the user only (0600), atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.replace(tmp, path)


def control_state(control: Control, run_id: str = "") -> dict[str, Any]:
    return {
        "run_id": run_id,
        "paused": bool(control.paused),
        "stopping": control.stopping,
        "knobs": dict(control.knobs()),
    }


def apply_command(control: Control, command: str, args: Mapping[str, Any]) -> None:
    """Call the `Control` method that `command` names; ValueError for a bad command."""
    reason = args.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ValueError("reason must be a string")
    if command == "pause":
        control.pause(reason) if reason else control.pause()
    elif command == "resume":
        control.resume()
    elif command == "checkpoint":
        control.request_checkpoint()
    elif command == "eval":
        control.request_eval()
    elif command == "stop":
        control.stop(reason) if reason else control.stop()
    elif command == "rollback":
        scale = args.get("lr_scale")
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)):
            raise ValueError("lr_scale must be a number")
        control.request_rollback(reason or "rolled back by user", scale)
    elif command == "set":
        name, value = args.get("name"), args.get("value")
        if not isinstance(name, str):
            raise ValueError(f"set needs a knob name, one of {', '.join(LIVE_KNOBS)}")
        control.set_knob(name, value)  # type: ignore[arg-type]  # the engine checks the type
    else:
        raise ValueError(f"unknown command {command!r}; the commands are {', '.join(COMMANDS)}")


# --------------------------------------------------------------------------- server


def control_app(control: Control, *, run_id: str, token: str) -> Any:
    """The endpoint as a Starlette app behind the bearer-token check the policy server uses."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from tinker_tui.engine.loopback_http import BearerAuth, BodyTooLarge, read_body

    def _error(status: int, message: str) -> Response:
        return JSONResponse({"error": message}, status_code=status)

    async def state(request: Request) -> Response:
        return JSONResponse(control_state(control, run_id))

    async def command(request: Request) -> Response:
        try:
            body = await read_body(request, MAX_BODY)
        except BodyTooLarge:
            return _error(413, "body too large")
        except ClientDisconnect:
            logger.debug("control endpoint: the client went away before its request was whole")
            return _error(400, "bad request")
        try:
            parsed = json.loads(body or b"{}")
        except ValueError:
            return _error(400, "the body is not JSON")
        if not isinstance(parsed, dict) or not isinstance(parsed.get("command"), str):
            return _error(400, 'expected {"command": ..., "args": {...}}')
        args = parsed.get("args") or {}
        if not isinstance(args, dict):
            return _error(400, "args must be an object")
        try:
            apply_command(control, parsed["command"], args)
        except ValueError as exc:
            return _error(400, str(exc))
        except Exception as exc:  # never let a client take the run down
            logger.exception("control endpoint: command failed")
            return _error(500, f"{type(exc).__name__}: {exc}")
        return JSONResponse({"ok": True, "state": control_state(control, run_id)})

    async def http_error(request: Request, exc: Exception) -> Response:
        """Starlette's 404 and 405, in this endpoint's JSON."""
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            allowed = [
                m for m in (exc.headers or {}).get("Allow", "").split(", ") if m and m != "HEAD"
            ]
            return _error(405, f"use {' or '.join(allowed)}")
        if exc.status_code == 404:
            return _error(404, f"no such endpoint {request.url.path}")
        return _error(exc.status_code, str(exc.detail))

    app = Starlette(
        routes=[
            Route("/v1/state", state, methods=["GET"]),
            Route("/v1/command", command, methods=["POST"]),
        ],
        exception_handlers={HTTPException: http_error},
    )
    return BearerAuth(app, token=token, refusal=lambda: _error(401, "missing or wrong token"))


class ControlServer:
    """Serves `control` on 127.0.0.1 (random port) to clients that hold the token."""

    def __init__(
        self,
        control: Control,
        *,
        run_id: str = "",
        token: str | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self.control = control
        self.run_id = run_id
        self.token = token or secrets.token_urlsafe(32)
        self.host = "127.0.0.1"
        self.port = 0
        self.request_timeout = request_timeout
        self.file: Path | None = None
        self._server: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(
        self, control_file: str | Path | None = None, extra: Mapping[str, Any] | None = None
    ) -> None:
        """Listen, then (if given) write the control file with the address and token."""
        # Imported here, not at the top: dashboards import this module for the client only.
        from tinker_tui.engine.loopback_http import LoopbackServer

        app = control_app(self.control, run_id=self.run_id, token=self.token)
        self._server = LoopbackServer(
            app, name="control-endpoint", request_timeout=self.request_timeout, shutdown_timeout=2
        )
        await self._server.start()
        self.port = self._server.port
        if control_file is not None:
            self.file = Path(control_file)
            self.file.parent.mkdir(parents=True, exist_ok=True)
            description = {
                "url": self.url,
                "token": self.token,
                "run_id": self.run_id,
                "pid": os.getpid(),
                **dict(extra or {}),
            }
            _write_private(self.file, json.dumps(description, indent=2) + "\n")

    def remove_file(self) -> None:
        """Remove the control file (no client may find an endpoint that is going away);
        also what a process that exits at once does, with no time to `stop`."""
        if self.file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.file.unlink()
            self.file = None

    async def stop(self) -> None:
        """Remove the control file and stop listening. Safe to call more than once."""
        self.remove_file()
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop()

    async def __aenter__(self) -> ControlServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
