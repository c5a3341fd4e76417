"""The Textual front end: watches a session's events and steers it through its control.

The session is given to the constructor: the engine's `Run` (this process drives it), a
`StoreSession` (a stored run for `show`, or a run another process drives for `attach`), or
a scripted fake in tests. The app subscribes `DashboardState.apply` to the session's event bus
and drives `session.run()` in an async worker; views are redrawn from the model on a
timer, never per event.

Views (`1`–`6`): dashboard, rollouts, control, metrics, signals, scenarios. Modal screens: help, quit
confirmation, knob editing, a line in full, and the notice of a terminal too small to draw
the views (it keeps a few lines of status). Commands go through `session.control` only.

Life cycle: when the run ends by itself the app stays, with the finish screen on top
(status, rewards, last checkpoint, the commands to look again or continue) until `q`. `q`
asks first: stop the run (gracefully; the app leaves once it has stopped), detach from a
run in another process (it goes on), or cancel. SIGINT and SIGTERM stop the run as the
headless run does and leave once it has stopped; a second one, or one while stopping, stops
the engine at once. SIGHUP leaves at once: a run in another process goes on.

Exit codes (`app.return_code`):
    0    the run ended (completed or stopped) and the user left; the user stopped it with
         `q`; or detached from (or closed) a run another process runs (`app.detached`).
    3, 4, 5  the run ended by itself for a health check, having trained nothing, or at its
         budget, and the user left (`app.exit_codes` lists every code).
    1    the run failed (shown, then left with `q`), or `session.run()` raised: the
         traceback text is in `app.run_error` (and the exception in `app.run_exception`).
    130  SIGINT: the run was stopped (gracefully, as the headless run; or at once by a
         second signal); also leaving a run this process drives before it ended (ctrl+q).
    143  SIGTERM: the same.
    129  SIGHUP (the terminal went away): left at once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import RenderableType
from textual import events
from textual.app import App, ScreenStackError, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import ModalScreen, Screen
from textual.timer import Timer

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.exit_codes import run_exit_code
from tinker_tui.app.interrupts import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SIGHUP,
    StopSignals,
    release_signals,
    take_signals,
)
from tinker_tui.app.run_summary import SummaryCollector
from tinker_tui.app.screens.confirm_quit import DETACH, FORCE, STOP, QuitScreen
from tinker_tui.app.screens.confirm_rollback import RollbackScreen, rollback_words
from tinker_tui.app.screens.dashboard import DashboardScreen
from tinker_tui.app.screens.run_view import DashboardHost, RunView
from tinker_tui.app.screens.too_small import TooSmallScreen, too_small
from tinker_tui.app.store_session import ReadOnlyControl, StartingControl, StoreSession
from tinker_tui.app.textual_private import compose_mode_now, write_to_terminal
from tinker_tui.engine.checkpoint_paths import run_checkpoint_dir
from tinker_tui.engine.clock import Clock
from tinker_tui.engine.config import LIVE_KNOBS
from tinker_tui.engine.control.interface import Session
from tinker_tui.engine.events import RunLabelled, RunStatus
from tinker_tui.engine.metrics import metric_keys as keys

if TYPE_CHECKING:
    from tinker_tui.app.engine_process import Engine
    from tinker_tui.app.notify import Notifier

#: Seconds the app may take to leave after SIGHUP before the process exits regardless.
HANGUP_GRACE = 2.0

VIEWS = ("dashboard", "rollouts", "control", "metrics", "signals", "scenarios")


def _view(name: str) -> Screen:
    """A view other than the dashboard, imported on first use (`TinkerTuiApp.MODES`)."""
    if name == "rollouts":
        from tinker_tui.app.screens.rollouts import RolloutsScreen

        return RolloutsScreen()
    if name == "control":
        from tinker_tui.app.screens.control import ControlScreen

        return ControlScreen()
    if name == "signals":
        from tinker_tui.app.screens.signals import SignalsScreen

        return SignalsScreen()
    if name == "scenarios":
        from tinker_tui.app.screens.scenarios import ScenariosScreen

        return ScenariosScreen()
    from tinker_tui.app.screens.metrics import MetricsScreen

    return MetricsScreen()


class TinkerTuiApp(App[None]):
    """Dashboard, rollouts and control views of one run.

    Args:
        session: The run to watch and steer (see the module docstring).
        clock: The clock rates are computed against; defaults to the session's.
        refresh_interval: Seconds between redraws.
        log_lines: How many log lines the model and the log pane keep.
        summary: Folds the run's events for the finish screen (and the command's summary
            on exit); by default one that knows the session's store.
        held_signals: Signals received before the app could handle them (`app.watch`),
            handled as soon as it has mounted.
        notifier: Sends the run's alerts (`run --notify`, `app.notify`); its terminal
            escapes go through the app's own output.
    """

    CSS_PATH = "tinker_tui.tcss"
    TITLE = "tinker-tui"
    DEFAULT_MODE = "dashboard"
    # The views other than the dashboard are imported when first shown: the first frame
    # does not wait for them.
    MODES = {
        "dashboard": DashboardScreen,
        "rollouts": lambda: _view("rollouts"),
        "control": lambda: _view("control"),
        "metrics": lambda: _view("metrics"),
        "signals": lambda: _view("signals"),
        "scenarios": lambda: _view("scenarios"),
    }
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    # "-cramped": the smallest heights the views take (18-23 rows), where every row counts
    VERTICAL_BREAKPOINTS = [(0, "-cramped"), (24, "-short"), (36, "-tall")]

    # Two bindings share `p` (and `q`): `check_action` enables exactly one of each pair, so
    # the footer reads "Pause"/"Resume" and "Quit"/"Force quit" according to the state.
    BINDINGS = [
        Binding("p", "pause", "Pause", id="pause"),
        Binding("p", "resume", "Resume", id="resume"),
        Binding("c", "checkpoint", "Checkpoint", id="checkpoint"),
        Binding("e", "eval", "Eval", id="eval"),
        Binding("b", "rollback", "Roll back", show=False, id="rollback"),
        Binding("q", "stop", "Quit", tooltip="Stop gracefully (after a confirmation).", id="stop"),
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
        Binding("question_mark", "help", "Help", id="help"),
        Binding("s", "cycle_smoothing", "Smooth", id="smoothing"),
        Binding("R", "run_list", "Runs", show=False, id="run_list"),
        Binding("n", "name_run", "Name", show=False, id="name_run"),
        Binding("1", "view('dashboard')", "Views", key_display="1-6", id="view_dashboard"),
        Binding("2", "view('rollouts')", "Rollouts", show=False, id="view_rollouts"),
        Binding("3", "view('control')", "Control", show=False, id="view_control"),
        Binding("4", "view('metrics')", "Metrics", show=False, id="view_metrics"),
        Binding("5", "view('signals')", "Signals", show=False, id="view_signals"),
        Binding("6", "view('scenarios')", "Scenarios", show=False, id="view_scenarios"),
        Binding("plus", "toggle_maximize", "Maximize", show=False, id="maximize"),
        Binding("escape", "restore", "Restore", show=False, id="restore"),
        Binding("ctrl+p,colon", "command_palette", "Commands", show=False, id="command_palette"),
    ]

    def __init__(
        self,
        session: Session,
        *,
        clock: Clock | None = None,
        refresh_interval: float = 0.25,
        log_lines: int = 500,
        summary: SummaryCollector | None = None,
        held_signals: list[int] | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        super().__init__()
        self.session = session
        self.clock: Clock = clock if clock is not None else session.clock
        self.refresh_interval = refresh_interval
        self.log_lines = log_lines
        self.state = DashboardState(self.clock, log_lines=log_lines)
        self.run_status: RunStatus | None = None
        self.run_error: str | None = None
        self.run_exception: Exception | None = None
        self.stopping = False
        #: Signals during a stop: the same request within a moment, else a second one.
        self.stop_signals = StopSignals(self.clock.now)
        #: The exit code to leave with once the run has stopped (set by a stop from `q`
        #: or by a signal); None: the run ending shows the finish screen instead.
        self.leave_code: int | None = None
        #: The user detached: the run goes on in its process.
        self.detached = False
        self.summary = summary if summary is not None else SummaryCollector(db_path=session.db_path)
        self._held_signals = held_signals if held_signals is not None else []
        self.notifier = notifier
        #: A session this process does not drive and cannot steer (a stored run).
        self.read_only = session.read_only
        #: A session driven by another process (commands go over its control endpoint).
        self.attached = session.attached
        #: A session may name its own mode (a foreign run: "watching (cookbook)").
        self.mode_label = getattr(session, "mode_label", None) or (
            "read-only"
            if self.read_only and self.attached
            else "finished run"
            if self.read_only
            else "attached"
            if self.attached
            else ""
        )
        if isinstance(session, StoreSession) and session.stored_run is None:
            self.state.waiting_for = "starting the engine"  # `run`: this session starts it
        elif self.read_only or self.attached:
            from tinker_tui.app.foreign_session import ForeignSession

            self.state.waiting_for = (
                "reading the run folder"
                if isinstance(session, ForeignSession)
                else "reading the run store"
            )
        stored = (
            session.stored_run if isinstance(session, StoreSession) and not session.follow else None
        )
        ended = stored.finished() if stored is not None else None
        if stored is not None and ended is not None:
            # `show` of a finished run: its row says who it is and how it ended; the first
            # frame says so at once, not "starting" while the store is read
            self.state.apply(stored.started())
            self.state.apply(ended)
        self._unsubscribe: Callable[[], None] | None = None
        self._signals_installed: list[int] = []  # the signals its loop handles
        self._refresh_timer: Timer | None = None
        self._binding_state: tuple[object, ...] | None = None
        #: The views composed so far, and whether one of them is being switched to.
        self._views_composed = {self.DEFAULT_MODE}
        self._switching_to_composed = False
        #: Keys typed while a dialog opens (`hold_keys`), None when keys go straight on.
        self._held_keys: list[events.Key] | None = None

    # ---------------------------------------------------------------- lifecycle

    def on_mount(self) -> None:
        unsubscribe_model = self.session.events.subscribe(self.state.apply)
        unsubscribe_summary = self.session.events.subscribe(self.summary.handle)
        unsubscribe_notifier: Callable[[], None] = lambda: None  # noqa: E731
        if self.notifier is not None:
            if self.notifier.write is None and self.notifier.terminal:
                self.notifier.write = lambda text: write_to_terminal(self, text)
            self.notifier.warn = lambda line: self.notify(line, severity="warning", timeout=6)
            unsubscribe_notifier = self.session.events.subscribe(self.notifier.handle)

        def unsubscribe() -> None:
            unsubscribe_model()
            unsubscribe_summary()
            unsubscribe_notifier()

        self._unsubscribe = unsubscribe
        self._refresh_timer = self.set_interval(
            self.refresh_interval, self.refresh_panes, name="refresh-panes"
        )
        self.refresh_panes()
        self.check_size()
        if not self.is_headless:
            self.install_signal_handlers()
        for signum in self._held_signals:  # received while the app was loading
            self.call_next(self.signal_received, signum)
        self._held_signals.clear()
        # start after the first frame, so the screen is fully mounted even if run() ends at once
        self.call_after_refresh(self.start_session)
        self.call_after_refresh(self.compose_next_view)

    def compose_next_view(self) -> None:
        """Compose a view not shown yet, one per frame once the dashboard is up, so that
        the first key to switch to it only lays it out and draws it: composing it, and
        reparsing the app's CSS for a screen new to it, are most of a first switch's cost
        (over half a second on a busy machine).

        This is what `switch_mode` does first (`textual_private.compose_mode_now`)."""
        if self._exit:
            return
        for name in VIEWS:
            if name not in self._views_composed:
                self._views_composed.add(name)
                compose_mode_now(self, name)
                self.call_after_refresh(self.compose_next_view)
                return

    def start_session(self) -> None:
        self.run_worker(self.drive_session(), name="session", exit_on_error=False)

    def on_unmount(self) -> None:
        if self._signals_installed:
            release_signals(asyncio.get_running_loop(), self._signals_installed)
            self._signals_installed = []
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    async def drive_session(self) -> None:
        """Run the session to its end; then leave (when asked to) or show how it ended."""
        try:
            status = await self.session.run()
        except Exception as error:  # the CLI prints it after the terminal is restored
            self.run_exception = error
            self.run_error = "".join(traceback.format_exception(error)).rstrip()
            self.exit(return_code=self.leave_code if self.leave_code else EXIT_FAILED)
            return
        self.run_status = status
        self.stopping = False
        if self.leave_code is not None:
            self.exit(return_code=self.leave_code)
            return
        from tinker_tui.app.screens.finished import FinishedScreen

        self.after_command()
        # a dialog open at the end (help, a knob, the quit question) would sit over the
        # finish screen's place: close it, the finish screen says what matters now
        while isinstance(self.screen, ModalScreen) and not isinstance(self.screen, TooSmallScreen):
            self.pop_screen()
        self.push_screen(FinishedScreen(self.summary.summary()))
        self.run_worker(self.read_tail(), name="tail", exit_on_error=False)

    async def read_tail(self) -> None:
        """What the engine writes after the run's end (its trackers' last lines), onto the
        finish screen."""
        from tinker_tui.app.screens.finished import FinishedScreen

        if not isinstance(self.session, StoreSession):
            return  # a run in this process: nothing is written after its end
        await self.session.read_tail()
        for screen in self.screen_stack:
            if isinstance(screen, FinishedScreen):
                screen.show_summary(self.summary.summary())

    @property
    def finished_code(self) -> int:
        """The exit code for leaving a run that has ended: 1 if it failed; a run this
        dashboard ran or followed gives its end's own (`app.exit_codes`: 3 a health stop,
        4 trained nothing, 5 a budget stop), a stored run looked at 0."""
        status = self.run_status or self.state.status
        if status == "failed":
            return EXIT_FAILED
        return (
            EXIT_OK if self.read_only else run_exit_code(status or "", self.summary.summary().cause)
        )

    @property
    def store_path(self) -> Path | None:
        """The run store the session reads or writes (None: a session without one)."""
        return self.session.db_path

    def show_rollouts_of(self, scenario_id: str) -> None:
        """The rollouts view, filtered to one scenario (`enter` on the scenario board)."""
        self.action_view("rollouts")
        try:
            screen = self.get_screen_stack("rollouts")[0]
        except (KeyError, IndexError):
            return
        from tinker_tui.app.screens.rollouts import RolloutsScreen

        if isinstance(screen, RolloutsScreen):
            screen.filter_to(f"scenario:{scenario_id}")

    @property
    def checkpoint_dir(self) -> Path | None:
        """Where a local run keeps its checkpoints (beside its store); None otherwise."""
        db = self.session.db_path
        if db is None or self.state.backend != "local":
            return None
        return run_checkpoint_dir(db)

    @property
    def engine(self) -> Engine | None:
        """The process that runs the run, when it is another one (`app.engine_process`)."""
        return self.session.engine if isinstance(self.session, StoreSession) else None

    def install_signal_handlers(self) -> None:
        """SIGINT and SIGTERM stop the run; SIGHUP leaves. All leave through `exit`, so the
        terminal is restored."""
        self._signals_installed = take_signals(
            asyncio.get_running_loop(), lambda signum: self.call_next(self.signal_received, signum)
        )

    def signal_received(self, signum: int) -> None:
        """SIGINT/SIGTERM: stop the run gracefully without asking, then leave with 130/143;
        another one while stopping stops it at once. A run with nothing left to stop (a
        stored run, a finished one) is only closed. SIGHUP: the terminal is gone; leave at
        once (a run in another process goes on)."""
        if signum == signal.SIGHUP:
            # Leaving writes to the terminal, which may be gone: Textual's writer thread then
            # dies and its shutdown waits on it for ever. Leave for sure, soon.
            watchdog = threading.Timer(HANGUP_GRACE, os._exit, (EXIT_SIGHUP,))
            watchdog.daemon = True
            watchdog.start()
            self.exit(return_code=EXIT_SIGHUP)
            return
        code = EXIT_CODES.get(signum, EXIT_INTERRUPTED)
        if self.read_only or self.run_status is not None or self.state.state == "finished":
            self.exit(return_code=code)  # nothing here can stop the run: only close
            return
        action = self.stop_signals.take(stopping=self.stopping)
        if action == "same":
            return  # one stop signalled twice (`timeout`: the process, then its group)
        if action == "force":
            if not self.leave_code:
                self.leave_code = code
            self.stop_now(signum)
        else:
            self.leave_code = code
            self.begin_stop(f"received {signal.Signals(signum).name}", signum=signum)

    def signal_stop(self) -> None:
        """What SIGTERM does (tests call it: no handler is installed under `run_test`)."""
        self.signal_received(signal.SIGTERM)

    # ---------------------------------------------------------------- drawing

    def on_resize(self) -> None:
        self.call_after_refresh(self.check_size)

    def check_size(self) -> None:
        """Cover the views with a notice (and a little status) while the terminal is too
        small to draw them legibly; take it away when it grows."""
        small = too_small(self.size.width, self.size.height)
        on_top = isinstance(self.screen, TooSmallScreen)
        if small and not any(isinstance(s, TooSmallScreen) for s in self.screen_stack):
            self.push_screen(TooSmallScreen())
            self.call_after_refresh(self.refresh_panes)
        elif not small and on_top:
            self.pop_screen()

    def refresh_panes(self) -> None:
        """Redraw the current view from the model (called on the timer)."""
        try:
            now = self.clock.now()
            for screen in self.screen_stack:
                if isinstance(screen, RunView | TooSmallScreen) and screen.is_mounted:
                    screen.update_from_state(self.state, now)
            self.sync_bindings()
            if isinstance(self.screen, TooSmallScreen) and not too_small(*self.size):
                self.pop_screen()
        except (NoMatches, ScreenStackError):
            # a tick that lands while the app shuts down: the panes are going away
            return

    def sync_bindings(self) -> None:
        """Refresh the footer when the pause or run state changed behind our back."""
        state = (self.control_paused, self.stopping, self.state.state)
        if state != self._binding_state:
            self._binding_state = state
            self.refresh_bindings()

    @property
    def control_paused(self) -> bool:
        try:
            return bool(self.session.control.paused)
        except Exception:
            return self.state.state == "paused"

    @property
    def modal_open(self) -> bool:
        return isinstance(self.screen, ModalScreen)

    # ---------------------------------------------------------------- keys

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded and self._held_keys is not None:
            self._held_keys.append(event)
            return
        await super().on_event(event)

    def hold_keys(self) -> None:
        """Keep the keys that arrive from now on until `release_keys`: a dialog opening
        takes them once its field has focus. Keys typed in one burst with the key that
        opens it (a paste, tmux, a laggy SSH link) would otherwise reach the view below it,
        which ignores them. A second can pass before the dialog takes them."""
        if self._held_keys is None:
            self._held_keys = []
            self.set_timer(1.0, self.release_keys)  # a dialog that never took them

    def release_keys(self) -> None:
        """Deliver the held keys, in order, to whatever has focus now. The app's own queue
        delivers them, after the keys of the burst still in it (held too, then)."""
        self.call_later(self._deliver_held_keys)

    async def _deliver_held_keys(self) -> None:
        held, self._held_keys = self._held_keys, None
        for key in held or ():
            await super().on_event(key)

    # ---------------------------------------------------------------- commands

    def send(self, description: str, command: Callable[[], object]) -> bool:
        """Call a control method; a refusal or an unreachable run becomes a notification.

        For a run in another process the call is an HTTP request: it runs in a thread so a
        busy run never freezes the dashboard.
        """
        if self.session.attached:
            self.run_worker(
                lambda: self._send_blocking(description, command),
                thread=True,
                group="control",
                exit_on_error=False,
            )
            return True
        try:
            command()
        except Exception as exc:  # ValueError from the engine, ControlUnavailable, ...
            self.notify(f"{description}: {exc}", severity="error", timeout=4)
            return False
        return True

    def _send_blocking(self, description: str, command: Callable[[], object]) -> None:
        try:
            command()
        except Exception as exc:
            self.call_from_thread(self.notify, f"{description}: {exc}", severity="error", timeout=4)
            return
        self.call_from_thread(self.after_command)

    def after_command(self) -> None:
        self.sync_bindings()
        self.refresh_panes()

    def live_knobs(self) -> Mapping[str, float | int]:
        """The knobs as the control reports them now ({} when it cannot)."""
        try:
            return dict(self.session.control.knobs())
        except Exception:
            return {}

    def apply_knob(self, name: str, value: float | int) -> str | None:
        """Set a knob through the control; an error message if it was refused."""
        try:
            self.session.control.set_knob(name, value)
        except Exception as exc:
            return str(exc)
        self.after_command()
        return None

    def edit_knob(self, name: str) -> None:
        if self.read_only:
            control = self.session.control
            why = (
                control.why
                if isinstance(control, ReadOnlyControl)
                else "this run is not running here"
            )
            self.notify(f"read-only: {why}", severity="warning")
            return
        if self.state.state in ("finished", "stopping"):
            self.notify(f"the run is {self.state.state}; knobs no longer apply", severity="warning")
            return
        current = self.live_knobs().get(name, self.state.knobs.get(name))

        def applied(value: float | int | None) -> None:
            if value is not None:
                self.notify(f"{name} set to {value:g}", timeout=3)

        from tinker_tui.app.screens.knob_edit import KnobEditScreen

        self.hold_keys()  # the dialog takes what is typed while it opens
        self.push_screen(KnobEditScreen(name, current, self.apply_knob), applied)

    # ---------------------------------------------------------------- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self._exit:  # leaving: keys typed behind `q` open nothing on a closing app
            return False
        if isinstance(self.screen, TooSmallScreen):  # the notice: run keys and quit only
            if action in ("pause", "resume", "stop", "force_quit", "quit"):
                return self.allowed(action)
            return action in ("toggle_pause",)
        if action in (
            "pause",
            "resume",
            "checkpoint",
            "eval",
            "rollback",
            "stop",
            "force_quit",
            "view",
            "help",
            "toggle_maximize",
            "restore",
            "cycle_smoothing",
            "run_list",
            "name_run",
        ) and (self.modal_open or getattr(self.screen, "OWN_KEYS", False)):
            return False  # a dialog (or the run list, a comparison) is open: its own keys
        return self.allowed(action)

    def allowed(self, action: str) -> bool | None:
        """Whether `action` applies in the run's current state (True, False, or None for
        shown but disabled)."""
        paused = self.control_paused
        live = not self.read_only and self.state.state != "finished"
        if action == "pause":
            return live and not paused and not self.stopping
        if action == "resume":
            return live and paused and not self.stopping
        if action in ("checkpoint", "eval", "rollback"):
            if not live:
                return False
            return None if self.stopping else True
        if action == "stop":
            return not self.stopping
        if action == "force_quit":
            return self.stopping
        if action == "restore":
            return self.screen.maximized is not None
        if action == "cycle_smoothing":
            return self.current_mode in ("dashboard", "metrics")
        return True

    def action_pause(self) -> None:
        self.send("pause", self.session.control.pause)
        self.after_command()

    def action_resume(self) -> None:
        self.send("resume", self.session.control.resume)
        self.after_command()

    def action_toggle_pause(self) -> None:
        if self.control_paused:
            self.action_resume()
        else:
            self.action_pause()

    def action_checkpoint(self) -> None:
        when = "now (paused)" if self.control_paused else "after the current step"
        if self.send("checkpoint", self.session.control.request_checkpoint):
            self.notify(f"Checkpoint requested: written {when}", timeout=2)

    def action_eval(self) -> None:
        if self.send("eval", self.session.control.request_eval):
            self.notify("Evaluation requested", timeout=2)

    def action_rollback(self) -> None:
        """`b`: go back to the checkpoint of the weights that sampled the best step, at a
        scaled learning rate."""
        target = self.state.health_window.rollback_point()
        if target is None:
            self.notify(
                "Nothing to roll back to: no full checkpoint of the weights that "
                "sampled the best step yet",
                severity="warning",
                timeout=4,
            )
            return
        scale = self.state.config.get("rollback_lr_scale")
        scale = float(scale) if isinstance(scale, int | float) and 0 < scale <= 1 else 0.5
        step = target[0]
        # The knob is what a rollback scales (optim/lr is the knob times the schedule's factor).
        lr = self.state.knobs.get(
            "learning_rate",
            self.state.last_metrics.get(keys.LEARNING_RATE, self.state.config.get("learning_rate")),
        )
        words = rollback_words(
            step=self.state.step,
            to_step=step,
            checkpoint=target[1],
            scale=scale,
            lr=float(lr) if isinstance(lr, int | float) else None,
        )

        def chosen(yes: bool | None) -> None:
            if yes and self.send(
                "rollback",
                lambda: self.session.control.request_rollback(
                    f"by hand: roll back to step {step} at lr x{scale:g}", scale
                ),
            ):
                self.notify(f"Roll back to step {step} ({target[1]}) at lr ×{scale:g}", timeout=3)

        self.push_screen(RollbackScreen(words), chosen)

    def action_stop(self) -> None:
        """`q` / ctrl+c: confirm, then stop gracefully (or detach / close, see the dialog)."""
        if self.stopping:
            self.action_force_quit()
            return
        if self.read_only:
            self.exit(return_code=EXIT_OK)  # a stored run, or a read-only view: nothing to stop
            return
        if self.state.state == "finished" or self.run_status is not None:
            self.exit(return_code=self.finished_code)
            return
        kind = "stop_attached" if self.attached else "stop"
        self.push_screen(QuitScreen(kind), self._quit_chosen)

    def action_force_quit(self) -> None:
        self.push_screen(
            QuitScreen("force_attached" if self.attached else "force"), self._quit_chosen
        )

    def _quit_chosen(self, choice: str | None) -> None:
        if choice == STOP:
            self.leave_code = EXIT_OK
            self.begin_stop()
        elif choice == DETACH:
            self.detach()
        elif choice == FORCE:
            self.stop_now(signal.SIGINT)

    def begin_stop(self, reason: str = "stopped by user", *, signum: int | None = None) -> None:
        """Graceful stop; the app leaves (with `leave_code`) when `session.run()` returns.
        A signal is passed on to a run in another process, which stops as a headless run
        does on it; so is a stop asked for before the run can take commands."""
        engine = self.engine
        starting = isinstance(self.session.control, StartingControl)
        if (
            engine is not None
            and (signum is not None or starting)
            and engine.send_signal(signum or signal.SIGTERM)
        ):
            self.stopping = True
            self.after_command()
            return
        if not self.send("stop", lambda: self.session.control.stop(reason)):
            return
        self.stopping = True
        self.after_command()

    def stop_now(self, signum: int) -> None:
        """Stop at once: a run in another process gets the signal (it is stopping, so it
        leaves at once, its store intact) and the app leaves when it is gone; a run this
        process drives is left at once."""
        engine = self.engine
        if engine is not None and engine.send_signal(signum):
            self.notify("stopping at once", timeout=3)
            return
        if engine is not None and engine.exit_code() is not None:
            return  # already gone: the session reports its end
        self.exit(return_code=EXIT_CODES.get(signum, EXIT_INTERRUPTED))

    def detach(self) -> None:
        """Leave a run another process runs; it goes on."""
        self.detached = True
        self.exit(return_code=EXIT_OK)

    def action_quit_now(self) -> None:
        if self.attached and self.state.state != "finished" and self.run_status is None:
            self.detach()
            return
        if self.read_only or self.attached or self.run_status is not None:
            self.exit(return_code=self.finished_code)
            return
        self.exit(return_code=EXIT_INTERRUPTED)

    def leave_finished(self) -> None:
        """`q` on the finish screen."""
        self.exit(return_code=self.finished_code)

    async def action_quit(self) -> None:
        self.action_quit_now()

    def action_help(self) -> None:
        from tinker_tui.app.screens.help import HelpScreen

        self.push_screen(HelpScreen())

    def action_view(self, name: str) -> None:
        """Switch views, then redraw the view from the model (it is not redrawn while
        hidden). A view composed already (`compose_next_view`) is drawn at once, as it
        last was: from its widgets' own caches, a fraction of the CPU of drawing it anew,
        so the key is answered first and the data follows a frame later."""
        if name not in VIEWS or self.current_mode == name:
            return
        composed = name in self._views_composed
        self._views_composed.add(name)
        self._switching_to_composed = composed
        if composed:  # it was drawn when composed, or last shown: bring it up to date first
            self._update_hidden_view(name)
        try:
            self.switch_mode(name)
        finally:
            self._switching_to_composed = False
        self.call_after_refresh(self.refresh_panes)

    def _update_hidden_view(self, name: str) -> None:
        """Redraw a view that is not showing from the model, so that its first frame when
        switched to shows the run as it is (a view composed early showed an old step)."""
        try:
            screen = self.get_screen_stack(name)[0]
            if isinstance(screen, RunView) and screen.is_mounted:
                screen.update_from_state(self.state, self.clock.now())
        except (NoMatches, IndexError, KeyError):
            return

    def delay_update(self, delay: float = 0.05) -> None:
        """Textual's `switch_mode` hides the screen for `delay` seconds, to mask a new
        screen being composed; a view composed already has nothing to mask."""
        if not self._switching_to_composed:
            super().delay_update(delay)

    def action_toggle_maximize(self) -> None:
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
            return
        target = screen.focused
        if target is None or not target.allow_maximize:
            from tinker_tui.app.widgets.chart_pane import ChartPane

            try:
                target = screen.query_one(ChartPane).chart
            except NoMatches:
                return
            if target is None:  # still loading
                return
        screen.maximize(target, container=False)

    def action_restore(self) -> None:
        self.screen.minimize()

    def action_run_list(self) -> None:
        """`R`: the store's runs, to mark and compare (`screens.run_list`)."""
        if self.session.db_path is None:
            self.notify("this run has no store", severity="warning")
            return
        from tinker_tui.app.screens.run_list import RunListScreen

        self.push_screen(RunListScreen(self.session.db_path, self.state.run_id))

    def action_name_run(self) -> None:
        """`n`: name the run and note something about it (kept in the store)."""
        if self.session.db_path is None or not self.state.run_id:
            self.notify("the run is not in the store yet", severity="warning")
            return
        from tinker_tui.app.screens.run_label import edit_run_label

        def labelled(name: str, note: str) -> None:
            if isinstance(self.session, StoreSession):
                self.session.note_label(name, note)
            else:
                self.session.events.publish(
                    RunLabelled(time=self.clock.now(), run_name=name, note=note)
                )
            self.refresh_panes()

        edit_run_label(
            self,
            self.session.db_path,
            self.state.run_id,
            self.state.run_name,
            self.state.note,
            done=labelled,
        )

    def action_cycle_smoothing(self) -> None:
        beta = self.state.cycle_smoothing()
        self.refresh_panes()
        self.notify(f"reward smoothing {beta:g}" if beta else "reward smoothing off", timeout=1.5)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette (`ctrl+p`, `:`): every command and view, and each knob."""
        commands: list[tuple[str, str, str, Callable[[], object]]] = [
            ("Pause", "No new rollouts start; in-flight ones finish", "pause", self.action_pause),
            ("Resume", "Start rollouts again", "resume", self.action_resume),
            (
                "Checkpoint now",
                "Save a full checkpoint after the current step",
                "checkpoint",
                self.action_checkpoint,
            ),
            ("Evaluate now", "Run the evaluator on the current policy", "eval", self.action_eval),
            ("Stop the run", "Finish the step, checkpoint, flush, exit", "stop", self.action_stop),
        ]
        for title, help_text, action, call in commands:
            if self.allowed(action):
                yield SystemCommand(title, help_text, call)
        for view in VIEWS:
            yield SystemCommand(
                f"View: {view}", f"Show the {view} view", lambda view=view: self.action_view(view)
            )
        if not self.read_only:
            for name in LIVE_KNOBS:
                yield SystemCommand(
                    f"Set {name}",
                    f"Change {name} live (confirmed)",
                    lambda name=name: self.edit_knob(name),
                )
        yield SystemCommand(
            "Runs and compare", "The store's runs: mark some and compare them", self.action_run_list
        )
        yield SystemCommand("Name the run", "Give the run a name and a note", self.action_name_run)
        yield SystemCommand(
            "Reward smoothing",
            "Cycle the EMA smoothing of the reward chart",
            self.action_cycle_smoothing,
        )
        yield SystemCommand(
            "Maximize / restore",
            "Maximize the focused pane, or restore",
            self.action_toggle_maximize,
        )
        yield SystemCommand("Help", "Keys and views", self.action_help)
        yield SystemCommand("Quit now", self.quit_now_help(), self.action_quit_now)
        yield from (c for c in super().get_system_commands(screen) if c.title == "Theme")
        folder = self.screenshot_folder()
        yield SystemCommand(
            "Screenshot",
            "Save an SVG of the screen in the browser's downloads"
            if self.is_web
            else f"Save an SVG of the screen in {folder}",
            lambda: self.set_timer(0.1, self.save_screen),
        )

    def quit_now_help(self) -> str:
        """What "Quit now" does to the run, in the state it is in."""
        if self.read_only or self.state.state == "finished" or self.run_status is not None:
            return "Leave now (the run has ended, or is not running here)"
        if self.attached:
            return (
                "Leave now; the run goes on in its own process (`tinker-tui attach` brings it back)"
            )
        return (
            "Leave now; the run stops at once, without its final checkpoint (--resume "
            "continues from the last one)"
        )

    def screenshot_folder(self) -> Path:
        """Where a screenshot goes: the Downloads folder if there is one (Textual's choice),
        else the run store's folder, else the current one."""
        downloads = Path.home() / "Downloads"
        if downloads.is_dir():
            return downloads
        db = self.session.db_path
        if db is not None and db.parent.is_dir():
            return db.parent
        return Path.cwd()

    def save_screen(self) -> None:
        """Save a screenshot and say where, or why not (Textual said only that it failed:
        it writes to ~/Downloads, which a server often lacks)."""
        if self.is_web:  # the browser downloads it
            self.deliver_screenshot()
            return
        folder = self.screenshot_folder()
        try:
            saved = self.save_screenshot(path=str(folder))
        except OSError as exc:
            self.notify(
                f"screenshot not saved in {folder}: {exc.strerror or exc}",
                severity="error",
                timeout=6,
            )
            return
        self.notify(f"screenshot saved: {saved}", timeout=6)

    def exit(
        self,
        result: None = None,
        return_code: int = 0,
        message: RenderableType | None = None,
    ) -> None:
        """Leave the app; the redraw timer stops first so no redraw races the teardown."""
        if self._refresh_timer is not None:
            self._refresh_timer.stop()
        super().exit(result, return_code, message)


if TYPE_CHECKING:  # the screens reach the app only through `DashboardHost`: mypy checks it

    def _screens_host(app: TinkerTuiApp) -> DashboardHost:
        return app
