"""The client side of a run's control endpoint: find a running run's endpoint beside its
store, and call its operations. `tinker_tui.control` re-exports it for scripts; `attach`,
the dashboard a `run` starts, the browser view and `tinker-tui mcp` all go through it, so
there is one client, and one page documents it (docs/control-api.md).

    from tinker_tui.control import connect

    run = connect("run-20261204")   # or connect() for the newest running run
    run.status()                    # {"run_id", "paused", "stopping", "knobs"}
    run.pause("looking at the rollouts")
    run.set("learning_rate", 5e-4)
    run.resume()

Every operation is one blocking HTTP request on 127.0.0.1 (standard library only: a
script or a dashboard that imports this loads no web framework). Errors: `CommandRefused`
(a ValueError: the run refused the command, its message says why), `PermissionError` (wrong
token), `ControlUnavailable` (nothing answers, no such running run; a `UsageError`, so the
command line prints it as one line).
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tinker_tui.engine.errors import UsageError

__all__ = [
    "CONTROL_FILE_SUFFIX",
    "DEFAULT_STORE",
    "AmbiguousRun",
    "CommandRefused",
    "ControlClient",
    "ControlUnavailable",
    "NoEndpoint",
    "RemoteControl",
    "RunNotRunning",
    "connect",
    "control_file_orphaned",
    "control_file_path",
    "find_control_file",
    "find_control_files",
    "read_control_file",
]

#: The control file of run RUN_ID lives beside the store as RUN_ID + this suffix.
CONTROL_FILE_SUFFIX = ".control.json"
#: The store the command line uses without `--db` (`app.commands.common.DEFAULT_DB`).
DEFAULT_STORE = Path("runs") / "tinker-tui.db"


class ControlUnavailable(UsageError, ConnectionError):
    """The run's control endpoint cannot be reached (the run ended, or never listened)."""


class NoEndpoint(ControlUnavailable):
    """No running run beside the store is the one asked for (`wanted`; None: any)."""

    def __init__(self, message: str, wanted: str | None) -> None:
        super().__init__(message)
        self.wanted = wanted


class AmbiguousRun(ControlUnavailable):
    """The run named is a prefix of several running runs' ids."""


class RunNotRunning(ControlUnavailable):
    """The run's control file is stale: its process (`pid`) is gone without removing it."""

    def __init__(self, run_id: str, pid: int | None, control_file: Path) -> None:
        super().__init__(
            f"run {run_id} is not running: its process (pid {pid}) is gone and "
            f"its control file {control_file} is stale"
        )
        self.run_id = run_id
        self.pid = pid
        self.control_file = control_file


class CommandRefused(UsageError, ValueError):
    """The run refused a command (HTTP 4xx/5xx); the message is the endpoint's `error`
    (a ValueError, as the run's own `Control` raises for a bad knob)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------- control files


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


def run_id_of(control_file: Path) -> str:
    return control_file.name.removesuffix(CONTROL_FILE_SUFFIX)


def find_control_file(db_path: str | Path, wanted: str | None = None) -> Path:
    """The control file of the running run `wanted` names (a run id or a unique prefix;
    None: the newest running run). A file whose process is gone is stale: passed over, and
    `RunNotRunning` when it is the one asked for (or, with none asked for, the newest).
    `NoEndpoint` when no running run matches."""
    every = find_control_files(db_path)
    files = [f for f in every if control_file_orphaned(f) is None]
    if wanted:
        exact = control_file_path(db_path, wanted)
        if exact.is_file():
            pid = control_file_orphaned(exact)
            if pid is not None:
                raise RunNotRunning(wanted, pid, exact)
            return exact
        files = [f for f in files if f.name.startswith(wanted)]
        if len(files) > 1:
            names = ", ".join(run_id_of(f) for f in files)
            raise AmbiguousRun(f"{wanted!r} matches several running runs: {names}")
    stale = [f for f in every if f not in files]
    if not files and not wanted and stale:  # the newest run that did not end: say what it is
        newest = max(stale, key=lambda f: f.stat().st_mtime)
        raise RunNotRunning(run_id_of(newest), control_file_orphaned(newest), newest)
    if not files and wanted:
        raise NoEndpoint(f"no running run {wanted!r} beside {db_path}", wanted)
    if not files:
        raise NoEndpoint(
            f"no control endpoint for any run beside {db_path}: start the run "
            "with `tinker-tui run TASK --no-ui` (same --db), or use "
            "`tinker-tui show` for a finished run",
            None,
        )
    return files[0]


def connect(
    run: str | None = None, *, db: str | Path = DEFAULT_STORE, timeout: float = 5.0
) -> ControlClient:
    """A client of the running run `run` (a run id, a unique prefix, None: the newest
    running run) in the store `db`, checked to answer: its `run_id` is the run's own."""
    control_file = find_control_file(db, run)
    client = ControlClient.from_file(control_file, timeout=timeout)
    state = client.status()
    client.run_id = str(state.get("run_id") or run_id_of(control_file))
    return client


# --------------------------------------------------------------------------- the client


class ControlClient:
    """Blocking client of a run's control endpoint (standard library only).

    The operations return the run's state after the command (`status()`'s shape)."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 5.0,
        run_id: str = "",
        pid: int | None = None,
        control_file: Path | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ControlUnavailable(f"bad control endpoint address {url!r}")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port
        self.token = token
        self.timeout = timeout
        self.run_id = run_id
        #: The run's process (from its control file), for a front end that waits on it.
        self.pid = pid
        self.control_file = control_file

    @classmethod
    def from_file(cls, path: str | Path, *, timeout: float = 5.0) -> ControlClient:
        data = read_control_file(path)
        pid = data.get("pid")
        return cls(
            str(data["url"]),
            str(data["token"]),
            timeout=timeout,
            run_id=str(data.get("run_id") or run_id_of(Path(path))),
            pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            control_file=Path(path),
        )

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """One request; CommandRefused (the server's message) for a refused command,
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
                f"the run's control endpoint {self.url} does not answer ({exc})"
            ) from None
        finally:
            connection.close()
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {"error": raw.decode(errors="replace")}
        if response.status == 401:
            raise PermissionError(f"control endpoint {self.url} refused the token")
        if response.status != 200:
            error = data.get("error") if isinstance(data, dict) else None
            raise CommandRefused(str(error or f"HTTP {response.status}"), response.status)
        if not isinstance(data, dict):
            raise CommandRefused(
                f"control endpoint {self.url} answered {data!r}, not an object", response.status
            )
        return data

    def command(self, command: str, **args: Any) -> dict[str, Any]:
        """POST /v1/command: the raw reply, {"ok": true, "state": {...}}."""
        return self.request("POST", "/v1/command", {"command": command, "args": args})

    def _state_after(self, command: str, **args: Any) -> dict[str, Any]:
        state = self.command(command, **{k: v for k, v in args.items() if v is not None})
        return dict(state.get("state") or {})

    # ------------------------------------------------------------------ operations
    def status(self) -> dict[str, Any]:
        """{"run_id", "paused", "stopping", "knobs": {name: value}}."""
        return self.request("GET", "/v1/state")

    #: The endpoint's older name for `status`.
    state = status

    def pause(self, reason: str | None = None) -> dict[str, Any]:
        """No new rollouts start; those in flight finish; the trainer finishes its step."""
        return self._state_after("pause", reason=reason)

    def resume(self) -> dict[str, Any]:
        return self._state_after("resume")

    def checkpoint(self) -> dict[str, Any]:
        """A full checkpoint after the current step (at once while paused)."""
        return self._state_after("checkpoint")

    def evaluate(self) -> dict[str, Any]:
        """Run the evaluator on the current policy as soon as possible."""
        return self._state_after("eval")

    def set(self, name: str, value: float | int) -> dict[str, Any]:
        """Change a live knob (`engine.config.LIVE_KNOBS`); CommandRefused for a bad one."""
        return self._state_after("set", name=name, value=value)

    def rollback(self, reason: str | None = None, lr_scale: float | None = None) -> dict[str, Any]:
        """Back to the checkpoint of the weights that sampled the best step, the learning rate
        scaled by `lr_scale` (default: the run's `rollback_lr_scale`)."""
        return self._state_after("rollback", reason=reason, lr_scale=lr_scale)

    def stop(self, reason: str | None = None) -> dict[str, Any]:
        """Graceful stop: finish the step, checkpoint, flush, end the run's process."""
        return self._state_after("stop", reason=reason)


class RemoteControl:
    """`Control` of a run in another process, through its `ControlClient` (what a dashboard
    drives).

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
            self._state = self.client.status()
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

    def request_rollback(
        self, reason: str = "rolled back by user", lr_scale: float | None = None
    ) -> None:
        self._send("rollback", reason=reason, lr_scale=lr_scale)

    def knobs(self) -> Mapping[str, float | int]:
        knobs = self._state.get("knobs")
        return dict(knobs) if isinstance(knobs, dict) else {}

    def set_knob(self, name: str, value: float | int) -> None:
        self._send("set", name=name, value=value)
