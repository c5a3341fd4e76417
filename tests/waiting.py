"""Waiting in tests for a condition, not for a fixed time.

A fixed sleep is either too short on a loaded machine (the test fails for no fault of the
code) or too long everywhere else (the suite crawls). `wait_until` polls a condition often
and gives up only at a generous deadline, failing with what it waited for.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds before a wait gives up: far past what any condition needs on a loaded machine.
DEADLINE = 30.0


async def wait_until(
    condition: Callable[[], T | Awaitable[T]],
    what: str = "the condition",
    *,
    timeout: float = DEADLINE,
    interval: float = 0.005,
) -> T:
    """Poll `condition` (plain or async) on the running loop until it is truthy; its value.

    Between polls the loop runs, so the tasks the condition waits on make progress."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        await asyncio.sleep(interval)


def wait_until_sync(
    condition: Callable[[], T],
    what: str = "the condition",
    *,
    timeout: float = DEADLINE,
    interval: float = 0.005,
) -> T:
    """`wait_until` for a test without an event loop (a process, a thread)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(interval)
    return value
