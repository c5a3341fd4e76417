"""Alerts that leave the terminal (`run --notify`, `--notify-command CMD`): for a run left in
a tmux window, the moments someone should come back for.

A run pauses by itself (a health check), collapses, fails, finishes, or stops by itself (a
budget, a task that failed, a full disk). Each is read from typed events only, never from
message text: `CommandReceived.source` says who asked for a pause or a stop, and
`RunFinished.status` and `.cause` how the run ended. A pause the user asked for is not an alert: they
are there.

An alert goes out as the terminal's bell, a desktop notification through the terminal's
own escapes (OSC 9, which iTerm2, WezTerm, Windows Terminal and kitty show, and OSC 777,
which foot, Ghostty and VTE terminals show; inside tmux both are wrapped for its
passthrough), and a command of the user's, run without waiting for it, with the alert in
its environment: TINKER_TUI_ALERT (the kind), TINKER_TUI_TITLE, TINKER_TUI_MESSAGE and
TINKER_TUI_RUN.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from tinker_tui.engine.events import SOURCE_ENGINE, CommandReceived, Event, RunFinished, RunStarted
from tinker_tui.engine.metrics.collapse_memory import AUTOMATIC

AlertKind = Literal["pause", "collapse", "failure", "finish", "stop"]
#: The sources of what the run asked of itself (`CommandReceived.source`): a pause or stop
#: from these is an alert; the user's own is not.
HEALTH_PAUSE = "on_health_pause"
#: The longest message an alert carries (a desktop notification shows a line or two).
MOST_CHARS = 200


@dataclass(frozen=True, slots=True)
class Alert:
    kind: AlertKind
    title: str
    message: str


def alert_for(event: Event) -> Alert | None:
    """The alert an event is, if any."""
    if isinstance(event, RunFinished):
        if event.status == "failed":
            return Alert("failure", "run failed", event.reason or f"at step {event.final_step}")
        if event.cause in ("budget", "no_signal", "health"):  # stopped itself, not finished
            title = {
                "budget": "run stopped: budget reached",
                "no_signal": "run trained nothing",
                "health": "run stopped: health check",
            }[event.cause]
            return Alert(
                "stop",
                title,
                f"step {event.final_step}" + (f": {event.reason}" if event.reason else ""),
            )
        return Alert(
            "finish",
            f"run {event.status}",
            f"step {event.final_step}" + (f": {event.reason}" if event.reason else ""),
        )
    if not isinstance(event, CommandReceived):
        return None
    reason = str(event.args.get("reason", "")) if isinstance(event.args, Mapping) else ""
    if event.source == AUTOMATIC and event.command in ("pause", "stop", "rollback"):
        verb = {"pause": "paused", "stop": "stopping", "rollback": "rolling back"}
        return Alert("collapse", f"collapse: {verb[event.command]}", reason)
    if event.command == "pause" and event.source != "user":
        return Alert("pause", "run paused", reason)
    if event.command == "stop" and event.source in (SOURCE_ENGINE, HEALTH_PAUSE):
        return Alert("stop", "run stopping by itself", reason)
    return None


def _clean(text: str, *, most: int = MOST_CHARS) -> str:
    """One line without control characters (an escape in a message would end the OSC)."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= most else line[: most - 1] + "…"


def terminal_escapes(alert: Alert, *, run: str = "", tmux: bool = False) -> str:
    """The bell, then the OSC 9 and OSC 777 notifications of `alert`; inside tmux each OSC
    goes through its passthrough (`set -g allow-passthrough on` lets it out)."""
    title = _clean(f"tinker-tui {run}: {alert.title}" if run else f"tinker-tui: {alert.title}")
    message = _clean(alert.message)
    body = f"{title}: {message}" if message else title
    oscs = [
        f"\x1b]9;{body}\x07",
        f"\x1b]777;notify;{title.replace(';', ',')};{message.replace(';', ',')}\x07",
    ]
    if tmux:
        oscs = ["\x1bPtmux;" + osc.replace("\x1b", "\x1b\x1b") + "\x1b\\" for osc in oscs]
    return "\a" + "".join(oscs)


class Notifier:
    """Sends the alerts of the events it is given (an `EventBus` handler).

    Args:
        write: Writes text to the terminal (bell and escapes); None: none, unless
            `terminal` asks a dashboard to give its own.
        terminal: Whether alerts go to the terminal (`--notify`).
        command: A shell command run for each alert; None: none.
        since: Events before this time (the engine's clock) are an earlier process's,
            replayed: not alerted again.
        tmux: Wrap the escapes for tmux's passthrough (the caller reads `TMUX`).
        warn: Told, once, when the command cannot be started.
        spawn: Starts the command (tests pass a fake); `subprocess.Popen` by default.
    """

    def __init__(
        self,
        *,
        write: Callable[[str], None] | None = None,
        terminal: bool = False,
        command: str | None = None,
        since: float = float("-inf"),
        tmux: bool = False,
        warn: Callable[[str], None] | None = None,
        spawn: Callable[..., subprocess.Popen[bytes]] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.write = write
        self.terminal = terminal or write is not None
        self.command = command
        self.since = since
        self.tmux = tmux
        self.warn = warn
        self._spawn = spawn or subprocess.Popen
        self._environ = dict(os.environ if environ is None else environ)
        self._children: list[subprocess.Popen[bytes]] = []
        self._warned = False
        self.run = ""
        #: Every alert sent, in order (what the summary and the tests read).
        self.sent: list[Alert] = []

    def handle(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.run = event.run_name or event.run_id
            return
        if event.time < self.since:
            return
        alert = alert_for(event)
        if alert is not None:
            self.send(alert)

    def send(self, alert: Alert) -> None:
        self.sent.append(alert)
        if self.write is not None:
            try:
                self.write(terminal_escapes(alert, run=self.run, tmux=self.tmux))
            except OSError:  # the terminal is gone (SIGHUP): the command still runs
                pass
        if self.command:
            self._run_command(alert)

    def _run_command(self, alert: Alert) -> None:
        """Start the command and go on: it is reaped at the next alert, never waited for."""
        assert self.command is not None
        self._children = [c for c in self._children if c.poll() is None]
        env = dict(
            self._environ,
            TINKER_TUI_ALERT=alert.kind,
            TINKER_TUI_TITLE=alert.title,
            TINKER_TUI_MESSAGE=_clean(alert.message),
            TINKER_TUI_RUN=self.run,
        )
        try:
            self._children.append(
                self._spawn(
                    self.command,
                    shell=True,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        except OSError as exc:
            if self.warn is not None and not self._warned:
                self._warned = True
                self.warn(f"--notify-command could not start: {exc.strerror or exc}")
