"""Name a run and note something about it, from a dashboard: two prompts (the name, then
the note), written to the store (`engine.store.records.set_run_label`, in a thread: the
engine may be writing the file) for every client to see."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App


def edit_run_label(
    app: App[Any],
    db_path: Path,
    run_id: str,
    name: str,
    note: str | None,
    *,
    done: Callable[[str, str], None],
) -> None:
    """Ask for the run's name, then its note (`note` None: read it from the store first);
    `done(name, note)` once stored."""
    from tinker_tui.app.commands.common import NAME_LENGTH, NOTE_LENGTH
    from tinker_tui.app.screens.text_prompt import TextPromptScreen

    def check_name(text: str) -> str | None:
        n = len(" ".join(text.split()))
        return f"at most {NAME_LENGTH} characters (this is {n})" if n > NAME_LENGTH else None

    def check_note(text: str) -> str | None:
        n = len(text.strip())
        return f"at most {NOTE_LENGTH} characters (this is {n})" if n > NOTE_LENGTH else None

    async def store(new_name: str, new_note: str) -> None:
        from tinker_tui.engine.store.records import set_run_label

        try:
            await asyncio.to_thread(set_run_label, db_path, run_id, new_name, new_note)
        except Exception as exc:
            app.notify(f"naming the run: {exc}", severity="error", timeout=4)
            return
        app.notify(
            f"run {run_id} named {new_name!r}" if new_name else f"run {run_id}: name cleared",
            timeout=2,
        )
        done(new_name, new_note)

    async def current_note() -> str:
        from tinker_tui.engine.store import StoreReader

        async with await StoreReader.open_readonly(db_path) as reader:
            run = await reader.run(run_id)
        return run.note if run is not None else ""

    def named(text: str | None) -> None:
        if text is None:
            return
        new_name = " ".join(text.split())

        async def ask_note() -> None:
            old = note if note is not None else await current_note()

            def noted(text: str | None) -> None:
                if text is not None:
                    app.run_worker(store(new_name, text.strip()))

            app.push_screen(
                TextPromptScreen(
                    f"Note on {run_id}", old, check=check_note, hint="a line kept with the run"
                ),
                noted,
            )

        app.run_worker(ask_note())

    app.push_screen(
        TextPromptScreen(
            f"Name run {run_id}",
            name,
            check=check_name,
            hint="shown in the header, runs, compare and W&B",
        ),
        named,
    )
