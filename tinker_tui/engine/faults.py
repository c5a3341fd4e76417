"""Test hook: make this process signal itself at a named point, for the fault tests only.

Normal runs never set it. The fault tests (tests/test_faults.py) start a run with

    TINKER_TUI_FAULT=POINT:ACTION:STEP      e.g.  train:kill:3

and the first time the engine reaches POINT while working on training step STEP or a later
one (for `warmup`: warm-up step STEP or a later one), it sends itself ACTION once: `kill`
(SIGKILL: no cleanup of any kind), `int` (SIGINT, as Ctrl+C) or `term` (SIGTERM); or, at
the `train` point, `slow`: that step's training takes `SLOW_SECONDS` longer (a slow backend
call, for the graceful-stop tests; see `slow_down`). The points:

- `build`:      the policy's model is being built (STEP: 0)
- `warmup`:     supervised warm-up step STEP (from 1) is being trained
- `rollout`:    a group's rollouts have started (the group is in flight)
- `train`:      a batch was taken from the queue and is being trained
- `checkpoint`: a full checkpoint's state is written but not yet confirmed in the store
- `commit`:     the store is inside the transaction that confirms a checkpoint

Unset (the normal case) `hit` is one global lookup and one comparison.
"""

from __future__ import annotations

import asyncio
import os
import signal

ENV = "TINKER_TUI_FAULT"
POINTS = ("build", "warmup", "rollout", "train", "checkpoint", "commit")
ACTIONS: dict[str, signal.Signals | None] = {
    "kill": signal.SIGKILL,
    "int": signal.SIGINT,
    "term": signal.SIGTERM,
    "slow": None,
}
#: Seconds the `slow` action adds to a training step.
SLOW_SECONDS = 6.0


def parse(text: str | None) -> tuple[str, signal.Signals | None, int] | None:
    """(point, signal, step) from a TINKER_TUI_FAULT value; None when unset."""
    if not text:
        return None
    parts = text.split(":")
    try:
        point, action, step = parts
        if point not in POINTS or action not in ACTIONS:
            raise ValueError
        return point, ACTIONS[action], int(step)
    except ValueError:
        raise ValueError(
            f"{ENV}={text!r}: expected POINT:ACTION:STEP with POINT one of "
            f"{', '.join(POINTS)} and ACTION one of {', '.join(ACTIONS)}"
        ) from None


_armed = parse(os.environ.get(ENV))


def hit(point: str, step: int) -> None:
    """The engine reached `point` while working on training step `step`."""
    global _armed
    armed = _armed
    if armed is None or armed[0] != point or step < armed[2] or armed[1] is None:
        return
    _armed = None
    os.kill(os.getpid(), armed[1])


async def slow_down(point: str, step: int) -> None:
    """The `slow` action: at `point`, working on step `step`, wait `SLOW_SECONDS` once."""
    global _armed
    armed = _armed
    if armed is None or armed[0] != point or step < armed[2] or armed[1] is not None:
        return
    _armed = None
    await asyncio.sleep(SLOW_SECONDS)
