"""`tinker-tui runs`: a table of the runs in the store.

NAME is the run's own name (`--name`), shown when some run has one; PARENT, shown likewise,
the checkpoint a fork started from (`run --init-from`: RUN@STEP or a tinker:// path); EVAL
its evaluation (`app.eval_results`), shown when some run has one, tagged P1, P2... when their
protocols differ. REWARD is the mean reward of the last step; DURATION, for a run still running, its time so
far (paused time included: it is wall time). STATUS is the stored status, except that a
run recorded as running whose process is gone (killed, crashed, machine restarted) shows as
`interrupted`: `run TASK --resume RUN` continues it from its last confirmed checkpoint
(CKPT); and a live run that is paused shows as `paused` (`tinker-tui attach RUN`, then `p`,
resumes it). `shown_status` is the one rule, for this table and serve's list of runs.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from pathlib import Path
from typing import Any

from tinker_tui.app.commands.common import EXIT_OK, add_db_option, store_path
from tinker_tui.app.eval_results import (
    ShownEval,
    eval_cell,
    from_run_eval,
    latest_command_eval,
    protocol_note,
    protocol_tags,
)
from tinker_tui.app.json_output import add_json_option, document, print_json
from tinker_tui.app.view_maths import ended_text
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.store.eval_records import StoredEval, stored_evals
from tinker_tui.engine.training.eval_protocol import EvalProtocol

COLUMNS = (
    "RUN",
    "NAME",
    "TASK",
    "BACKEND",
    "STATUS",
    "STEP",
    "REWARD",
    "EVAL",
    "CKPT",
    "STARTED",
    "DURATION",
    "PARENT",
)


def add_parser(commands: Any) -> None:
    runs = commands.add_parser(
        "runs",
        help="list the runs in the store",
        description="List the runs in the store, newest first.",
    )
    add_db_option(runs)
    add_json_option(runs, "runs")


async def read_records(db_path: Path) -> list[dict[str, Any]]:
    """One record per run, newest first: what the table shows, as values (the runs of
    `runs --json`, `app.json_output`)."""
    from tinker_tui.engine.store import StoreReader
    from tinker_tui.engine.training.resume import run_is_live

    async with await StoreReader.open_readonly(db_path) as store:
        runs = await store.runs()
        progress = await store.progress()
        last = await store.last_metrics()
        states = await store.last_states()
        last_evals = await store.last_evals()
        down = {run.run_id: await store.down_seconds(run.run_id) for run in runs}
    by_run: dict[str, list[StoredEval]] = {}
    for stored in stored_evals(db_path):
        by_run.setdefault(stored.target.run_id, []).append(stored)
    records = []
    now = time.time()  # a running run's duration is its time so far
    for run in runs:
        done = progress.get(run.run_id, {})
        status = shown_status(
            run.status,
            run_is_live(db_path, run.run_id) if run.status == "running" else False,
            states.get(run.run_id),
        )
        cause = run.cause if status == run.status else ""
        step = run.final_step
        if step is None:
            step = done.get("step") or run.start_step
        started, ended = run.started_at, run.ended_at
        # the time it ran: a resumed run's time down between its sessions left out
        end = (
            ended
            if started and ended
            else now
            if started and status in ("running", "paused")
            else None
        )
        reward = last.get(run.run_id, {}).get(keys.REWARD_MEAN)
        in_run = last_evals.get(run.run_id)
        shown = latest_command_eval(by_run.get(run.run_id, [])) or (
            None
            if in_run is None
            else from_run_eval(in_run["step"], in_run["metrics"], in_run["protocol"])
        )
        records.append(
            {
                "run_id": run.run_id,
                "name": run.run_name or None,
                "task": run.name,
                "task_spec": run.task_spec or None,
                "backend": run.backend,
                "base_model": run.base_model,
                "status": status,
                "cause": cause or None,
                "reason": run.reason or None,
                "step": step,
                "max_steps": run.max_steps or None,
                "reward": reward
                if isinstance(reward, int | float) and math.isfinite(reward)
                else None,
                "eval": None if shown is None else shown.as_dict(),
                "checkpoint_step": done.get("checkpoint"),
                "started_at": started,
                "ended_at": ended,
                "duration_seconds": None
                if end is None or not started
                else max(0.0, end - started - down.get(run.run_id, 0.0)),
                "down_seconds": down.get(run.run_id, 0.0),
                "note": run.note or None,
                "parent": run.parent or None,
            }
        )
    return records


async def read_table(db_path: Path) -> list[dict[str, Any]]:
    """One dict per run, newest first, with the columns of the table."""
    return table_rows(await read_records(db_path))


def table_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records (`read_records`) as the table's text, one dict of columns per run."""
    tags = protocol_tags([_shown(r) for r in records])
    return [
        {
            "RUN": r["run_id"],
            "NAME": r["name"] or "-",
            "TASK": r["task"],
            "BACKEND": r["backend"],
            "STATUS": ended_text(r["status"], r["cause"] or ""),
            "STEP": f"{r['step']}/{r['max_steps'] or '?'}",
            "REWARD": "-" if r["reward"] is None else f"{r['reward']:.3f}",
            "EVAL": eval_cell(_shown(r), tags),
            "CKPT": "-" if r["checkpoint_step"] is None else str(r["checkpoint_step"]),
            "STARTED": _when(r["started_at"]),
            "DURATION": "-" if r["duration_seconds"] is None else _duration(r["duration_seconds"]),
            "PARENT": r["parent"] or "-",
        }
        for r in records
    ]


def _shown(record: dict[str, Any]) -> ShownEval | None:
    """A record's evaluation back as `ShownEval` (for its cell and protocol tag)."""
    e = record.get("eval")
    if not e:
        return None
    return ShownEval(
        value=e["value"],
        low=e["low"],
        high=e["high"],
        label=e["label"],
        source=e["source"],
        step=e["step"],
        protocol=EvalProtocol.from_dict(e["protocol"]),
    )


def shown_status(stored: str, live: bool, last_state: str | None) -> str:
    """A run's status as a list shows it: the stored one; for a run stored as running,
    `interrupted` once its process is gone, `paused` while it is paused."""
    if stored != "running":
        return stored
    if not live:
        return "interrupted"
    return "paused" if last_state == "paused" else "running"


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def format_table(rows: list[dict[str, Any]]) -> str:
    """The table; the NAME, PARENT and EVAL columns only when some run has a name
    (`--name`), a parent (a fork), an evaluation."""
    optional = ("NAME", "PARENT", "EVAL")
    columns = [c for c in COLUMNS if c not in optional or any(r.get(c, "-") != "-" for r in rows)]
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    for r in rows:
        lines.append("  ".join(str(r[c]).ljust(widths[c]) for c in columns).rstrip())
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.json:
        records = asyncio.run(read_records(store_path(args)))
        print_json(document("runs", store=str(store_path(args)), runs=records))
        return EXIT_OK
    records = asyncio.run(read_records(store_path(args)))
    if not records:
        print(f"no runs in {store_path(args)}")
        return EXIT_OK
    print(format_table(table_rows(records)))
    for line in protocol_note([_shown(r) for r in records]):
        print(line)
    return EXIT_OK
