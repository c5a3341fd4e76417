"""The control view's commands table: a rollback's row names its checkpoint, the learning
rate old → new and its reason, wrapped within the pane at 80 columns (the reason was cut)."""

from __future__ import annotations

from textual.app import App, ComposeResult

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.widgets.commands import CommandsTable
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import CommandReceived

REASON = (
    "collapsed at step 7 (best 0.75 at step 6); best checkpoint step-000006 "
    "(on_collapse = rollback, 1 of 1)"
)


class Table(App[None]):
    def __init__(self, model: DashboardState) -> None:
        super().__init__()
        self.model = model

    def compose(self) -> ComposeResult:
        yield CommandsTable(id="commands")

    def on_mount(self) -> None:
        self.query_one(CommandsTable).update_from_state(self.model)


def rolled_back_state() -> DashboardState:
    model = DashboardState(clock=FakeClock())
    model.apply(CommandReceived(time=1.0, command="pause"))
    model.apply(
        CommandReceived(
            time=2.0,
            command="rolled_back",
            source="on_collapse",
            args={
                "to_step": 6,
                "checkpoint": "step-000006",
                "reason": REASON,
                "name": "learning_rate",
                "value": 5e-4,
                "old": 1e-3,
                "steps_undone": 3,
            },
        )
    )
    return model


def lines(table: CommandsTable) -> list[str]:
    width = table.size.width
    return [table.render_line(y).text.rstrip()[:width] for y in range(table.size.height)]


async def test_a_rollback_row_wraps_its_reason_within_80_columns():
    app = Table(rolled_back_state())
    async with app.run_test(size=(80, 12)) as pilot:
        await pilot.pause()
        table = app.query_one(CommandsTable)
        header, *rows = lines(table)
        start, end = header.index("command"), header.index("from")
        assert all(len(line) <= 80 for line in rows)
        command = " ".join(line[start:end].strip() for line in rows if line[start:end].strip())
        assert command == (
            f"rolled back to step-000006 (step 6), learning_rate 0.001 → 0.0005: {REASON} pause"
        ), rows
        assert rows[0][end:].strip() == "on_collapse"  # who asked for it
        assert [table.rows[key].height for key in table.rows] == [4, 1]
        # Wide enough, every row is one line again.
        await pilot.resize_terminal(200, 12)
        await pilot.pause()
        assert [table.rows[key].height for key in table.rows] == [1, 1]


def test_a_rollback_row_says_which_weights_it_went_back_to():
    from tinker_tui.app.dashboard_rows import CommandRow

    row = CommandRow(
        time=1.0,
        step=7,
        command="rolled_back",
        source="user",
        args={
            "checkpoint": "step-000005",
            "to_step": 5,
            "best_step": 6,
            "best_sampled_by": 5,
            "old": 0.001,
            "value": 0.0005,
            "reason": "by hand",
        },
    )
    assert row.describe() == (
        "rolled back to step-000005 (step 5), the weights (version 5) "
        "that sampled best step 6, learning_rate 0.001 → 0.0005: "
        "by hand"
    )
