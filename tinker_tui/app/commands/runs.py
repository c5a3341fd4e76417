"""`tinker-tui runs`: a table of the runs in the store.

REWARD is the mean reward of the last step; DURATION, for a run still running, its time so
far. STATUS is the stored status, except that a run recorded as running whose process is
gone (killed, crashed, machine restarted) shows as `interrupted`: `run TASK --resume RUN`
continues it from its last confirmed checkpoint (CKPT).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from pathlib import Path
from typing import Any

from tinker_tui.app.commands.common import EXIT_OK, add_db_option, store_path
from tinker_tui.engine import metric_keys as keys

COLUMNS = ("RUN", "TASK", "BACKEND", "STATUS", "STEP", "REWARD", "CKPT", "STARTED",
           "DURATION")


def add_parser(commands: Any) -> None:
    runs = commands.add_parser("runs", help="list the runs in the store",
                               description="List the runs in the store, newest first.")
    add_db_option(runs)


async def read_table(db_path: Path) -> list[dict[str, Any]]:
    """One dict per run, newest first, with the columns of the table."""
    from tinker_tui.engine.resume import run_is_live
    from tinker_tui.engine.store import StoreReader

    async with await StoreReader.open_readonly(db_path) as store:
        runs = await store.runs()
        progress = await store.progress()
        last = await store.last_metrics()
    rows = []
    now = time.time()  # a running run's duration is its time so far
    for run in runs:
        done = progress.get(run.run_id, {})
        status = run.status
        if status == "running" and not run_is_live(db_path, run.run_id):
            status = "interrupted"
        step = run.final_step
        if step is None:
            step = done.get("step") or run.start_step
        started, ended = run.started_at, run.ended_at
        rows.append({
            "RUN": run.run_id,
            "TASK": run.name,
            "BACKEND": run.backend,
            "STATUS": status,
            "STEP": f"{step}/{run.max_steps or '?'}",
            "REWARD": _reward(last.get(run.run_id, {})),
            "CKPT": "-" if done.get("checkpoint") is None else str(done["checkpoint"]),
            "STARTED": _when(started),
            "DURATION": (_duration(ended - started) if started and ended
                         else _duration(now - started) if started and status == "running"
                         else "-"),
        })
    return rows


def _reward(metrics: dict[str, Any]) -> str:
    """The mean reward of the run's last step."""
    value = metrics.get(keys.REWARD_MEAN)
    if isinstance(value, int | float) and math.isfinite(value):
        return f"{value:.3f}"
    return "-"


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def format_table(rows: list[dict[str, Any]]) -> str:
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in COLUMNS).rstrip()]
    for r in rows:
        lines.append("  ".join(str(r[c]).ljust(widths[c]) for c in COLUMNS).rstrip())
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    rows = asyncio.run(read_table(store_path(args)))
    if not rows:
        print(f"no runs in {store_path(args)}")
        return EXIT_OK
    print(format_table(rows))
    return EXIT_OK
