"""Saved checkpoints, newest first: step, kind, when (time since the run began) and path;
those the retention policy deleted are taken off (and counted in the title).

A local run's checkpoint is shown as its folder on disk (the `tinker://` name it is saved
under is in the row's detail). Sampler weights are saved per policy version, not per step
(`v12`): a step that changes no weight (every group without a learning signal, as a
converged run has) saves none, while full state is saved every `checkpoint_every` steps.
Paths that have no room lose whole folders from their start (`…/checkpoints/step-000060`),
so which checkpoint it is stays readable; `enter` on a row shows the path whole, `t` opens a
chat with it (`screens.chat`).
"""

from __future__ import annotations

from pathlib import Path

from textual.binding import Binding
from textual.widgets import DataTable

from tinker_tui.app.dashboard_rows import CheckpointRow
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.screens.run_view import host
from tinker_tui.app.view_maths import PART_SEPARATOR, shorten_path
from tinker_tui.app.widgets.updates import fit_columns, set_subtitle
from tinker_tui.engine.checkpoint_paths import local_folder

#: The narrowest a path is cut to, however narrow the pane.
MIN_PATH = 12


def where_on_disk(row: CheckpointRow, checkpoint_dir: Path | None) -> str:
    """The folder a local run keeps `row` in, when it is there; else its path as saved."""
    folder = local_folder(checkpoint_dir, row.path) if checkpoint_dir is not None else None
    return str(folder) if folder is not None and folder.is_dir() else row.path


#: Marks of the checkpoints the retention policy keeps whatever comes after.
REQUESTED_MARK = "✓"
BEST_MARK = "★"


def step_text(row: CheckpointRow, best_step: int | None = None) -> str:
    """`12` for full state (saved at a step), `v12` for sampler weights (of a version);
    marked ✓ when a person asked for it, ★ when it is the one a rollback goes back to (the
    last at or before the best step): both are kept by the retention policy."""
    if row.kind == "sampler":
        return f"v{row.step}"
    return (
        f"{row.step}{REQUESTED_MARK if row.requested else ''}"
        f"{BEST_MARK if row.step == best_step else ''}"
    )


def marks_legend(rows: list[CheckpointRow], best_step: int | None) -> str:
    """What the marks shown mean, for the pane's subtitle (short: it shares the line);
    "" when none shows."""
    said = []
    if any(r.requested and r.kind == "state" for r in rows):
        said.append(f"{REQUESTED_MARK} asked for")
    if best_step is not None and any(r.step == best_step and r.kind == "state" for r in rows):
        said.append(f"{BEST_MARK} best")
    return PART_SEPARATOR + " ".join(said) if said else ""


#: Steps without a weight change before the pane says why no sampler weights come.
UNCHANGED_STEPS = 3


def sampler_note(state: DashboardState) -> str:
    """Why sampler weights stop while full state goes on: they are saved per new policy
    version, and steps without a learning signal change no weight."""
    since = state.version_changed_at
    if since and state.step - since >= UNCHANGED_STEPS:
        return f"weights unchanged since step {since}"
    return ""


def subtitle_text(state: DashboardState, width: int = 0) -> str:
    """`6 saved · weights unchanged since step 32 · enter: path` in `width` cells (0: any):
    what has no room is left out whole, never cut, the note before the key (the status
    line says the weights stand still too, and `enter` on a row says why)."""
    count = len(state.checkpoints)
    deleted = f" ({state.checkpoints.deleted} older deleted)" if state.checkpoints.deleted else ""
    text = f"{count} saved{deleted}"
    best = state.health_window.rollback_point()
    marks = marks_legend(state.checkpoints.rows, best[0] if best is not None else None)
    for part in (
        marks.removeprefix(PART_SEPARATOR),
        sampler_note(state),
        "enter: path" if count else "",
    ):
        if part and (not width or len(text) + len(PART_SEPARATOR) + len(part) <= width):
            text += PART_SEPARATOR + part
    return text


class CheckpointsTable(DataTable):
    """One row per `CheckpointSaved`."""

    ALLOW_MAXIMIZE = True
    BINDINGS = [Binding("t", "talk", "Talk to it")]

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(
            id=id, classes=classes, cursor_type="row", zebra_stripes=True, show_cursor=False
        )
        self._shown: tuple[object, ...] = ()
        self._rows: list[CheckpointRow] = []
        self._state: DashboardState | None = None
        # columns exist from the start, so rows added before mount size them correctly
        self.add_column("step", key="step")
        self.add_column("kind", key="kind")
        self.add_column("time", key="time")
        self.add_column("path", key="path")

    def on_mount(self) -> None:
        self.border_title = "Checkpoints"

    def on_resize(self) -> None:
        """A pane with room for one line shows the newest checkpoint, not the header."""
        show = self.content_size.height >= 2
        if self.show_header != show:
            self.show_header = show

    def on_focus(self) -> None:
        self.show_cursor = True

    def on_blur(self) -> None:
        self.show_cursor = False

    def update_from_state(self, state: DashboardState, now: float) -> None:
        self._state = state
        count = len(state.checkpoints)
        best = state.health_window.rollback_point()
        best_step = best[0] if best is not None else None
        # the subtitle sits in the bottom border, between its corners and a space each side
        set_subtitle(self, subtitle_text(state, max(0, self.region.width - 6)))
        width = self.content_region.width or 60
        checkpoint_dir = host(self.app).checkpoint_dir
        requested = tuple(r.step for r in state.checkpoints if r.requested)
        shown = (count, state.checkpoints.deleted, width, checkpoint_dir, requested, best_step)
        if shown == self._shown:
            return
        self._shown = shown
        cursor = self.cursor_row
        self.clear()
        self._rows = list(reversed(state.checkpoints.rows))
        # the path takes what the other columns (and every column's padding) leave
        cells = [
            [step_text(row, best_step), row.kind, state.since_start(row.time), ""]
            for row in self._rows
        ]
        paths = [where_on_disk(row, checkpoint_dir) for row in self._rows]
        widths = fit_columns(self, cells)
        path_width = max(MIN_PATH, width - sum(widths[:-1]) - 2 * self.cell_padding * len(widths))
        for cell, path in zip(cells, paths, strict=True):
            cell[-1] = shorten_path(path, path_width)
        fit_columns(self, cells)
        for index, row in enumerate(self._rows):
            self.add_row(*cells[index], key=f"{count - index}:{row.path}")
        if self._rows:
            self.move_cursor(row=min(cursor, len(self._rows) - 1))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if not 0 <= event.cursor_row < len(self._rows):
            return
        from tinker_tui.app.screens.text_view import TextScreen

        row = self._rows[event.cursor_row]
        folder = where_on_disk(row, host(self.app).checkpoint_dir)
        if row.kind == "sampler":
            title = f"Sampler weights of policy version {row.step}"
            why = (
                "\n\nSampler weights are saved when the weights change (a new policy "
                "version), not per step: steps without a learning signal save none. "
                "Full state (weights and optimizer, what --resume loads) is saved every "
                "checkpoint_every steps."
            )
        else:
            title = f"Checkpoint at step {row.step} (full state: weights and optimizer)" + (
                ", asked for: kept" if row.requested else ""
            )
            since = self._state.version_changed_at if self._state is not None else 0
            why = (
                "\n\nSampler weights are saved per new policy version, not per step "
                "(sampler_checkpoint_every)"
                + (f"; this run's weights last changed at step {since}" if since else "")
                + ": steps without a learning signal change no weight and save none."
            )
        where = f"{folder}\n(saved as {row.path})" if folder != row.path else row.path
        self.app.push_screen(TextScreen(title, f"{row.name}\n\n{where}{why}"))

    def action_talk(self) -> None:
        """Chat with the checkpoint under the cursor: a full one (sampler weights are a
        version's snapshot, not a state the chat loads) of a run whose store is here."""
        if not 0 <= self.cursor_row < len(self._rows) or self._state is None:
            return
        row = self._rows[self.cursor_row]
        store = host(self.app).store_path
        if (
            store is None
            or not self._state.run_id
            or host(self.app).mode_label.startswith("watching")
        ):
            self.notify("only a run of this store's checkpoints can be talked to here")
            return
        if row.kind != "state":
            self.notify("sampler weights: talk to a full checkpoint (a step's row)")
            return
        self.run_worker(self._talk(store, f"{self._state.run_id}@{row.step}"), group="talk")

    async def _talk(self, store: Path, ref: str) -> None:
        from tinker_tui.app.commands.chat import resolve_target
        from tinker_tui.app.screens.chat import ChatScreen
        from tinker_tui.engine.errors import TinkerTuiError

        try:
            target = await resolve_target(store, ref)
        except TinkerTuiError as exc:
            self.notify(str(exc), severity="error")
            return
        self.app.push_screen(
            ChatScreen(
                target,
                temperature=target.config.temperature,
                max_tokens=target.config.max_tokens,
            )
        )
