"""A tinker-cookbook run folder as our typed events, read through the cookbook's own
reader (`tinker_cookbook.stores.TrainingRunStore`), incrementally: each `poll` returns
what the folder gained since the last one, so a run still writing is followed.

How the folder maps onto our events:

- `config.json` -> `RunStarted` (the run's id is `cookbook:<folder name>`, its backend
  "cookbook", its model `model_name`; the scalar settings as its config).
- each `metrics.jsonl` record -> `StepTrained`. Steps count from 1 as ours do: the
  cookbook's batch `i` (its `step`) is our step `i + 1`, so its checkpoint after batch `i`
  (`batch: i + 1`) lands on the step that made it. `env/all/reward/total` is our
  `reward/mean` and `time/total` our `time/step`; every other number keeps its own name
  (`optim/*`, `time/*`, `env/all/*`, per-tag `env/<tag>/*`, `progress/*`).
- the evaluators' numbers in a metrics record (`<name>/env/all/reward/total`, `name`
  "test" by default; the cookbook evaluates the weights batch `i` samples with, before
  training it) -> an `EvalCompleted` of our step `i`, its reward as `eval/reward_mean`; its
  rollouts from `iteration_NNNNNN/eval_<label>_rollout_summaries.jsonl` where it saved them.
- each `checkpoints.jsonl` record -> `CheckpointSaved`; the final one (named "final" by
  `rl.train`, or marked `final`) ends the run (`RunFinished`, completed).
- each `iteration_NNNNNN/train_rollout_summaries.jsonl` -> a `GroupSampled` per group
  (written by the cookbook when `rollout_json_export` is on, its default). The summaries
  keep lengths, rewards and logs, not text: the conversations come from the iteration's
  logtree (`train_logtree.json`, the first `num_groups_to_log` groups), where it has them.

Times: a step is stamped at the run's start plus the sum of `time/total` so far when the
records have it (a replay draws the same every time), else when it was read.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tinker_tui.engine.clock import Clock
from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.events import (
    CheckpointKind,
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

#: Cookbook metric names that have a pane of ours, and the name the pane reads.
RENAMED = {"env/all/reward/total": keys.REWARD_MEAN, "time/total": keys.STEP_TIME}
#: An evaluator's reward in a metrics record: `<evaluator name>/` and this.
EVAL_REWARD = "/env/all/reward/total"
#: Files whose presence makes a folder a cookbook run folder.
MARKERS = ("metrics.jsonl", "config.json", "checkpoints.jsonl")
#: Group ids of iteration `i` are `i * GROUP_STRIDE + group_idx` (unique across the run).
GROUP_STRIDE = 100_000
#: What the rollouts view says of a run that saved no rollouts.
NO_ROLLOUTS = (
    "this cookbook run saved no rollout summaries: set rollout_json_export=True "
    "in its rl.train Config (the default) to see its rollouts here"
)


def is_cookbook_folder(folder: Path) -> bool:
    return folder.is_dir() and any((folder / name).is_file() for name in MARKERS)


def mapped_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    """A cookbook metrics record as our step metrics: numbers only, `step` left out,
    the names with a pane renamed (`RENAMED`), every other under its own name."""
    out: dict[str, float] = {}
    for name, value in record.items():
        if name == "step" or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            continue
        out[RENAMED.get(name, name)] = float(value)
    return out


def _scalars(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The config's scalar settings, nested ones as `outer.inner` (what a comparison
    lists when they differ)."""
    out: dict[str, Any] = {}
    for name, value in config.items():
        if isinstance(value, Mapping):
            out.update(_scalars(value, f"{prefix}{name}."))
        elif value is None or isinstance(value, str | int | float | bool):
            out[f"{prefix}{name}"] = value
    return out


class CookbookRun:
    """Incremental reader of one cookbook run folder (see the module docstring).

    `poll` does blocking file reads: call it from a thread (`asyncio.to_thread`)."""

    backend = "cookbook"
    not_ended = "no final checkpoint yet"

    def __init__(self, folder: str | Path, clock: Clock) -> None:
        from tinker_cookbook.stores import LocalStorage, TrainingRunStore

        self.folder = Path(folder).expanduser()
        if not self.folder.is_dir():
            raise UsageError(f"no folder {self.folder}")
        if not is_cookbook_folder(self.folder):
            raise UsageError(
                f"{self.folder} is not a tinker-cookbook run folder (it has none "
                f"of {', '.join(MARKERS)})"
            )
        self.clock = clock
        self.store = TrainingRunStore(LocalStorage(self.folder, mkdir=False))
        self.run_id = f"cookbook:{self.folder.resolve().name}"
        self.started: RunStarted | None = None
        self.finished: RunFinished | None = None
        self.step = 0
        self._elapsed = 0.0
        self._timed = True
        self._checkpoints_seen = 0
        self._iterations_read: set[int] = set()
        self._groups: dict[int, tuple[int, ...]] = {}
        self._said_no_rollouts = False
        self._step_times: dict[int, float] = {}

    # ------------------------------------------------------------------ reading

    def poll(self) -> list[Event]:
        """What the folder gained since the last call, as events in order."""
        events: list[Event] = []
        if self.finished is not None:
            return events
        records = self.store.read_new_metrics()
        if self.started is None:
            if not records:
                return events  # started once its first step lands (its length known)
            self.started = self._run_started(records[0])
            events.append(self.started)
            events.append(
                LogEmitted(
                    time=self.started.time,
                    level="info",
                    message=f"watching the tinker-cookbook run folder {self.folder.name}: "
                    "read-only, the program that trains it steers it",
                )
            )
        rollouts = self._new_rollouts()
        for record in records:
            batch = record.get("step")
            if isinstance(batch, int) and batch in rollouts:  # sampled before its step
                events += self._groups_of(batch, rollouts.pop(batch))
            events += self._evals(record)
            events.append(self._step(record))
        for iteration, summaries in sorted(rollouts.items()):  # their steps still to come
            events += self._groups_of(iteration, summaries)
        events += self._new_checkpoints()
        if self.finished is not None:
            if not self._iterations_read and not self._said_no_rollouts:
                self._said_no_rollouts = True
                events.append(LogEmitted(time=self._now(), level="info", message=NO_ROLLOUTS))
            events.append(self.finished)
        return events

    def _start_time(self) -> float:
        stamps = [
            (self.folder / name).stat().st_mtime
            for name in ("config.json",)
            if (self.folder / name).is_file()
        ]
        return min(stamps) if stamps else self.folder.stat().st_mtime

    def _run_started(self, first: Mapping[str, Any]) -> RunStarted:
        """From the config and the first metrics record, whose `progress/done_frac`
        ((batch + 1) / batches) gives the run's length."""
        config = self.store.read_config() or {}
        start = self._start_time()
        done, batch = first.get("progress/done_frac"), first.get("step")
        max_steps = (
            round((batch + 1) / done)
            if isinstance(done, float) and done > 0 and isinstance(batch, int)
            else 0
        )
        return RunStarted(
            time=start,
            run_id=self.run_id,
            name=self.folder.resolve().name,
            backend=self.backend,
            base_model=str(config.get("model_name") or ""),
            max_steps=int(max_steps or 0),
            start_step=0,
            config=_scalars(config),
            task_spec=str(self.folder),
        )

    def _now(self) -> float:
        assert self.started is not None
        return self.started.time + self._elapsed if self._timed else self.clock.now()

    def _step(self, record: Mapping[str, Any]) -> StepTrained:
        raw = record.get("step")
        step = int(raw) + 1 if isinstance(raw, int) else self.step + 1
        metrics = mapped_metrics(record)
        took = metrics.get(keys.STEP_TIME)
        if took is None:
            self._timed = False
        else:
            self._elapsed += took
        self.step = step
        self._step_times[step] = self._now()
        return StepTrained(
            time=self._now(),
            step=step,
            policy_version=step,
            metrics=metrics,
            group_ids=self._groups.get(step - 1, ()),
        )

    def _evals(self, record: Mapping[str, Any]) -> list[Event]:
        """The evaluations a metrics record carries: one per evaluator name whose reward is
        there (`<name>/env/all/reward/total`; not the training's own `env/...`), of the
        weights its batch sampled with (our step = the batch's index)."""
        raw = record.get("step")
        batch = int(raw) if isinstance(raw, int) else self.step
        events: list[Event] = []
        for name, value in record.items():
            prefix = name.removesuffix(EVAL_REWARD)
            if not name.endswith(EVAL_REWARD) or prefix in ("", "env") or "/" in prefix:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            own = {k: v for k, v in record.items() if k.startswith(prefix + "/")}
            metrics = {**mapped_metrics(own), keys.EVAL_REWARD_MEAN: float(value)}
            summaries = self._eval_rollouts(batch, prefix)
            events.append(
                EvalCompleted(
                    time=self._now() if self.started is not None else self.clock.now(),
                    step=batch,
                    policy_version=batch,
                    metrics=metrics,
                    trajectories=tuple(_trajectory(r, batch) for r in summaries),
                    scenario_ids=tuple(
                        "/".join(str(t) for t in r.get("tags") or [])
                        or f"group {r.get('group_idx', 0)}"
                        for r in summaries
                    ),
                )
            )
        return events

    def _eval_rollouts(self, iteration: int, name: str) -> list[dict[str, Any]]:
        """The rollout summaries an evaluation of `iteration` saved (files are named by the
        evaluator's label, which is its name made safe for a file name, or its index)."""
        for info in self.store.list_iterations():
            if info.iteration != iteration:
                continue
            labels = [name] if name in info.eval_labels else info.eval_labels[:1]
            for label in labels:
                return self.store.read_rollouts(iteration, base_name=f"eval_{label}")
        return []

    def _new_checkpoints(self) -> list[Event]:
        records = self.store.read_checkpoints()
        events: list[Event] = []
        for record in records[self._checkpoints_seen :]:
            batch = record.get("batch")
            step = int(batch) if isinstance(batch, int) else self.step
            path = str(record.get("state_path") or record.get("sampler_path") or "")
            kind: CheckpointKind = "state" if record.get("state_path") else "sampler"
            when = self._step_times.get(step, self._now())
            events.append(
                CheckpointSaved(
                    time=when, step=step, kind=kind, name=str(record.get("name", "")), path=path
                )
            )
            if record.get("final") or record.get("name") == "final":  # rl.train: the name
                self.finished = RunFinished(
                    time=max(when, self._now()),
                    status="completed",
                    final_step=max(step, self.step),
                    cause="max_steps",
                    reason="final checkpoint saved",
                )
        self._checkpoints_seen = len(records)
        return events

    def _new_rollouts(self) -> dict[int, list[dict[str, Any]]]:
        """The rollout summaries of iterations not read before, by iteration."""
        found: dict[int, list[dict[str, Any]]] = {}
        for info in self.store.list_iterations():
            if not info.has_train_rollouts or info.iteration in self._iterations_read:
                continue
            path = f"iteration_{info.iteration:06d}/train_rollout_summaries.jsonl"
            stat = self.store.storage.stat(path)
            if (
                stat is None
                or stat.size == 0
                or self.store.storage.read_range(path, stat.size - 1, 1) != b"\n"
            ):
                continue  # being written (not at once): read it whole at a later poll
            records = self.store.read_rollouts(info.iteration)
            self._iterations_read.add(info.iteration)
            conversations = (
                logtree_conversations(self.store.read_logtree(info.iteration))
                if info.has_train_logtree
                else []
            )
            found[info.iteration] = _with_conversations(records, conversations)
        return found

    def _groups_of(self, iteration: int, records: list[dict[str, Any]]) -> list[Event]:
        by_group: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for record in records:
            by_group[int(record.get("group_idx", 0))].append(record)
        events: list[Event] = []
        for group_idx, members in sorted(by_group.items()):
            members.sort(key=lambda r: int(r.get("traj_idx", 0)))
            version = members[0].get("sampling_client_step")
            version = int(version) if isinstance(version, int) else iteration
            trajectories = tuple(_trajectory(r, version) for r in members)
            tags = members[0].get("tags") or []
            events.append(
                GroupSampled(
                    time=self._now(),
                    group_id=iteration * GROUP_STRIDE + group_idx,
                    scenario_id="/".join(str(t) for t in tags) or f"group {group_idx}",
                    policy_version=version,
                    num_trajectories=len(trajectories),
                    num_tokens=sum(t.num_tokens for t in trajectories),
                    reward_mean=sum(t.reward for t in trajectories) / len(trajectories),
                    trajectories=trajectories,
                    scenario_index=group_idx,
                )
            )
        self._groups[iteration] = tuple(iteration * GROUP_STRIDE + g for g in by_group)
        return events


def _trajectory(record: Mapping[str, Any], version: int) -> TrajectorySummary:
    """One rollout summary: its reward, tokens, metrics, and a line per turn (the summary
    keeps lengths and logs, not the text)."""
    steps = record.get("steps") or []
    lines = list(record.get("_messages") or [])
    for turn in steps if not lines else ():
        logs = turn.get("logs") or {}
        said = "; ".join(f"{k}: {v}" for k, v in logs.items())
        text = (
            f"turn {turn.get('step_idx', 0)}: {turn.get('ob_len', 0)} tokens in, "
            f"{turn.get('ac_len', 0)} out, reward {turn.get('reward', 0.0):g}"
        )
        lines.append({"role": "transcript", "content": text + (f" ({said})" if said else "")})
    metrics = {
        k: v
        for k, v in (record.get("trajectory_metrics") or {}).items()
        if isinstance(v, int | float | bool)
    }
    reward = record.get("total_reward")
    return TrajectorySummary(
        reward=float(reward) if isinstance(reward, int | float) else 0.0,
        policy_version=version,
        num_tokens=sum(int(t.get("ac_len", 0)) for t in steps),
        messages=tuple(lines),
        metrics=metrics,
    )


def logtree_conversations(tree: Mapping[str, Any] | None) -> list[list[list[dict[str, Any]]]]:
    """The conversations of an iteration's logtree: per "Group Rollout" section (the
    groups rl.train logged, in order), per trajectory (a "Prompt" section starts one),
    the messages of its conversation nodes."""
    if not tree:
        return []
    groups: list[list[list[dict[str, Any]]]] = []

    def heading(node: Mapping[str, Any]) -> str:
        for child in node.get("children", []):
            if isinstance(child, Mapping) and str(child.get("tag", "")).startswith("h"):
                return "".join(c for c in child.get("children", []) if isinstance(c, str))
        return ""

    def collect(node: Any, trajectories: list[list[dict[str, Any]]]) -> None:
        if not isinstance(node, Mapping):
            return
        if node.get("tag") == "section" and heading(node) == "Prompt":
            trajectories.append([])
        data = node.get("data")
        if isinstance(data, Mapping) and data.get("type") == "conversation" and trajectories:
            trajectories[-1] += [
                dict(m) for m in data.get("messages", []) if isinstance(m, Mapping)
            ]
        for child in node.get("children", []):
            collect(child, trajectories)

    def find(node: Any) -> None:
        if not isinstance(node, Mapping):
            return
        if node.get("tag") == "section" and heading(node) == "Group Rollout":
            trajectories: list[list[dict[str, Any]]] = []
            collect(node, trajectories)
            groups.append(trajectories)
            return
        for child in node.get("children", []):
            find(child)

    find(tree.get("root"))
    return groups


def _with_conversations(
    records: list[dict[str, Any]], conversations: list[list[list[dict[str, Any]]]]
) -> list[dict[str, Any]]:
    """The summaries, each with its logtree conversation (`_messages`) where the logtree's
    group has one per trajectory of the summaries' group."""
    by_group: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_group[int(record.get("group_idx", 0))].append(record)
    out = list(records)
    for group_idx, trajectories in enumerate(conversations):
        members = sorted(by_group.get(group_idx, []), key=lambda r: int(r.get("traj_idx", 0)))
        if len(members) != len(trajectories):
            continue  # not the same rollouts: keep the summaries' own lines
        for member, messages in zip(members, trajectories, strict=True):
            out[out.index(member)] = {**member, "_messages": messages}
    return out
