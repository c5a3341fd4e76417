"""Every exit code of `tinker-tui`, in one table, and the one rule that turns how a run
ended into one, for the headless run and the dashboard alike.

docs/troubleshooting.md (`## Exit codes`) lists the same table; a test holds the two
equal. 0, 1 and 2 are the engine's errors' own (`engine.errors`: the engine raises them and
never imports the app); they are listed here with the rest. CI can tell a run that
completed (0) from one that trained nothing (4) or ran out of budget (5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_tui.engine.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:  # `app.interrupts` imports this early, before signals are handled
    from tinker_tui.engine.events import StopCause

__all__ = [
    "EXIT_BUDGET",
    "EXIT_CODE_TABLE",
    "EXIT_FAILED",
    "EXIT_HEALTH_STOP",
    "EXIT_INTERRUPTED",
    "EXIT_NO_SIGNAL",
    "EXIT_OK",
    "EXIT_SIGHUP",
    "EXIT_SIGTERM",
    "EXIT_USAGE",
    "run_exit_code",
]

#: A run without a dashboard stopped gracefully because a health check would have paused
#: it (rollout errors, no learning signal, a collapse) and nobody could resume it.
EXIT_HEALTH_STOP = 3
#: The run ended by itself having trained nothing: every group's rewards were equal.
EXIT_NO_SIGNAL = 4
#: The run stopped at its budget (`max_cost_usd`).
EXIT_BUDGET = 5
#: SIGHUP: the terminal went away.
EXIT_SIGHUP = 129
#: SIGINT (Ctrl+C): the run was stopped (gracefully, or at once by a second one).
EXIT_INTERRUPTED = 130
#: SIGTERM: the same.
EXIT_SIGTERM = 143

#: (code, what it means in a few words): the docs' table has a row per code, each naming
#: these words.
EXIT_CODE_TABLE: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "completed"),
    (EXIT_FAILED, "failed"),
    (EXIT_USAGE, "usage error"),
    (EXIT_HEALTH_STOP, "health check"),
    (EXIT_NO_SIGNAL, "trained nothing"),
    (EXIT_BUDGET, "budget"),
    (EXIT_SIGHUP, "SIGHUP"),
    (EXIT_INTERRUPTED, "SIGINT"),
    (EXIT_SIGTERM, "SIGTERM"),
)

_BY_CAUSE: dict[str, int] = {
    "health": EXIT_HEALTH_STOP,
    "no_signal": EXIT_NO_SIGNAL,
    "budget": EXIT_BUDGET,
    "failed": EXIT_FAILED,
}


def run_exit_code(status: str, cause: StopCause | str) -> int:
    """The exit code of a run that ended with `status` for `cause` (`RunFinished`), when no
    signal decided it: a failed run 1; a health stop 3, one that trained nothing 4, a
    budget stop 5; any other end (completed, stopped by a person) 0."""
    if status == "failed":
        return EXIT_FAILED
    return _BY_CAUSE.get(cause, EXIT_OK)
