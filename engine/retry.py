"""Timeouts and bounded retries for calls to the training backend.

Every remote call the `Policy` makes (creating clients, sampling, forward_backward,
optim_step, saving) goes through `call_with_retry`. An attempt has a timeout; errors the
tinker SDK marks as transient (rate limits, a busy or unreachable service, server errors)
are retried with exponential backoff and jitter, a bounded number of times. Waiting is never
silent: each retry, and each attempt that runs longer than `slow_after` seconds (the
service queueing the request for capacity), is reported through `on_wait`, which the
policy turns into a `BackendWaited` event and a log line.

The SDK already retries at the HTTP level; this layer bounds the whole call (so a request
stuck in a queue cannot hang a run for hours) and makes the waits visible.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import tinker
from tinker_tui.engine.errors import TinkerTuiError

T = TypeVar("T")

#: The words a capacity wait is shown with, in the log and in `BackendWaited.reason`.
CAPACITY_WAIT = "waiting for Tinker capacity"


class BackendTimeoutError(TinkerTuiError, TimeoutError):
    """One attempt at a backend call took longer than its timeout."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a backend call may take and how often it is retried."""

    timeout: float = 600.0     # seconds one attempt may take
    attempts: int = 4          # tries in all (1 = no retry)
    base_delay: float = 1.0    # backoff before the first retry; doubles each time
    max_delay: float = 30.0    # backoff cap
    slow_after: float = 15.0   # report an attempt still running after this many seconds
    report_every: float = 60.0  # ... and again every this many seconds while it runs

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout}")
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Backoff before retry number `attempt` (1-based): base * 2^(attempt-1), capped,
        with up to 25 % jitter either way."""
        raw = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        jitter = (rng or random).uniform(-0.25, 0.25)
        return max(0.0, raw * (1 + jitter))


@dataclass(frozen=True, slots=True)
class Wait:
    """A wait worth showing: `operation` is waiting, `attempt` is the try it is on, and
    `delay` is the backoff about to be slept (`retrying`) or the seconds waited so far for
    an attempt still running."""

    operation: str
    reason: str
    attempt: int
    delay: float
    retrying: bool

    def describe(self) -> str:
        if self.retrying:
            return (f"{self.reason}: {self.operation} attempt {self.attempt} "
                    f"in {self.delay:.1f} s")
        return f"{self.reason}: {self.operation} has waited {self.delay:.0f} s"


WaitCallback = Callable[[Wait], None]


def is_retryable(error: BaseException) -> bool:
    """Transient errors, as the tinker SDK classifies them: worth trying again."""
    if isinstance(error, tinker.RateLimitError | tinker.InternalServerError
                  | tinker.APIConnectionError | BackendTimeoutError):
        return True
    if isinstance(error, tinker.RequestFailedError):
        return str(getattr(error, "category", "")).lower() == "server"
    return False


def wait_reason(error: BaseException) -> str:
    """What a person should read while the retry waits."""
    if isinstance(error, tinker.RateLimitError):
        return f"{CAPACITY_WAIT} (rate limited)"
    if isinstance(error, tinker.InternalServerError):
        return f"{CAPACITY_WAIT} (service busy: {_short(error)})"
    if isinstance(error, BackendTimeoutError):
        return f"retrying after a timeout ({error})"
    if isinstance(error, tinker.APIConnectionError):
        return f"Tinker unreachable, retrying ({type(error).__name__})"
    return f"retrying after {type(error).__name__}: {_short(error)}"


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
    slow_reason: str = CAPACITY_WAIT,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> T:
    """`await call(attempt)` with a timeout per attempt, retried on transient errors.

    `call` gets the 1-based attempt number (so a retried save can ask to overwrite) and
    returns anything awaitable (an SDK `APIFuture`, a coroutine). With `retry=False` (calls
    that must not run twice, such as an optimizer step) there is one attempt; the timeout
    and the slow-call reports still apply. The last error is re-raised unchanged.
    """
    attempts = policy.attempts if retry else 1
    attempt = 1
    while True:
        try:
            return await _attempt(call(attempt), operation=operation, attempt=attempt,
                                  policy=policy, on_wait=on_wait, slow_reason=slow_reason)
        except Exception as error:
            if attempt >= attempts or not is_retryable(error):
                raise
            delay = policy.delay(attempt, rng)
            if on_wait is not None:
                on_wait(Wait(operation, wait_reason(error), attempt + 1, delay, True))
            await sleep(delay)
            attempt += 1


async def _attempt(awaitable: Awaitable[T], *, operation: str, attempt: int,
                   policy: RetryPolicy, on_wait: WaitCallback | None,
                   slow_reason: str) -> T:
    task = asyncio.ensure_future(_await(awaitable))
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + policy.timeout
    next_report = started + policy.slow_after
    try:
        while True:
            now = loop.time()
            if now >= deadline:
                raise BackendTimeoutError(
                    f"{operation} took longer than {policy.timeout:g} s")
            done, _ = await asyncio.wait({task}, timeout=min(deadline, next_report) - now)
            if done:
                return task.result()
            now = loop.time()
            if now >= next_report and now < deadline:
                if on_wait is not None:
                    on_wait(Wait(operation, slow_reason, attempt, now - started, False))
                next_report = now + policy.report_every
    finally:
        if not task.done():
            task.cancel()
