"""Blocking calls, off the event loop, on threads that can be abandoned.

Some calls into the tinker SDK block their caller: the first call on a `ServiceClient` builds
its session (config fetch, dynamic config, create_session, each retried by the SDK for up to
5 minutes), `tinker.RestClient()` fetches the config, `get_tokenizer()` may download, and
`close()` waits for a session still being built. They run here, each on its own daemon
thread, while the loop awaits the result.

Why not `asyncio.to_thread`: its executor's threads are joined when the loop shuts down and
again at interpreter exit, so a call the run has given up on (the service is unreachable, the
user pressed Ctrl+C) would still hold the process for minutes. A daemon thread is simply left
behind. Calls that return at once (submitting a training step or a sample returns an SDK
future) stay on the loop: moving them would cost a thread per call and their order.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller stopped waiting
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


async def on_daemon_thread(
    fn: Callable[..., T], *args: Any, name: str = "blocking-call", **kwargs: Any
) -> T:
    """`fn(*args, **kwargs)` on a new daemon thread; cancelling the await abandons it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the awaiting task
            error = exc
        try:
            loop.call_soon_threadsafe(_settle, future, result, error)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future


async def sdk_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A blocking SDK call on a daemon thread; an SDK future it returns is awaited too."""
    result = await on_daemon_thread(fn, *args, name="tinker-sdk-call", **kwargs)
    if hasattr(result, "__await__"):
        return await result
    return result
