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

Client side (`ControlClient`, and `RemoteControl`, which implements `Control` on top of it
for the dashboard): only the standard library, and the server's imports are deferred to
`ControlServer.start`, so a dashboard that imports this module loads no web framework.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tinker_tui.engine.config import LIVE_KNOBS
from tinker_tui.engine.control.interface import Control
from tinker_tui.engine.errors import UsageError

logger = logging.getLogger(__name__)

#: The control file of run RUN_ID lives beside the store as RUN_ID + this suffix.
CONTROL_FILE_SUFFIX = ".control.json"
COMMANDS = ("pause", "resume", "checkpoint", "eval", "stop", "set", "rollback")
#: The largest command body accepted (a command is a few dozen bytes).
MAX_BODY = 64 * 1024
#: Seconds a request may take to arrive whole (head and body).
REQUEST_TIMEOUT = 10.0


class ControlUnavailable(UsageError, ConnectionError):
    """The run's control endpoint cannot be reached (the run ended, or never listened)."""


def control_file_path(db_path: str | Path, run_id: str) -> Path:
    """Where the control file of `run_id` is written: beside the store at `db_path`."""
    return Path(db_path).expanduser().parent / f"{run_id}{CONTROL_FILE_SUFFIX}"


def find_control_files(db_path: str | Path) -> list[Path]:
    """Control files beside the store, newest first."""
    folder = Path(db_path).expanduser().parent
    if not folder.is_dir():
        return []
    files = [p for p in folder.glob(f"*{CONTROL_FILE_SUFFIX}") if p.is_file()]
    return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)


def read_control_file(path: str | Path) -> dict[str, Any]:
    """The endpoint description in a control file; ControlUnavailable if it is unusable."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ControlUnavailable(f"no control file {path}: is the run still going?") from None
    except (OSError, ValueError) as exc:
        raise ControlUnavailable(f"cannot read control file {path}: {exc}") from None
    if not isinstance(data, dict) or not {"url", "token"} <= set(data):
        raise ControlUnavailable(f"control file {path} has no url and token")
    return data


def control_file_orphaned(path: str | Path) -> int | None:
    """The pid in a control file whose process is gone (killed before it could remove the
    file): nothing listens there any more. None when that process may still run, or the
    file names none."""
    try:
        pid = json.loads(Path(path).read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid
    except PermissionError:  # someone else's process now: not the run's
        return pid
    return None


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
            allowed = [m for m in (exc.headers or {}).get("Allow", "").split(", ")
                       if m and m != "HEAD"]
            return _error(405, f"use {' or '.join(allowed)}")
        if exc.status_code == 404:
            return _error(404, f"no such endpoint {request.url.path}")
        return _error(exc.status_code, str(exc.detail))

    app = Starlette(routes=[Route("/v1/state", state, methods=["GET"]),
                            Route("/v1/command", command, methods=["POST"])],
                    exception_handlers={HTTPException: http_error})
    return BearerAuth(app, token=token, refusal=lambda: _error(401, "missing or wrong token"))


class ControlServer:
    """Serves `control` on 127.0.0.1 (random port) to clients that hold the token."""

    def __init__(self, control: Control, *, run_id: str = "", token: str | None = None,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
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

    async def start(self, control_file: str | Path | None = None,
                    extra: Mapping[str, Any] | None = None) -> None:
        """Listen, then (if given) write the control file with the address and token."""
        # Imported here, not at the top: dashboards import this module for the client only.
        from tinker_tui.engine.loopback_http import LoopbackServer

        app = control_app(self.control, run_id=self.run_id, token=self.token)
        self._server = LoopbackServer(app, name="control-endpoint",
                                      request_timeout=self.request_timeout, shutdown_timeout=2)
        await self._server.start()
        self.port = self._server.port
        if control_file is not None:
            self.file = Path(control_file)
            self.file.parent.mkdir(parents=True, exist_ok=True)
            description = {"url": self.url, "token": self.token, "run_id": self.run_id,
                           "pid": os.getpid(), **dict(extra or {})}
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


# --------------------------------------------------------------------------- client


class ControlClient:
    """Blocking client of a `ControlServer` (standard library only)."""

    def __init__(self, url: str, token: str, *, timeout: float = 5.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ControlUnavailable(f"bad control endpoint address {url!r}")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port
        self.token = token
        self.timeout = timeout

    @classmethod
    def from_file(cls, path: str | Path, *, timeout: float = 5.0) -> ControlClient:
        data = read_control_file(path)
        return cls(str(data["url"]), str(data["token"]), timeout=timeout)

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
        """One request; ValueError (the server's message) for a refused command,
        PermissionError for a wrong token, ControlUnavailable when nothing answers."""
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ControlUnavailable(
                f"the run's control endpoint {self.url} does not answer ({exc})") from None
        finally:
            connection.close()
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {"error": raw.decode(errors="replace")}
        if response.status == 401:
            raise PermissionError(f"control endpoint {self.url} refused the token")
        if response.status != 200:
            raise ValueError(str(data.get("error", f"HTTP {response.status}")))
        if not isinstance(data, dict):
            raise ValueError(f"control endpoint {self.url} answered {data!r}, not an object")
        return data

    def state(self) -> dict[str, Any]:
        return self.request("GET", "/v1/state")

    def command(self, command: str, **args: Any) -> dict[str, Any]:
        return self.request("POST", "/v1/command", {"command": command, "args": args})


class RemoteControl:
    """`Control` of a run in another process, through its `ControlClient`.

    `paused`, `stopping` and `knobs()` answer from the last state the server sent (after
    every command, and whenever `refresh()` is called), so reading them never blocks.
    """

    def __init__(self, client: ControlClient) -> None:
        self.client = client
        self._state: dict[str, Any] = {"paused": False, "stopping": False, "knobs": {}}
        self.reachable = False

    def refresh(self) -> dict[str, Any]:
        """Fetch the state now (blocking); ControlUnavailable if the run does not answer."""
        try:
            self._state = self.client.state()
        except ControlUnavailable:
            self.reachable = False
            raise
        self.reachable = True
        return self._state

    def _send(self, command: str, **args: Any) -> None:
        try:
            reply = self.client.command(command, **args)
        except ControlUnavailable:
            self.reachable = False
            raise
        self.reachable = True
        state = reply.get("state")
        if isinstance(state, dict):
            self._state = state

    @property
    def paused(self) -> bool:
        return bool(self._state.get("paused"))

    @property
    def stopping(self) -> bool:
        return bool(self._state.get("stopping"))

    @property
    def health_stop_reason(self) -> str:
        """Not reported by the endpoint: the run's own process exits with that code."""
        return ""

    def pause(self, reason: str = "paused by user") -> None:
        self._send("pause", reason=reason)

    def resume(self) -> None:
        self._send("resume")

    def request_checkpoint(self) -> None:
        self._send("checkpoint")

    def stop(self, reason: str = "stopped by user") -> None:
        self._send("stop", reason=reason)

    def request_eval(self) -> None:
        self._send("eval")

    def request_rollback(self, reason: str = "rolled back by user",
                         lr_scale: float | None = None) -> None:
        self._send("rollback", reason=reason, lr_scale=lr_scale)

    def knobs(self) -> Mapping[str, float | int]:
        knobs = self._state.get("knobs")
        return dict(knobs) if isinstance(knobs, dict) else {}

    def set_knob(self, name: str, value: float | int) -> None:
        self._send("set", name=name, value=value)
