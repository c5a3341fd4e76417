"""What the tinker SDK is doing on the wire, read from its log records.

The SDK retries by itself, in two layers, and says nothing above DEBUG: its HTTP client
retries a request up to 10 times (429, 5xx, connection errors; logged at DEBUG by
`tinker._base_client`), and its session code retries whole calls for up to 5 minutes (no log
at all, but every attempt's HTTP response is logged by the same client). Futures that the
service keeps answering `try_again` are logged at WARNING on every poll. Reading those
records is the one place the SDK exposes all of this, so `SdkWatch` turns them into:

* `Notice`s as they happen: a retry with its cause ("create_session 503 Service
  Unavailable, retry 3 in 4 s"), a `try_again`, or an SDK log line worth showing;
* the current cause of a wait (`cause()`): errors answered lately, try_again polls, a
  request sent and not answered, or a service that has not answered at all;
* how long the service has been unreachable (`unreachable_for()`): only connection
  failures, no HTTP answer, since then.

Records are read only for requests to this watch's base URL (the SDK may serve other
clients in the process). While installed, the `tinker` logger tree stops propagating to the
root logger (its warnings arrive as notices instead of raw lines on stderr, which would
also tear a full-screen dashboard); `uninstall()` restores it. Notices are delivered on the
SDK's own thread: the callback must be thread-safe (`loop.call_soon_threadsafe`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from tinker_tui.engine.backend.tinker_private import CLIENT_LOGGER

_ROOT_LOGGER = "tinker"
_API_PREFIX = "/api/v1/"
#: Failures and try_again polls older than this no longer explain a wait.
RECENT = 60.0


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the SDK did that a person watching the run should see.

    kind: "retry" (the SDK's HTTP client retries `endpoint` after `cause`, `attempt` is the
    retry's number and `delay` the backoff), "error" (a request to `endpoint` failed with
    `cause` and its HTTP client does not retry it; the SDK's session code may), "try_again"
    (the service answered a future's poll with try_again), or "log" (an SDK log line:
    `level`, `cause` is the message).
    """

    kind: str
    endpoint: str = ""
    cause: str = ""
    attempt: int = 0
    delay: float = 0.0
    level: str = "info"


def endpoint_of(url: str) -> str:
    """`http://h/api/v1/client/config` or `/api/v1/optim_step` -> `client/config`,
    `optim_step`; paths with ids name their kind (`sessions/{id}/finish` -> `sessions/finish`,
    `training_runs/{run}/checkpoints/...` -> `training_runs/checkpoints`)."""
    path = urlsplit(url).path
    if _API_PREFIX in path:
        path = path[path.find(_API_PREFIX) + len(_API_PREFIX) :]
    parts = path.strip("/").split("/")
    if parts[0] == "client":
        return "/".join(parts[:2])
    if parts[0] == "sessions" and len(parts) > 2:
        return f"sessions/{parts[2]}"
    if parts[0] == "training_runs" and len(parts) > 2:
        return "training_runs/checkpoints"
    return parts[0]


def _status_text(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _error_text(error: BaseException | None) -> str:
    if error is None:
        return "connection failed"
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"[:160] if text else type(error).__name__


class SdkWatch:
    def __init__(
        self,
        base_url: str,
        on_notice: Callable[[Notice], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.on_notice = on_notice
        self.clock = clock
        self._lock = threading.Lock()
        self._last_url: dict[int, str] = {}  # SDK task -> URL of its last request
        self._in_flight: dict[int, tuple[str, float]] = {}  # task -> (endpoint, sent at)
        self._retries: dict[int, int] = {}  # task -> retries since its last success
        self._cause: dict[int, str] = {}  # task -> why its last request failed
        self._failures: deque[tuple[float, str, str]] = deque(maxlen=512)  # (t, endpoint, cause)
        self._try_again: deque[float] = deque(maxlen=512)
        self._last_answer: float | None = None
        self._first_failure: float | None = None  # since the last answer
        self._last_failure = ""
        self._installed: list[tuple[logging.Logger, logging.Handler]] = []
        self._saved: tuple[int, bool, int] | None = None

    # ------------------------------------------------------------------ install
    def install(self) -> SdkWatch:
        if self._saved is not None:
            return self
        client = logging.getLogger(CLIENT_LOGGER)
        root = logging.getLogger(_ROOT_LOGGER)
        self._saved = (client.level, root.propagate, root.level)
        client.setLevel(logging.DEBUG)  # the retries are DEBUG records
        if root.level == logging.NOTSET or root.level > logging.INFO:
            root.setLevel(logging.INFO)
        root.propagate = False
        handler = _Handler(self)
        root.addHandler(handler)
        self._installed.append((root, handler))
        return self

    def uninstall(self) -> None:
        if self._saved is None:
            return
        client = logging.getLogger(CLIENT_LOGGER)
        root = logging.getLogger(_ROOT_LOGGER)
        for logger, handler in self._installed:
            logger.removeHandler(handler)
        self._installed.clear()
        client.setLevel(self._saved[0])
        root.propagate = self._saved[1]
        root.setLevel(self._saved[2])
        self._saved = None

    # ------------------------------------------------------------------ reading records
    def _notify(self, notice: Notice) -> None:
        if self.on_notice is not None:
            self.on_notice(notice)

    def _ours(self, url: str) -> bool:
        return url.startswith(self.base_url)

    def _read(self, record: logging.LogRecord) -> None:
        message, args = record.msg, record.args if isinstance(record.args, tuple) else ()
        try:
            task = id(asyncio.current_task())
        except RuntimeError:
            task = 0
        now = self.clock()
        if record.name == CLIENT_LOGGER:
            self._read_client(message, args, record, task, now)
        elif record.levelno >= logging.WARNING and "because of try_again" in str(message):
            with self._lock:
                self._try_again.append(now)
            self._notify(Notice("try_again", cause="try_again"))
        elif record.levelno >= logging.INFO and record.name.startswith(_ROOT_LOGGER):
            self._notify(
                Notice(
                    "log",
                    cause=record.getMessage().splitlines()[0][:300],
                    level="warning" if record.levelno >= logging.WARNING else "info",
                )
            )

    def _read_client(
        self,
        message: object,
        args: tuple[Any, ...],
        record: logging.LogRecord,
        task: int,
        now: float,
    ) -> None:
        if message == "Sending HTTP Request: %s %s" and len(args) == 2:
            url = str(args[1])
            with self._lock:
                if len(self._last_url) > 4096:  # tasks come and go: forget the oldest half
                    for old in list(self._last_url)[:2048]:
                        self._last_url.pop(old, None)
                        self._retries.pop(old, None)
                        self._cause.pop(old, None)
                self._last_url[task] = url
                if self._ours(url):
                    self._in_flight[task] = (endpoint_of(url), now)
            return
        url = self._last_url.get(task, "")
        if not self._ours(url):
            return
        endpoint = endpoint_of(url)
        if isinstance(message, str) and message.startswith("HTTP Response:") and len(args) >= 3:
            status = int(args[2])
            with self._lock:
                self._in_flight.pop(task, None)
                self._last_answer, self._first_failure = now, None
                if status >= 400:
                    cause = _status_text(status)
                    self._cause[task] = cause
                    self._failures.append((now, endpoint, cause))
                else:
                    self._retries.pop(task, None)
                    self._cause.pop(task, None)
        elif message in ("Encountered Exception", "Encountered httpx.TimeoutException"):
            error = record.exc_info[1] if record.exc_info else None
            cause = (
                "no answer within the SDK's timeout"
                if "Timeout" in str(message)
                else _error_text(error)
            )
            with self._lock:
                self._in_flight.pop(task, None)
                self._cause[task] = cause
                self._failures.append((now, endpoint, cause))
                self._last_failure = cause
                if self._first_failure is None:
                    self._first_failure = now
        elif message in (
            "Re-raising status error",
            "Raising connection error",
            "Raising timeout error",
        ):
            # The HTTP client gives up on this request (no retries left, or none allowed):
            # the SDK's session code may still try it again, silently. Show it.
            with self._lock:
                cause = self._cause.get(task, "failed")
            self._notify(Notice("error", endpoint=endpoint, cause=cause))
        elif message == "Retrying request to %s in %f seconds" and len(args) == 2:
            with self._lock:
                attempt = self._retries[task] = self._retries.get(task, 0) + 1
                cause = self._cause.get(task, "failed")
            self._notify(
                Notice(
                    "retry",
                    endpoint=endpoint_of(str(args[0])),
                    cause=cause,
                    attempt=attempt,
                    delay=float(args[1]),
                )
            )

    # ------------------------------------------------------------------ questions
    def unreachable_for(self) -> float:
        """Seconds since the first connection failure with no HTTP answer since (0: none)."""
        with self._lock:
            first = self._first_failure
        return 0.0 if first is None else self.clock() - first

    def unreachable_cause(self) -> str:
        with self._lock:
            return self._last_failure

    def troubled(self, since: float) -> bool:
        """Whether the service failed a call (or answered nothing) since `since`: a wait
        worth abandoning when the run stops, unlike a call that is only slow."""
        with self._lock:
            return self._first_failure is not None or any(f[0] >= since for f in self._failures)

    def cause(self, since: float | None = None) -> str:
        """Why calls are waiting, as far as the wire shows, over the last `RECENT` seconds
        (or since `since`, a time of this watch's clock); "" when nothing shows."""
        now = self.clock()
        start = max(now - RECENT, since if since is not None else now - RECENT)
        with self._lock:
            failures = [f for f in self._failures if f[0] >= start]
            polls = sum(1 for t in self._try_again if t >= start)
            unanswered = min(self._in_flight.values(), key=lambda v: v[1], default=None)
            first_failure = self._first_failure
        if first_failure is not None:
            return (
                f"unreachable for {now - first_failure:.0f} s: "
                f"{failures[-1][2] if failures else self._last_failure}"
            )
        if failures:
            when, endpoint, last = failures[-1]
            count = sum(1 for f in failures if f[2] == last)
            times = f", {count} times" if count > 1 else ""
            return (
                f"the service answered {endpoint} with {last}{times}, last {now - when:.0f} s ago"
            )
        if polls:
            return f"queued by the service: try_again, {polls} polls"
        if unanswered is not None:
            if unanswered[0] == "retrieve_future":  # a poll the service holds until done
                return "the service is working on it (its result not ready yet)"
            return f"{unanswered[0]} sent {now - unanswered[1]:.0f} s ago, no answer yet"
        return ""


class _Handler(logging.Handler):
    """Receives every record of the `tinker` logger tree (they propagate up to it)."""

    def __init__(self, watch: SdkWatch) -> None:
        super().__init__(logging.DEBUG)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.watch._read(record)
        except Exception:  # a record we cannot read must never break the SDK
            pass
