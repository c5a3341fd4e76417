"""A run's `Control` over a small authenticated HTTP endpoint on 127.0.0.1, so another
process (`tinker-tui attach`) can steer a run this process runs headless.

Server side (`ControlServer`): started by the headless run on a random port with a random
token; it writes its address and token to a file beside the run store that only the user
can read (mode 0600) and removes that file when it stops. Every request must carry
`Authorization: Bearer <token>`. Commands are the `Control` methods:

    GET  /v1/state     -> {"paused", "stopping", "knobs", "run_id"}
    POST /v1/command   {"command": "pause" | "resume" | "checkpoint" | "eval" | "stop" | "set",
                        "args": {"reason": ...} | {"name": ..., "value": ...}}
                       -> {"ok": true, "state": {...}}  or 400 {"error": "..."}

Client side (`ControlClient`, and `RemoteControl`, which implements `Control` on top of it
for the dashboard). Only the standard library; no Textual.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import http.client
import json
import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tinker_tui.engine.control import LIVE_KNOBS, Control

logger = logging.getLogger(__name__)

#: The control file of run RUN_ID lives beside the store as RUN_ID + this suffix.
CONTROL_FILE_SUFFIX = ".control.json"
COMMANDS = ("pause", "resume", "checkpoint", "eval", "stop", "set")
_MAX_BODY = 64 * 1024
_READ_TIMEOUT = 10.0


class ControlUnavailable(ConnectionError):
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
        "stopping": bool(getattr(control, "stopping", False)),
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
    elif command == "set":
        name, value = args.get("name"), args.get("value")
        if not isinstance(name, str):
            raise ValueError(f"set needs a knob name, one of {', '.join(LIVE_KNOBS)}")
        control.set_knob(name, value)  # type: ignore[arg-type]  # the engine checks the type
    else:
        raise ValueError(f"unknown command {command!r}; the commands are {', '.join(COMMANDS)}")


# --------------------------------------------------------------------------- server


class ControlServer:
    """Serves `control` on 127.0.0.1 (random port) to clients that hold the token."""

    def __init__(self, control: Control, *, run_id: str = "", token: str | None = None,
                 host: str = "127.0.0.1") -> None:
        self.control = control
        self.run_id = run_id
        self.token = token or secrets.token_urlsafe(32)
        self.host = host
        self.port = 0
        self.file: Path | None = None
        self._server: asyncio.base_events.Server | None = None
        #: Requests answered (for tests and the log).
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self, control_file: str | Path | None = None,
                    extra: Mapping[str, Any] | None = None) -> None:
        """Listen, then (if given) write the control file with the address and token."""
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        if control_file is not None:
            self.file = Path(control_file)
            self.file.parent.mkdir(parents=True, exist_ok=True)
            description = {"url": self.url, "token": self.token, "run_id": self.run_id,
                           "pid": os.getpid(), **dict(extra or {})}
            _write_private(self.file, json.dumps(description, indent=2) + "\n")

    async def stop(self) -> None:
        """Remove the control file and stop listening. Safe to call more than once."""
        if self.file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.file.unlink()
            self.file = None
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)

    async def __aenter__(self) -> ControlServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body = await asyncio.wait_for(self._handle(reader), _READ_TIMEOUT)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError):
            status, body = 400, {"error": "bad request"}
        except Exception as exc:  # never let a client take the run down
            logger.exception("control endpoint: request failed")
            status, body = 500, {"error": f"{type(exc).__name__}: {exc}"}
        self.requests += 1
        payload = json.dumps(body).encode()
        reasons = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                   405: "Method Not Allowed", 413: "Payload Too Large", 500: "Server Error"}
        head = (f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n")
        try:
            writer.write(head.encode() + payload)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
        request_line = (await reader.readline()).decode("latin-1").strip()
        parts = request_line.split()
        if len(parts) != 3:
            return 400, {"error": "bad request line"}
        method, target, _ = parts
        headers: dict[str, str] = {}
        while True:
            line = (await reader.readline()).decode("latin-1")
            if line in ("\r\n", "\n", ""):
                break
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
            if len(headers) > 100:
                return 400, {"error": "too many headers"}
        length = int(headers.get("content-length", "0") or 0)
        if length > _MAX_BODY or length < 0:
            return 413, {"error": "body too large"}
        body = await reader.readexactly(length) if length else b""
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), self.token.encode()):
            return 401, {"error": "missing or wrong token"}
        path = urlsplit(target).path
        if path == "/v1/state":
            if method != "GET":
                return 405, {"error": "use GET"}
            return 200, control_state(self.control, self.run_id)
        if path == "/v1/command":
            if method != "POST":
                return 405, {"error": "use POST"}
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                return 400, {"error": "the body is not JSON"}
            if not isinstance(request, dict) or not isinstance(request.get("command"), str):
                return 400, {"error": 'expected {"command": ..., "args": {...}}'}
            args = request.get("args") or {}
            if not isinstance(args, dict):
                return 400, {"error": "args must be an object"}
            try:
                apply_command(self.control, request["command"], args)
            except ValueError as exc:
                return 400, {"error": str(exc)}
            return 200, {"ok": True, "state": control_state(self.control, self.run_id)}
        return 404, {"error": f"no such endpoint {path}"}


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

    remote = True

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

    def knobs(self) -> Mapping[str, float | int]:
        knobs = self._state.get("knobs")
        return dict(knobs) if isinstance(knobs, dict) else {}

    def set_knob(self, name: str, value: float | int) -> None:
        self._send("set", name=name, value=value)
