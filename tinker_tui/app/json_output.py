"""What the commands print with `--json`: one documented, versioned JSON shape each
(docs/json-output.md), for scripts and coding agents that read runs instead of scraping
the tables people read.

Every document carries `"schema": "tinker-tui.<what>/<version>"`; the version goes up only
when a field changes meaning or goes away (a new field does not change it). Times are Unix
seconds; a value that is not known (or not a finite number) is null. `run --no-ui --json`
prints one JSON object per line as the run goes (`RunLines`).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from tinker_tui.engine.events import (
    CheckpointSaved,
    EvalCompleted,
    Event,
    RunFinished,
    RunResumed,
    RunStarted,
    SessionStarted,
    StepTrained,
)

#: The shape of each command's document, by command.
SCHEMAS = {
    "runs": "tinker-tui.runs/1",
    "show": "tinker-tui.show/1",
    "compare": "tinker-tui.compare/1",
    "cost": "tinker-tui.cost/1",
    "sweep": "tinker-tui.sweep/1",
    "run": "tinker-tui.run-line/1",
    "eval": "tinker-tui.eval/1",
}


def plain(value: Any) -> Any:
    """`value` as JSON can hold it: mappings, sequences, finite numbers (others null)."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    try:
        number = float(value)  # numpy / torch scalars
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None


def document(what: str, **fields: Any) -> dict[str, Any]:
    """A command's document: its schema first, then its fields."""
    return {"schema": SCHEMAS[what], **plain(fields)}


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(plain(doc), allow_nan=False, ensure_ascii=False)


def print_json(doc: Mapping[str, Any], out: TextIO | None = None) -> None:
    print(
        json.dumps(plain(doc), allow_nan=False, ensure_ascii=False, indent=2),
        file=out or sys.stdout,
        flush=True,
    )


def add_json_option(parser: Any, what: str) -> None:
    """`--json`: print the command's document (`SCHEMAS[what]`) instead of text."""
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print JSON ({SCHEMAS[what]}; see the JSON output docs page) instead of text",
    )


def step_record(event: StepTrained | EvalCompleted) -> dict[str, Any]:
    return {"step": event.step, "time": event.time, "metrics": plain(dict(event.metrics))}


def checkpoint_record(event: CheckpointSaved) -> dict[str, Any]:
    return {
        "step": event.step,
        "kind": event.kind,
        "name": event.name,
        "path": event.path,
        "time": event.time,
    }


def resume_record(event: RunResumed) -> dict[str, Any]:
    return {
        "time": event.time,
        "step": event.step,
        "checkpoint": event.checkpoint or None,
        "steps_undone": event.steps_undone,
        "groups_requeued": event.groups_requeued,
        "scenarios_pending": event.scenarios_pending,
        "down_seconds": event.down_seconds,
    }


def session_record(event: SessionStarted) -> dict[str, Any]:
    return {"time": event.time, "backend": event.backend, "base_model": event.base_model}


class RunLines:
    """`run --no-ui --json`: a JSON object per line on `out` for the run's start, each
    session and resume, each step, evaluation and checkpoint, and its end. Subscribe
    `handle` to the event bus; each line is flushed as it is written."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._run_id = ""

    def _line(self, event: str, time: float, **fields: Any) -> None:
        try:
            print(
                dumps(
                    {
                        "schema": SCHEMAS["run"],
                        "event": event,
                        "run_id": self._run_id,
                        "time": time,
                        **fields,
                    }
                ),
                file=self.out,
                flush=True,
            )
        except (BrokenPipeError, ValueError):  # the reader went away
            pass

    def handle(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self._run_id = event.run_id
            self._line(
                "started",
                event.time,
                task=event.name,
                backend=event.backend,
                base_model=event.base_model,
                max_steps=event.max_steps,
                start_step=event.start_step,
                run_name=event.run_name or None,
            )
        elif isinstance(event, SessionStarted):
            self._line("session", event.time, backend=event.backend, base_model=event.base_model)
        elif isinstance(event, RunResumed):
            record = resume_record(event)
            del record["time"]
            self._line("resumed", event.time, **record)
        elif isinstance(event, StepTrained):
            self._line("step", event.time, step=event.step, metrics=plain(dict(event.metrics)))
        elif isinstance(event, EvalCompleted):
            self._line("eval", event.time, step=event.step, metrics=plain(dict(event.metrics)))
        elif isinstance(event, CheckpointSaved):
            record = checkpoint_record(event)
            del record["time"]
            self._line("checkpoint", event.time, **record)
        elif isinstance(event, RunFinished):
            self._line(
                "finished",
                event.time,
                status=event.status,
                cause=event.cause or None,
                final_step=event.final_step,
                reason=event.reason,
            )
