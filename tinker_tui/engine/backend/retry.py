"""Timeouts, bounded retries and visible waits for calls to the training backend.

Every remote call the `BackendSession` makes (creating clients, sampling, forward_backward,
optim_step, saving) goes through `call_with_retry`. An attempt has a timeout; errors the
tinker SDK marks as transient (rate limits, a busy or unreachable service, server errors)
are retried with exponential backoff and jitter, a bounded number of times. Waiting is never
silent: each retry, and each attempt still running after `slow_after` seconds, is reported
through `on_wait` (the policy turns it into a `BackendWaited` event and a log line) with the
backend's name and the real cause, as far as it is known (`WaitContext.cause`: for Tinker,
what the SDK's requests met on the wire; see `engine.backend.sdk_watch`).

Two ways out besides success and timeout:
* unreachable: when the service has answered nothing at all (only connection failures) for
  `unreachable_after` seconds, the call fails with `BackendUnreachableError`, instead of
  waiting out the SDK's own retries (minutes);
* stop: once the run is stopping (`WaitContext.stopping` is set), a call that is waiting on
  trouble (it was reported, or is sleeping before a retry), or any call marked
  `abandon_on_stop` (start-up), is abandoned with `BackendInterrupted`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, TypeVar

import tinker

from tinker_tui.engine.errors import TinkerTuiError

T = TypeVar("T")


class BackendTimeoutError(TinkerTuiError, TimeoutError):
    """One attempt at a backend call took longer than its timeout."""


class BackendUnreachableError(TinkerTuiError, ConnectionError):
    """The service has answered nothing for `unreachable_after` seconds; the message says
    where it was looked for and what to check."""


class BackendInterrupted(TinkerTuiError):
    """A call given up because the run is stopping (it was waiting on a degraded backend, or
    was part of start-up)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a backend call may take and how often it is retried."""

    timeout: float = 600.0  # seconds one attempt may take
    attempts: int = 4  # tries in all (1 = no retry)
    base_delay: float = 1.0  # backoff before the first retry; doubles each time
    max_delay: float = 30.0  # backoff cap
    slow_after: float = 15.0  # report an attempt still running after this many seconds
    report_every: float = 60.0  # ... again after twice as long, then at most this far apart
    unreachable_after: float = 60.0  # fail once the service answered nothing for this long

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout}")
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Backoff before retry number `attempt` (1-based): base * 2^(attempt-1), capped,
        with up to 25 % jitter either way."""
        raw = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        jitter = (rng.uniform if rng is not None else random.uniform)(-0.25, 0.25)
        return max(0.0, raw * (1 + jitter))


def _no_cause(since: float) -> str:
    return ""


def _never_unreachable() -> tuple[float, str]:
    return 0.0, ""


def _never_troubled(since: float) -> bool:
    return False


@dataclass(slots=True)
class WaitContext:
    """What `call_with_retry` knows about the backend beyond the call itself."""

    backend: str = "backend"  # how waits name it: "Tinker", "local backend"
    where: str = ""  # the service's address, for the unreachable error
    #: The wire's explanation of a wait since a time (`loop.time()` clock); "" if none.
    cause: Callable[[float], str] = _no_cause
    #: (seconds the service has answered nothing, the last connection error).
    unreachable: Callable[[], tuple[float, str]] = _never_unreachable
    #: Whether the service failed calls (or answered nothing) since a time (`loop.time()`
    #: clock): a call that is only slow is not in trouble.
    troubled: Callable[[float], bool] = _never_troubled
    #: Set when the run stops: calls waiting on trouble are abandoned; a call that is only
    #: slow (a long forward_backward) is waited for, so a graceful stop loses no step.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True, slots=True)
class Wait:
    """A wait worth showing: `operation` on `backend` is waiting because of `cause`;
    `attempt` is the try it is on; `delay` is the backoff about to be slept (`retrying`) or
    the seconds waited so far for an attempt still running."""

    backend: str
    operation: str
    cause: str
    attempt: int
    delay: float
    retrying: bool

    @property
    def reason(self) -> str:
        """The backend and the cause (`BackendWaited.reason`)."""
        return f"{self.backend}: {self.cause}"

    def describe(self) -> str:
        if self.retrying:
            return (
                f"{self.backend}: {self.operation} {self.cause}, "
                f"retry {self.attempt - 1} in {self.delay:.1f} s"
            )
        return f"{self.backend}: {self.operation} has waited {self.delay:.0f} s ({self.cause})"


WaitCallback = Callable[[Wait], None]


def is_retryable(error: BaseException) -> bool:
    """Transient errors, as the tinker SDK classifies them: worth trying again."""
    if isinstance(
        error,
        tinker.RateLimitError
        | tinker.InternalServerError
        | tinker.APIConnectionError
        | BackendTimeoutError,
    ):
        return True
    if isinstance(error, tinker.RequestFailedError):
        return str(getattr(error, "category", "")).lower() == "server"
    return False


def _status(error: BaseException) -> str:
    code = getattr(error, "status_code", None)
    try:
        return f"{code} {HTTPStatus(code).phrase}" if code else ""
    except ValueError:
        return str(code)


def wait_reason(error: BaseException) -> str:
    """The cause of a retry, as a person should read it."""
    if isinstance(error, tinker.RateLimitError):
        return f"{_status(error) or '429'}: rate limited, waiting for capacity"
    if isinstance(error, tinker.InternalServerError):
        return _status(error) or _short(error)
    if isinstance(error, BackendTimeoutError):
        return f"timed out ({error})"
    if isinstance(error, tinker.APIConnectionError):
        return f"unreachable ({type(error).__name__}: {_short(error)})"
    return f"failed ({type(error).__name__}: {_short(error)})"


def _short(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:120]


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def call_with_retry(
    call: Callable[[int], Awaitable[T]],
    *,
    operation: str,
    policy: RetryPolicy,
    on_wait: WaitCallback | None = None,
    retry: bool = True,
    context: WaitContext | None = None,
    abandon_on_stop: bool = False,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> T:
    """`await call(attempt)` with a timeout per attempt, retried on transient errors.

    `call` gets the 1-based attempt number (so a retried save can ask to overwrite) and
    returns anything awaitable (an SDK `APIFuture`, a coroutine). With `retry=False` (calls
    that must not run twice, such as an optimizer step) there is one attempt; the timeout,
    the reports, the unreachable limit and the stop still apply. The last error is
    re-raised unchanged.
    """
    context = context or WaitContext()
    attempts = policy.attempts if retry else 1
    attempt = 1
    while True:
        if context.stopping.is_set() and abandon_on_stop:
            raise BackendInterrupted(f"{operation} not started: the run is stopping")
        try:
            return await _attempt(
                call(attempt),
                operation=operation,
                attempt=attempt,
                policy=policy,
                on_wait=on_wait,
                context=context,
                abandon_on_stop=abandon_on_stop,
            )
        except Exception as error:
            if attempt >= attempts or not is_retryable(error):
                raise
            delay = policy.delay(attempt, rng)
            if on_wait is not None:
                on_wait(
                    Wait(context.backend, operation, wait_reason(error), attempt + 1, delay, True)
                )
            if context.stopping.is_set():
                raise BackendInterrupted(
                    f"{operation} abandoned: the run is stopping "
                    f"({context.backend}: {wait_reason(error)})"
                ) from error
            sleeper = asyncio.ensure_future(sleep(delay))
            stop = asyncio.ensure_future(context.stopping.wait())
            try:
                await asyncio.wait({sleeper, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                stop.cancel()
            if context.stopping.is_set():
                raise BackendInterrupted(
                    f"{operation} abandoned: the run is stopping "
                    f"({context.backend}: {wait_reason(error)})"
                ) from error
            attempt += 1


#: How often a running attempt looks at the unreachable limit and the stop.
CHECK_EVERY = 0.5


async def _attempt(
    awaitable: Awaitable[T],
    *,
    operation: str,
    attempt: int,
    policy: RetryPolicy,
    on_wait: WaitCallback | None,
    context: WaitContext,
    abandon_on_stop: bool,
) -> T:
    task = asyncio.ensure_future(_await(awaitable))
    stop = asyncio.ensure_future(context.stopping.wait())
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + policy.timeout
    next_report = started + policy.slow_after
    reported = False
    try:
        while True:
            now = loop.time()
            if now >= deadline:
                raise BackendTimeoutError(f"{operation} took longer than {policy.timeout:g} s")
            if stop.done() and (abandon_on_stop or reported and context.troubled(started)):
                cause = context.cause(started) or "waiting"
                raise BackendInterrupted(
                    f"{operation} abandoned after {now - started:.0f} s: the run is stopping "
                    f"({context.backend}: {cause})"
                )
            silent, last_error = context.unreachable()
            if silent >= policy.unreachable_after:
                where = f" at {context.where}" if context.where else ""
                raise BackendUnreachableError(
                    f"{context.backend}{where} unreachable: no answer for {silent:.0f} s "
                    f"({last_error}); check the address and the network (TINKER_BASE_URL), "
                    f"or raise backend_unreachable_after (now {policy.unreachable_after:g} s)"
                )
            wake = min(deadline, next_report, now + CHECK_EVERY)
            waiting = {task} if stop.done() else {task, stop}
            done, _ = await asyncio.wait(
                waiting, timeout=max(0.0, wake - now), return_when=asyncio.FIRST_COMPLETED
            )
            if task in done:
                return task.result()
            now = loop.time()
            if now >= next_report and now < deadline:
                reported = True
                if on_wait is not None:
                    cause = context.cause(started) or "no answer yet"
                    on_wait(Wait(context.backend, operation, cause, attempt, now - started, False))
                # Again after twice the wait so far (15, 30, 60 s...), at most report_every.
                next_report = now + min(policy.report_every, max(now - started, policy.slow_after))
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
