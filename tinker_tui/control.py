"""Steer a running run from a script: `connect(run_id)` gives a client of the run's control
endpoint (status, pause, resume, checkpoint, evaluate, set a knob, roll back, stop). The
protocol, the errors and the token's rules are in docs/control-api.md.

    from tinker_tui.control import connect

    run = connect()                    # the newest running run in runs/tinker-tui.db
    if run.status()["knobs"]["learning_rate"] > 5e-4:
        run.set("learning_rate", 5e-4)

The same client `tinker-tui attach` and `tinker-tui mcp` use (`engine.control.client`).
"""

from __future__ import annotations

from tinker_tui.engine.control.client import (
    DEFAULT_STORE,
    AmbiguousRun,
    CommandRefused,
    ControlClient,
    ControlUnavailable,
    NoEndpoint,
    RunNotRunning,
    connect,
    find_control_file,
)

__all__ = [
    "DEFAULT_STORE",
    "AmbiguousRun",
    "CommandRefused",
    "ControlClient",
    "ControlUnavailable",
    "NoEndpoint",
    "RunNotRunning",
    "connect",
    "find_control_file",
]
