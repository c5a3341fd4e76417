"""Which checkpoints a run keeps: the record of every checkpoint saved and still kept, and the
retention policy that deletes the others.

Of each kind ("sampler" weights, full "state") the last `keep_last` are kept, plus those
whose step is a multiple of `keep_every`; full checkpoints a person asked for, and the one
the run may roll back to, are kept besides. A deletion that fails is logged, never fatal.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tinker_tui.engine.backend.capabilities import RemovesCheckpoints

if TYPE_CHECKING:
    from tinker_tui.engine.events import CheckpointKind, Event

T = TypeVar("T")


def checkpoint_name(step: int, suffix: str = "") -> str:
    return f"step-{step:06d}{suffix}"


def checkpoints_to_delete(steps: Sequence[int], keep_last: int, keep_every: int) -> list[int]:
    """Indices (into `steps`, oldest first) of the checkpoints a retention policy removes:
    all but the last `keep_last` (0 keeps everything) and those whose step is a multiple of
    `keep_every` (0: none kept for that reason)."""
    if keep_last <= 0:
        return []
    first_kept = max(0, len(steps) - keep_last)
    return [
        i
        for i, step in enumerate(steps[:first_kept])
        if not (keep_every > 0 and step % keep_every == 0)
    ]


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    kind: CheckpointKind  # "state" (weights + optimizer) or "sampler" (weights for sampling)
    step: int
    name: str
    path: str


class LocalCheckpointRemover:
    """Deletes checkpoints of the local backend by path, as `tinker.RestClient` deletes
    them on the service (`delete_checkpoint_from_tinker_path`)."""

    def __init__(self, checkpoint_dir: Path) -> None:
        self.checkpoint_dir = Path(checkpoint_dir)

    def delete_checkpoint_from_tinker_path(self, path: str) -> Awaitable[None]:
        from tinker_tui.engine.local import checkpoints

        def remove() -> None:
            shutil.rmtree(checkpoints.resolve(self.checkpoint_dir, path))

        return asyncio.to_thread(remove)


#: How the retention policy calls the backend: (operation, call) with the session's retries.
BackendCall = Callable[[str, Callable[[int], Awaitable[Any]]], Awaitable[Any]]


class CheckpointRetention:
    """The checkpoints a backend session saved and still keeps, oldest first, and the policy
    that deletes old ones. It is handed how to reach the backend (`call`, `remover`), how to
    report (`log`, `on_event`, `now`) and what to tell when sampler weights go
    (`on_sampler_deleted`, so a sampling client loaded from them is dropped)."""

    def __init__(
        self,
        *,
        keep_last: int,
        keep_every: int,
        call: BackendCall,
        remover: Callable[[], Awaitable[RemovesCheckpoints | None]],
        log: Callable[[str, str], None],
        now: Callable[[], float],
        on_event: Callable[[Event], None] | None = None,
        on_sampler_deleted: Callable[[CheckpointRecord], None] | None = None,
    ) -> None:
        self.keep_last = keep_last
        self.keep_every = keep_every
        self._call = call
        self._make_remover = remover
        self._log = log
        self._now = now
        self._on_event = on_event
        self._on_sampler_deleted = on_sampler_deleted
        #: Every checkpoint this session saved and still keeps, oldest first.
        self.checkpoints: list[CheckpointRecord] = []
        #: The step of a full checkpoint the policy keeps (the run's rollback point).
        self.keep_state_step: int | None = None
        #: Steps of full checkpoints a person asked for (`c`, the control endpoint): kept,
        #: and they do not count toward `keep_last`.
        self.requested_state_steps: set[int] = set()
        self._remover: RemovesCheckpoints | None = None

    def adopt(self, records: Sequence[CheckpointRecord]) -> None:
        """Checkpoints an earlier process of this run saved (oldest first), so the policy
        counts them and deletes them in turn; without them, a resumed run kept every
        checkpoint from before the resume for good."""
        self.checkpoints[:0] = records

    def sampler_steps(self) -> set[int]:
        """Policy versions whose sampler weights are kept."""
        return {c.step for c in self.checkpoints if c.kind == "sampler"}

    def sampler_record(self, version: int) -> CheckpointRecord | None:
        """The newest kept sampler weights of policy `version`."""
        return next(
            (c for c in reversed(self.checkpoints) if c.kind == "sampler" and c.step == version),
            None,
        )

    async def record(self, record: CheckpointRecord) -> None:
        """A new checkpoint: keep it, and delete what the policy no longer keeps."""
        self.checkpoints.append(record)
        same = [
            c
            for c in self.checkpoints
            if c.kind == record.kind
            and not (c.kind == "state" and c.step in self.requested_state_steps)
        ]
        keep_last = self.keep_last
        if record.kind == "state" and keep_last:
            # Never fewer than two: the newest may not be confirmed by the run store yet when
            # a crash hits, and a resume then needs the one before it.
            keep_last = max(keep_last, 2)
        doomed = [
            same[i]
            for i in checkpoints_to_delete([c.step for c in same], keep_last, self.keep_every)
            if not (record.kind == "state" and same[i].step == self.keep_state_step)
        ]
        for old in doomed:
            self.checkpoints.remove(old)
            if old.kind == "sampler" and self._on_sampler_deleted is not None:
                self._on_sampler_deleted(old)
            await self._delete(old)

    async def rewind(self, step: int, version: int) -> None:
        """Back to the full checkpoint of `step` (policy `version`): full checkpoints of later
        steps and sampler weights of later versions are deleted."""
        self.requested_state_steps = {s for s in self.requested_state_steps if s <= step}
        for old in [
            c for c in self.checkpoints if c.step > (step if c.kind == "state" else version)
        ]:
            self.checkpoints.remove(old)
            await self._delete(old)

    async def _delete(self, record: CheckpointRecord) -> None:
        """Delete an old checkpoint; a failure is logged, never fatal."""
        try:
            if self._remover is None:
                self._remover = await self._make_remover()
            remover = self._remover
        except Exception as exc:
            self._log(
                "warning",
                f"could not delete old checkpoint {record.path}: {type(exc).__name__}: {exc}",
            )
            return
        if remover is None:
            return
        try:
            await self._call(
                f"delete checkpoint {record.name}",
                lambda _: remover.delete_checkpoint_from_tinker_path(record.path),
            )
        except Exception as exc:
            self._log(
                "warning",
                f"could not delete old checkpoint {record.path}: {type(exc).__name__}: {exc}",
            )
            return
        if self._on_event is not None:
            from tinker_tui.engine.events import CheckpointDeleted

            self._on_event(
                CheckpointDeleted(
                    time=self._now(),
                    step=record.step,
                    kind=record.kind,
                    name=record.name,
                    path=record.path,
                )
            )
