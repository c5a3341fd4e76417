"""The life of a batch of equal requests, in one place for both coalescers: the policy
server's sampling calls (`coalesce`) and the rollouts' HTTP requests (`coalescing_client`).

A batch opens with its first member and is sent when its window ends or it is full (the
coalescer decides which, and what sending it means). A member whose caller stops waiting
leaves a batch not sent yet (an empty one is dropped with its timer); once a batch is sent,
it is cancelled only when nobody waits for it any more; a send that fails tells every caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, Protocol, TypeVar


class Batch(Protocol):
    """What a coalescer's batch holds for its life here."""

    timer: asyncio.TimerHandle | None
    task: asyncio.Task[None] | None

    @property
    def key(self) -> Hashable: ...

    @property
    def members(self) -> list[Any]: ...

    def waiting(self) -> Sequence[Any]: ...


B = TypeVar("B", bound=Batch)


class OpenBatches(Generic[B]):
    """The batches not sent yet, by key."""

    def __init__(self) -> None:
        self.open: dict[Hashable, B] = {}

    def get(self, key: Hashable) -> B | None:
        return self.open.get(key)

    def add(
        self, batch: B, loop: asyncio.AbstractEventLoop, window: float, send: Callable[[B], None]
    ) -> None:
        """Open `batch`, sent by `send` when `window` seconds have passed."""
        self.open[batch.key] = batch
        batch.timer = loop.call_later(window, send, batch)

    def left(self, batch: B, member: object) -> None:
        """`member`'s caller stopped waiting (module docstring)."""
        if batch.task is None:
            batch.members.remove(member)
            if not batch.members:
                self._close(batch)
        elif not batch.waiting() and not batch.task.done():
            batch.task.cancel()

    def closing(self, batch: B) -> bool:
        """Take `batch` off the open ones; whether it is to be sent now (it was not sent
        yet and somebody is in it)."""
        if batch.task is not None:
            return False
        self._close(batch)
        return bool(batch.members)

    def failed(self, batch: B, error: BaseException) -> None:
        """Sending `batch` failed: every caller still waiting gets the error; cancelled (the
        last caller left, or the loop is closing): every member is cancelled."""
        if isinstance(error, asyncio.CancelledError):
            for member in batch.members:
                member.future.cancel()
        else:
            for member in batch.waiting():
                member.future.set_exception(error)

    def _close(self, batch: B) -> None:
        if batch.timer is not None:
            batch.timer.cancel()
        if self.open.get(batch.key) is batch:
            del self.open[batch.key]
