"""The Textual front end: watches a session's events and steers it through its control.

The engine runs in the same asyncio loop as the app: the app subscribes `RunModel.apply`
to the session's event bus and drives `session.run()` in an async worker. Panes are
redrawn from the model on a timer, never per event.

Exit codes (`app.return_code`):
    0    `session.run()` returned; its `RunStatus` is in `app.run_status`.
    1    `session.run()` raised; the traceback text is in `app.run_error` (and the
         exception in `app.run_exception`).
    130  the user left before the run ended (second quit while stopping, or ctrl+q).
"""

from __future__ import annotations

import asyncio
import signal
import traceback

from rich.console import RenderableType
from textual.app import App, ScreenStackError
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.timer import Timer

from app.run_model import RunModel
from app.screens.dashboard import DashboardScreen
from engine.clock import Clock, SystemClock
from engine.control import Session
from engine.events import RunStatus

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


class TinkerTuiApp(App[None]):
    """Dashboard for one run.

    Args:
        session: The run to drive and watch (engine session or a scripted fake).
        clock: The clock the session stamps events with; rates are computed against it.
        refresh_interval: Seconds between redraws of the panes.
        log_lines: How many log lines the model and the log pane keep.
    """

    CSS_PATH = "tinker_tui.tcss"
    TITLE = "tinker-tui"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]

    # Two bindings share `p` (and `q`): `check_action` enables exactly one of each pair, so
    # the footer reads "Pause"/"Resume" and "Quit"/"Force quit" according to the state.
    BINDINGS = [
        Binding("p", "pause", "Pause", id="pause"),
        Binding("p", "resume", "Resume", id="resume"),
        Binding("c", "checkpoint", "Checkpoint", id="checkpoint"),
        Binding(
            "q",
            "stop",
            "Quit",
            tooltip="Stop gracefully: finish the step, checkpoint, exit.",
            id="stop",
        ),
        Binding(
            "q",
            "force_quit",
            "Force quit",
            tooltip="Exit now without waiting for the run.",
            id="force_quit",
        ),
        Binding("ctrl+c", "stop", "Quit", show=False, priority=True, id="stop_ctrl_c"),
        Binding(
            "ctrl+c", "force_quit", "Force quit", show=False, priority=True, id="force_quit_ctrl_c"
        ),
        Binding("ctrl+q", "quit", "Exit now", show=False, priority=True, id="quit"),
    ]

    def __init__(
        self,
        session: Session,
        *,
        clock: Clock | None = None,
        refresh_interval: float = 0.25,
        log_lines: int = 500,
    ) -> None:
        super().__init__()
        self.session = session
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.refresh_interval = refresh_interval
        self.model = RunModel(self.clock, log_lines=log_lines)
        self.run_status: RunStatus | None = None
        self.run_error: str | None = None
        self.run_exception: Exception | None = None
        self.stopping = False
        self._log_lines = log_lines
        self._unsubscribe = None
        self._signals_installed = False
        self._refresh_timer: Timer | None = None
        self._binding_state: tuple[bool, bool] | None = None

    # ---------------------------------------------------------------- lifecycle

    def get_default_screen(self) -> Screen:
        return DashboardScreen(log_lines=self._log_lines)

    def on_mount(self) -> None:
        self._unsubscribe = self.session.events.subscribe(self.model.apply)
        self._refresh_timer = self.set_interval(
            self.refresh_interval, self.refresh_panes, name="refresh-panes"
        )
        self.refresh_panes()
        if not self.is_headless:
            self.install_signal_handlers()
        # start after the first frame, so the screen is fully mounted even if run() ends at once
        self.call_after_refresh(self.start_session)

    def start_session(self) -> None:
        self.run_worker(self.drive_session(), name="session", exit_on_error=False)

    def on_unmount(self) -> None:
        if self._signals_installed:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            self._signals_installed = False
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    async def drive_session(self) -> None:
        """Run the session to its end, then leave the app with the matching exit code."""
        try:
            status = await self.session.run()
        except Exception as error:  # the CLI prints it after the terminal is restored
            self.run_exception = error
            self.run_error = "".join(traceback.format_exception(error)).rstrip()
            self.exit(return_code=EXIT_FAILED)
            return
        self.run_status = status
        self.exit(return_code=EXIT_OK)

    def install_signal_handlers(self) -> None:
        """SIGTERM stops gracefully (a second one exits); SIGHUP exits at once.

        Without these a `kill` would leave the terminal in raw mode.
        """
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGTERM, self.call_next, self.action_stop)
            loop.add_signal_handler(signal.SIGHUP, self.call_next, self.action_force_quit)
            self._signals_installed = True
        except (NotImplementedError, RuntimeError, ValueError):  # not on this platform/thread
            pass

    def refresh_panes(self) -> None:
        """Redraw every pane from the model (called on the timer)."""
        try:
            screen = self.screen
            if isinstance(screen, DashboardScreen) and screen.is_mounted:
                screen.update_from_model(self.model, self.clock.now())
            self.sync_bindings()
        except (NoMatches, ScreenStackError):
            # a tick that lands while the app shuts down: the panes are going away
            return

    def sync_bindings(self) -> None:
        """Refresh the footer when the control's pause state changed behind our back."""
        state = (self.session.control.paused, self.stopping)
        if state != self._binding_state:
            self._binding_state = state
            self.refresh_bindings()

    # ---------------------------------------------------------------- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        paused = self.session.control.paused
        if action == "pause":
            return not paused and not self.stopping
        if action == "resume":
            return paused and not self.stopping
        if action == "checkpoint":
            return None if self.stopping else True
        if action == "stop":
            return not self.stopping
        if action == "force_quit":
            return self.stopping
        return True

    def action_pause(self) -> None:
        self.session.control.pause()
        self.sync_bindings()
        self.refresh_panes()

    def action_resume(self) -> None:
        self.session.control.resume()
        self.sync_bindings()
        self.refresh_panes()

    def action_checkpoint(self) -> None:
        self.session.control.request_checkpoint()
        self.notify("Checkpoint requested", timeout=2)

    def action_stop(self) -> None:
        """Graceful stop; the app exits when `session.run()` returns. A second one forces."""
        if self.stopping:
            self.action_force_quit()
            return
        self.stopping = True
        self.session.control.stop()
        self.sync_bindings()
        self.refresh_panes()

    def action_force_quit(self) -> None:
        self.exit(return_code=EXIT_INTERRUPTED)

    def exit(
        self,
        result: None = None,
        return_code: int = 0,
        message: RenderableType | None = None,
    ) -> None:
        """Leave the app; the pane timer stops first so no redraw races the teardown."""
        if self._refresh_timer is not None:
            self._refresh_timer.stop()
        super().exit(result, return_code, message)

    async def action_quit(self) -> None:
        self.exit(return_code=EXIT_INTERRUPTED)
