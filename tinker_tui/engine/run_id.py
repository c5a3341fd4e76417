"""Run ids: the task's name, the UTC start time and a random suffix.

A run id names files (the metrics JSONL, the engine log, exports) and is pasted into
commands, so the name part keeps only letters, digits, `_`, `.` and `-`: a task named
"../../x" or "my task/1" wrote files outside the store's folder, and the printed
`attach`/`--resume` hints broke when copied.

A module of its own (no torch, no backend) so a dashboard can name a run before the engine
process that runs it has imported anything.
"""

from __future__ import annotations

import random
import re
import time

from tinker_tui.engine.clock import Clock


def id_part(name: str) -> str:
    """A task's name as it can stand in a file name and on a command line."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip(".-") or "run"


def new_run_id(name: str, clock: Clock) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(clock.now()))
    return f"{id_part(name)}-{stamp}-{random.SystemRandom().randrange(16**4):04x}"
