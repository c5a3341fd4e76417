"""An ART (OpenPipe's Agent Reinforcement Trainer) model folder as our typed events, read
incrementally: each `poll` returns what the folder gained since the last one.

The folder is the model's output directory, `<art path>/<project>/models/<model name>/`,
as ART's `Model.log` and its backends write it:

- `model.json` (written when the model is registered) -> `RunStarted` (the run's id is
  `art:<project>/<name>`, its backend "art", its model `base_model`).
- each `history.jsonl` row -> by its split. A row with `train/...` keys is the step that
  trained on the rollouts of ART step `s`: our step `s + 1` (ART counts the steps trained
  before the rollouts, we count the one they train), `train/reward` as our `reward/mean`,
  `time/step_wall_s` as our `time/step`, every other number under its own name. A row with
  `val/...` (or `test/...`) keys is an evaluation of the weights of ART step `s` (our step
  `s`): `val/reward` as our `eval/reward_mean`.
- `trajectories/train/NNNN.parquet` -> a `GroupSampled` per group of rollouts of that
  step (their messages, rewards and metrics), read once the file is whole.
- `checkpoints/NNNN/` -> `CheckpointSaved` (the weights after NNNN steps: our step NNNN);
  one gone since (ART's `delete_checkpoints`) -> `CheckpointDeleted`.

ART writes no end marker: a folder is followed until the person watching quits, and
says so. Times are the rows' `recorded_at` stamps (when ART wrote them).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from tinker_tui.engine.clock import Clock
from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.events import (
    CheckpointDeleted,
    CheckpointSaved,
    EvalCompleted,
    Event,
    GroupSampled,
    LogEmitted,
    RunFinished,
    RunStarted,
    StepTrained,
    TrajectorySummary,
)
from tinker_tui.engine.metrics import metric_keys as keys

#: Files and folders whose presence makes a folder an ART model folder.
MARKERS = ("history.jsonl", "model.json", "trajectories")
#: The splits ART logs evaluations under.
EVAL_SPLITS = ("val", "test")
#: ART's metric names that have a pane of ours, and the name the pane reads.
RENAMED = {
    "train/reward": keys.REWARD_MEAN,
    "time/step_wall_s": keys.STEP_TIME,
    "val/reward": keys.EVAL_REWARD_MEAN,
    "test/reward": keys.EVAL_REWARD_MEAN,
}
#: Group ids of step `s` are `s * GROUP_STRIDE + group_index` (unique across the run).
GROUP_STRIDE = 100_000
#: What the log says once, as the folder is first read.
WATCHING = (
    "watching the ART model folder {name}: read-only, the program that trains it steers "
    "it; ART writes no end marker, so this follows the folder until you quit"
)


def is_art_folder(folder: Path) -> bool:
    return folder.is_dir() and any((folder / name).exists() for name in MARKERS)


def split_of(row: Mapping[str, Any]) -> str:
    """The split a history row was logged under: "train", "val", "test" or "" (none)."""
    splits = {name.split("/", 1)[0] for name in row if "/" in name}
    for split in ("train", *EVAL_SPLITS):
        if split in splits:
            return split
    return ""


def mapped_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """A history row's numbers as our metrics: the names with a pane renamed (`RENAMED`),
    every other under its own name; the bookkeeping (`step`, `training_step`,
    `recorded_at`, the wall clock since the process began) left out."""
    out: dict[str, float] = {}
    for name, value in row.items():
        if name in ("step", "training_step", "time/wall_clock_sec"):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[RENAMED.get(name, name)] = float(value)
    return out


class ArtRun:
    """Incremental reader of one ART model folder (see the module docstring).

    `poll` does blocking file reads: call it from a thread (`asyncio.to_thread`)."""

    backend = "art"
    not_ended = "ART writes no end marker"

    def __init__(self, folder: str | Path, clock: Clock) -> None:
        self.folder = Path(folder).expanduser()
        if not self.folder.is_dir():
            raise UsageError(f"no folder {self.folder}")
        if not is_art_folder(self.folder):
            raise UsageError(
                f"{self.folder} is not an ART model folder (it has none of "
                f"{', '.join(MARKERS)}; it is <art path>/<project>/models/<model name>)"
            )
        self.clock = clock
        self.model = self._model_json()
        project = str(self.model.get("project") or self.folder.resolve().parent.parent.name)
        self.name = str(self.model.get("name") or self.folder.resolve().name)
        self.run_id = f"art:{project}/{self.name}"
        self.started: RunStarted | None = None
        #: Always None: ART writes no end marker (the session follows until quit).
        self.finished: RunFinished | None = None
        self.step = 0
        self._history_at = 0  # bytes of history.jsonl read
        self._trajectories_read: set[int] = set()
        self._checkpoints: dict[int, str] = {}
        self._step_times: dict[int, float] = {}
        self._last_time = 0.0

    def _model_json(self) -> dict[str, Any]:
        path = self.folder / "model.json"
        try:
            data = json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    # ------------------------------------------------------------------ reading

    def poll(self) -> list[Event]:
        """What the folder gained since the last call, as events in order."""
        events: list[Event] = []
        rows = self._new_rows()
        if self.started is None:
            if not rows:
                return events
            self.started = self._run_started(rows[0])
            events.append(self.started)
            events.append(
                LogEmitted(
                    time=self.started.time,
                    level="info",
                    message=WATCHING.format(name=self.name),
                )
            )
        groups = self._new_groups()
        for row in rows:
            events += self._row(row, groups)
        for step in sorted(groups):  # rollouts whose step is still to come
            events += groups.pop(step)
        events += self._checkpoint_changes()
        return events

    def _new_rows(self) -> list[dict[str, Any]]:
        """The history rows written whole since the last read."""
        path = self.folder / "history.jsonl"
        if not path.is_file():
            return []
        with path.open("rb") as file:
            file.seek(self._history_at)
            data = file.read()
        whole = data[: data.rfind(b"\n") + 1]  # a row being written: read it next time
        self._history_at += len(whole)
        rows = []
        for line in whole.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows

    def _time(self, row: Mapping[str, Any]) -> float:
        stamp = row.get("recorded_at")
        try:
            when = datetime.fromisoformat(str(stamp)).timestamp()
        except ValueError:
            when = self.clock.now()
        self._last_time = max(self._last_time, when)
        return self._last_time

    def _run_started(self, first: Mapping[str, Any]) -> RunStarted:
        time = self._time(first) - float(first.get("time/wall_clock_sec") or 0.0)
        config = self.model.get("config")
        scalars = {
            k: v
            for k, v in (config.items() if isinstance(config, dict) else ())
            if isinstance(v, str | int | float | bool)
        }
        return RunStarted(
            time=time,
            run_id=self.run_id,
            name=self.name,
            backend=self.backend,
            base_model=str(self.model.get("base_model") or ""),
            max_steps=0,
            start_step=0,
            config=scalars,
            task_spec=str(self.folder),
        )

    def _row(self, row: Mapping[str, Any], groups: dict[int, list[Event]]) -> list[Event]:
        raw = row.get("step", row.get("training_step"))
        art_step = int(raw) if isinstance(raw, int | float) else self.step
        split = split_of(row)
        time = self._time(row)
        if split in EVAL_SPLITS:
            # its own split's numbers only: the unprefixed counts ART adds (`data/...`)
            # are the training steps' series
            own = {k: v for k, v in row.items() if k.startswith(f"{split}/")}
            scenarios = row.get("data/step_num_scenarios")  # in an eval row, the eval's
            if isinstance(scenarios, int | float):
                own[keys.EVAL_NUM_SCENARIOS] = scenarios
            return [
                EvalCompleted(
                    time=time, step=art_step, policy_version=art_step, metrics=mapped_metrics(own)
                )
            ]
        if split != "train":
            return []
        # the rollouts of the step, stamped when ART logged them (with the row)
        events = [dataclasses.replace(e, time=time) for e in groups.pop(art_step, [])]
        self.step = art_step + 1
        self._step_times[self.step] = time
        events.append(
            StepTrained(
                time=time,
                step=self.step,
                policy_version=self.step,
                metrics=mapped_metrics(row),
                group_ids=tuple(e.group_id for e in events if isinstance(e, GroupSampled)),
            )
        )
        return events

    def _new_groups(self) -> dict[int, list[Event]]:
        """The groups of the train trajectory files not read before, by ART step; a file
        being written (not yet a whole parquet file) is read at a later poll."""
        found: dict[int, list[Event]] = {}
        folder = self.folder / "trajectories" / "train"
        if not folder.is_dir():
            return found
        for path in sorted(folder.glob("*.parquet")):
            if not path.stem.isdigit() or int(path.stem) in self._trajectories_read:
                continue
            rows = _parquet_rows(path)
            if rows is None:
                continue
            step = int(path.stem)
            self._trajectories_read.add(step)
            found[step] = _groups(step, rows, self._last_time or self.clock.now())
        return found

    def _checkpoint_changes(self) -> list[Event]:
        folder = self.folder / "checkpoints"
        now = {
            int(p.name): str(p)
            for p in (folder.iterdir() if folder.is_dir() else ())
            if p.is_dir() and p.name.isdigit()
        }
        events: list[Event] = []
        time = self._last_time or self.clock.now()
        for step in sorted(set(now) - set(self._checkpoints)):
            events.append(
                CheckpointSaved(
                    time=self._step_times.get(step, time),
                    step=step,
                    kind="sampler",
                    name=f"{step:04d}",
                    path=now[step],
                )
            )
        for step in sorted(set(self._checkpoints) - set(now)):
            events.append(
                CheckpointDeleted(
                    time=time,
                    step=step,
                    kind="sampler",
                    name=f"{step:04d}",
                    path=self._checkpoints[step],
                )
            )
        self._checkpoints = now
        return events


def _parquet_rows(path: Path) -> list[dict[str, Any]] | None:
    """The rows of a trajectories file, or None while it is not whole yet."""
    import pyarrow.parquet as pq  # a dependency of the cookbook's `datasets`

    try:
        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    except (OSError, ValueError):
        return None
    return rows


def _json(value: Any) -> dict[str, Any]:
    try:
        data = json.loads(value) if isinstance(value, str) else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _groups(step: int, rows: list[dict[str, Any]], time: float) -> list[Event]:
    """A trajectories file's rows as one `GroupSampled` per group, sampled by the weights
    of ART step `step` (our policy version `step`)."""
    by_group: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_group.setdefault(int(row.get("group_index") or 0), []).append(row)
    events: list[Event] = []
    for index, members in sorted(by_group.items()):
        trajectories = tuple(_trajectory(row, step) for row in members)
        metadata = _json(members[0].get("group_metadata"))
        scenario = metadata.get("scenario_id") or _json(members[0].get("metadata")).get(
            "scenario_id"
        )
        events.append(
            GroupSampled(
                time=time,
                group_id=step * GROUP_STRIDE + index,
                scenario_id=str(scenario) if scenario is not None else f"group {index}",
                policy_version=step,
                num_trajectories=len(trajectories),
                num_tokens=sum(t.num_tokens for t in trajectories),
                reward_mean=sum(t.reward for t in trajectories) / len(trajectories),
                trajectories=trajectories,
                scenario_index=index,
            )
        )
    return events


def _trajectory(row: Mapping[str, Any], version: int) -> TrajectorySummary:
    """One trajectory: its messages (tool calls as their JSON), reward and metrics. ART
    keeps the text, not the tokens: the token count is 0 (not known)."""
    messages = []
    for message in row.get("messages") or []:
        content = message.get("content") or ""
        if message.get("tool_calls"):
            content = (content + "\n" if content else "") + str(message["tool_calls"])
        messages.append({"role": str(message.get("role") or ""), "content": content})
    metrics = {
        k: v for k, v in _json(row.get("metrics")).items() if isinstance(v, int | float | bool)
    }
    reward = row.get("reward")
    return TrajectorySummary(
        reward=float(reward) if isinstance(reward, int | float) else 0.0,
        policy_version=version,
        num_tokens=0,
        messages=tuple(messages),
        metrics=metrics,
    )
