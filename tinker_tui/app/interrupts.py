"""Signals, and the exit code each ends a command with: 130 SIGINT, 143 SIGTERM, 129
SIGHUP (`EXIT_CODES`, 128 + the signal's number, as a shell reports a process a signal
ended). Every exit code, these included, is listed in `app.exit_codes`; they are named
here again for the commands that import them from here.

Which signals a command takes (`taken_signals`: never one the process was started ignoring)
and how a command's event loop takes them (`take_signals`) are decided here too.

SIGINT, SIGTERM and SIGHUP before a command handles them itself:

From the command line's start until the command is chosen (`app.cli`), and while `run`
checks its plan and imports the engine (`app.commands.run`), either signal raises a
KeyboardInterrupt that names it (`interrupting`): the command ends at once, before anything
has started, with 130 or 143 and one line, never a traceback. The signal is also noted: an import that runs
Python code under C code which clears errors can lose the exception and go on (a sweep of
signals at random moments found a Ctrl+C during the imports that the run never saw: it
trained to its end), so the caller checks the note once the imports are done.

A dashboard then holds them (`hold_signals`): kept, not fatal, and handed to it once it
handles them itself, so a signal sent while it loads still stops the run (or cancels the
engine's start).

The standard library and `engine.errors` only (asyncio only for its types): every command
imports it before its signals are handled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal, NoReturn

from tinker_tui.app.exit_codes import (
    EXIT_FAILED,
    EXIT_HEALTH_STOP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SIGHUP,
    EXIT_SIGTERM,
    EXIT_USAGE,
)

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_HEALTH_STOP",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SIGHUP",
    "EXIT_SIGTERM",
    "EXIT_USAGE",
    "exit_now",
    "handlers_kept",
    "hold_signals",
    "interrupted",
    "interrupting",
    "quiet_after_the_stop",
    "release_signals",
    "signal_of",
    "take_signals",
    "taken_signals",
]

#: The exit code of a command a signal ended. SIGHUP (the terminal went away) too: before
#: a dashboard handled it, a hang-up in its first half second killed it without a word.
EXIT_CODES: dict[int, int] = {
    signal.SIGINT: EXIT_INTERRUPTED,
    signal.SIGTERM: EXIT_SIGTERM,
    signal.SIGHUP: EXIT_SIGHUP,
}


#: Seconds after a stop began during which another signal is the same request, not a second
#: one: GNU `timeout` signals the run and then its process group (about 20 ms apart), a
#: shell's kill of a job may do the same. A person's second Ctrl+C comes later than this.
SAME_STOP_WINDOW = 0.5

StopAction = Literal["stop", "same", "force"]


class StopSignals:
    """The one rule for SIGINT/SIGTERM during a run, for the headless run and the dashboard:
    the first signal stops gracefully ("stop"); another within `SAME_STOP_WINDOW` seconds is
    the same request ("same", ignored); one after that, once the stop was announced, stops
    at once ("force"). A signal while a stop asked for otherwise (a dashboard's command) is
    under way forces too."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.began: float | None = None  # when the first signal came

    def take(self, *, stopping: bool = False) -> StopAction:
        now = self._clock()
        if self.began is None:
            if stopping:
                return "force"
            self.began = now
            return "stop"
        return "same" if now - self.began < SAME_STOP_WINDOW else "force"


def taken_signals() -> list[int]:
    """The signals of EXIT_CODES this process handles: not one it was started ignoring
    (`nohup` ignores SIGHUP; a script's background job ignores SIGINT). Taking SIGHUP from
    `nohup tinker-tui run … --no-ui &` stopped the run when its terminal closed."""
    return [signum for signum in EXIT_CODES if signal.getsignal(signum) is not signal.SIG_IGN]


def take_signals(loop: asyncio.AbstractEventLoop, handler: Callable[[int], object]) -> list[int]:
    """Have `loop` call `handler(signum)` for each of `taken_signals`; returns those it took
    (none where the loop cannot: another thread, another platform), for `release_signals`.
    How every command with an event loop takes its signals (the headless run, the
    dashboard, `serve`)."""
    taken: list[int] = []
    try:
        for signum in taken_signals():
            loop.add_signal_handler(signum, handler, signum)
            taken.append(signum)
    except (NotImplementedError, RuntimeError, ValueError):  # not on this platform/thread
        pass
    return taken


def release_signals(loop: asyncio.AbstractEventLoop, taken: list[int]) -> None:
    """Undo `take_signals`."""
    for signum in taken:
        loop.remove_signal_handler(signum)


def _after_the_stop(signum: int, frame: object) -> None:
    """A signal once the command has stopped: the same stop again; nothing to do."""


def quiet_after_the_stop(taken: list[int]) -> None:
    """The command's loop has stopped and only its last words remain: a signal (of `taken`)
    from now until the process ends changes nothing. Python's own handler would raise a
    KeyboardInterrupt wherever the teardown is (a warning being printed, an exit hook: an
    "Exception ignored" traceback after a run that had stopped cleanly). In-process callers
    put the handlers back (`app.cli.main`)."""
    if threading.current_thread() is threading.main_thread():
        for signum in taken:
            signal.signal(signum, _after_the_stop)


@contextlib.contextmanager
def handlers_kept() -> Iterator[None]:
    """On leaving, the signal handlers are what they were on entering: a command called in
    a process that goes on (a test) leaves none of its own behind."""
    before = {signum: signal.getsignal(signum) for signum in EXIT_CODES}
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in before.items():
                if handler is not None:
                    signal.signal(signum, handler)


def interrupted(signum: int) -> KeyboardInterrupt:
    """The exception `interrupting` raises for a signal: a KeyboardInterrupt (code that
    lets a Ctrl+C through lets it through too) that carries the signal's number."""
    return KeyboardInterrupt(signum)


def signal_of(exc: KeyboardInterrupt) -> int | None:
    """The signal `interrupted` made `exc` for; None for Python's own KeyboardInterrupt."""
    signum = exc.args[0] if len(exc.args) == 1 else None
    return signum if isinstance(signum, int) and signum in EXIT_CODES else None


@contextlib.contextmanager
def interrupting() -> Iterator[list[int]]:
    """While inside: SIGINT, SIGTERM and SIGHUP raise `interrupted(signum)` and are noted in the
    list this yields. On leaving, the handlers before are put back, except where one was
    installed meanwhile (`hold_signals`): that one takes over with no moment without one."""
    noted: list[int] = []

    def interrupt(signum: int, frame: object) -> None:
        noted.append(signum)
        raise interrupted(signum)

    if threading.current_thread() is not threading.main_thread():
        yield noted  # signals reach the main thread only
        return
    previous = {signum: signal.signal(signum, interrupt) for signum in taken_signals()}
    try:
        yield noted
    finally:
        for signum, handler in previous.items():
            if signal.getsignal(signum) is interrupt:
                signal.signal(signum, handler)


def exit_now(code: int) -> NoReturn:
    """End the process with the command's `code` once it is done, without the interpreter's
    teardown. A second Ctrl+C that came during that teardown killed a run that had stopped
    cleanly: first a KeyboardInterrupt in an exit hook (torch's), and once Python had put
    the default signal handlers back, the signal's own exit (-2) with no word. Everything
    the command wrote is flushed here; its files, store and trackers it closed itself."""
    import logging

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        logging.shutdown()
    os._exit(code)


def hold_signals() -> list[int]:
    """From now until the dashboard handles them itself, SIGINT, SIGTERM and SIGHUP are kept (not
    fatal) and handed to it when it starts: a signal sent while the dashboard loads must
    still stop the run, not only kill the dashboard. Returns the list they are kept in."""
    held: list[int] = []

    def hold(signum: int, frame: object) -> None:
        held.append(signum)

    for signum in taken_signals():  # within `interrupting`: an ignored one is still ignored
        signal.signal(signum, hold)
    return held
