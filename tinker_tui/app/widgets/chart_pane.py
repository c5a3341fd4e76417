"""A pane whose chart loads after the first frame.

The charts draw with textual-plot, which imports numpy: a few hundred milliseconds on an
idle machine, seconds on a busy one. The dashboard's first frame must not wait for that, so
the reward chart's pane shows its title at once, imports the chart's module in a thread,
and mounts the chart when it is there. Nothing else differs: the app hands the pane the
model on every redraw and the pane passes it on.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Static

#: The module that defines the charts (imported in a thread by the first pane mounted).
CHART_MODULE = "tinker_tui.app.widgets.rewards"


class ChartPane(Vertical):
    """Holds the chart `make(module)` returns, once `CHART_MODULE` is imported.

    Args:
        title: The pane's title while the chart loads.
        make: Builds the chart from the imported module.
    """

    def __init__(self, title: str, make: Callable[[Any], Widget], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.pane_title = title
        self._make = make
        self.chart: Any = None
        self._pending: tuple[Any, float] | None = None

    @property
    def loaded(self) -> bool:
        return self.chart is not None

    def compose(self) -> ComposeResult:
        placeholder = Static("loading the chart…", classes="chart-loading")
        placeholder.border_title = self.pane_title
        yield placeholder

    def on_mount(self) -> None:
        self.run_worker(self._import, thread=True, name="import-charts", exit_on_error=False)

    def _import(self) -> None:
        module = importlib.import_module(CHART_MODULE)
        # textual types the callback as `T | Awaitable[T]`, which mypy cannot solve for a
        # coroutine function (it infers Never); the call itself awaits the mount
        self.app.call_from_thread(self._mount_chart, module)  # type: ignore[arg-type]

    async def _mount_chart(self, module: Any) -> None:
        self.chart = self._make(module)
        await self.query(".chart-loading").remove()
        await self.mount(self.chart)
        if self._pending is not None:
            self.chart.update_from_state(*self._pending)
            self._pending = None

    def update_from_state(self, state: Any, now: float) -> None:
        if self.chart is not None and self.chart.is_mounted:
            self.chart.update_from_state(state, now)
        else:
            self._pending = (state, now)
