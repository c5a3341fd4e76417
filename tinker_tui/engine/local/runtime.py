"""The one thread that runs all torch work of the local backend.

Why one thread: calls on a client then run in submission order, as Tinker guarantees
(submit `forward_backward` and `optim_step`, await later), and torch never runs on the asyncio
event loop, which keeps ticking while a step computes. Every public call returns the SDK's own
`AwaitableConcurrentFuture`, so `await f`, `f.result()` and `f.result_async()` all work.

The executor is created lazily and again after a fork (a child process has no such thread).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_executor_pid: int | None = None

THREADS_ENV = "TINKER_TUI_TORCH_THREADS"


def _init_torch_thread() -> None:
    import torch

    # One intra-op thread kept steps steady when another process used the second core
    # (up to ~3x slower steps with two); override with TINKER_TUI_TORCH_THREADS.
    threads = int(os.environ.get(THREADS_ENV, "1") or "1")
    if threads > 0:
        torch.set_num_threads(threads)


def torch_executor() -> ThreadPoolExecutor:
    """The process-wide single-thread executor for torch work."""
    global _executor, _executor_pid
    with _lock:
        if _executor is None or _executor_pid != os.getpid():
            _executor = ThreadPoolExecutor(
                max_workers=1,
                thread_name_prefix="tinker-local-torch",
                initializer=_init_torch_thread,
            )
            _executor_pid = os.getpid()
        return _executor


def submit(fn: Callable[..., T], *args: Any, **kwargs: Any) -> AwaitableConcurrentFuture[T]:
    """Run `fn` on the torch thread, after everything submitted before it."""
    return AwaitableConcurrentFuture(torch_executor().submit(fn, *args, **kwargs))


class ClientFuture(AwaitableConcurrentFuture[T]):
    """The future of a client (what `ServiceClient.create_*` returns).

    Like the SDK's back-compat futures, it also forwards attribute access to the client once it
    is ready, with a FutureWarning: old code that used the return value as the client keeps
    working. Prefer ``await`` or ``.result()``.
    """

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        warnings.warn(
            f"Using the future as the client is deprecated; call .result() on it, or await it, "
            f"to get the client first (accessed {name!r})",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(self.result(), name)


def submit_client(fn: Callable[..., T], *args: Any) -> ClientFuture[T]:
    """`submit` for client creation: the future also stands in for the client."""
    return ClientFuture(torch_executor().submit(fn, *args))


def completed(value: T) -> AwaitableConcurrentFuture[T]:
    """An already-finished future (for calls that need no torch work)."""
    fut: Future[T] = Future()
    fut.set_result(value)
    return AwaitableConcurrentFuture(fut)


def failed(error: BaseException) -> AwaitableConcurrentFuture[Any]:
    fut: Future[Any] = Future()
    fut.set_exception(error)
    return AwaitableConcurrentFuture(fut)
