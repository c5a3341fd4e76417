"""What every reader of another program's run folder offers, and opening one by format.

`CookbookRun` and `ArtRun` read different folders into the same typed events; the session
that follows a folder, the headless printer and the comparison take either as a
`FolderReader`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from tinker_tui.engine.clock import Clock
from tinker_tui.engine.events import Event, RunFinished, RunStarted

FolderFormat = Literal["cookbook", "art"]


class FolderReader(Protocol):
    """An incremental reader of one run folder: `poll` returns what it gained since."""

    backend: str
    run_id: str
    started: RunStarted | None
    finished: RunFinished | None
    step: int
    #: Why a run the folder shows as not ended may still be running, in words.
    not_ended: str

    def poll(self) -> list[Event]: ...


def open_folder(kind: FolderFormat, folder: str | Path, clock: Clock) -> FolderReader:
    """The reader of a `kind` run folder; `UsageError` for a folder that is not one."""
    if kind == "art":
        from tinker_tui.engine.foreign.art_run import ArtRun

        return ArtRun(folder, clock)
    from tinker_tui.engine.foreign.cookbook_run import CookbookRun

    return CookbookRun(folder, clock)
