"""Run ids: the task's name, the UTC start time and a random suffix.

A module of its own (no torch, no backend) so a dashboard can name a run before the engine
process that runs it has imported anything.
"""

from __future__ import annotations

import random
import time

from tinker_tui.engine.clock import Clock


def new_run_id(name: str, clock: Clock) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(clock.now()))
    return f"{name}-{stamp}-{random.SystemRandom().randrange(16**4):04x}"
