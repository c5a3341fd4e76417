"""An ART model folder, written as ART's `Model.log` writes one (a row of `history.jsonl`
per split and step, a parquet file of the step's trajectory groups, a checkpoint folder
per kept step), for the tests that follow a folder while it grows. The folder ART itself
wrote is `tests/data/art_model/` (see its README)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

START = datetime(2026, 12, 1, 12, 0, 0)
MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("tool_calls", pa.string()),
        ("tool_call_id", pa.string()),
        ("trainable", pa.bool_()),
    ]
)
SCHEMA = pa.schema(
    [
        ("group_index", pa.int64()),
        ("group_metadata", pa.string()),
        ("group_metrics", pa.string()),
        ("group_logs", pa.list_(pa.string())),
        ("reward", pa.float64()),
        ("metrics", pa.string()),
        ("metadata", pa.string()),
        ("tools", pa.string()),
        ("logs", pa.list_(pa.string())),
        ("messages", pa.list_(MESSAGE)),
    ]
)


def reward_of(step: int, group: int, member: int) -> float:
    return round(0.2 + 0.1 * step + 0.05 * member - 0.05 * group, 4)


def new_model(folder: Path, name: str = "agent-001", project: str = "mail") -> Path:
    folder.mkdir(parents=True)
    model = {"name": name, "project": project, "base_model": "Qwen/Qwen3-4B-Instruct-2507"}
    (folder / "model.json").write_text(json.dumps({**model, "config": {"lr": 1e-5}}))
    return folder


def log_train_step(folder: Path, step: int, groups: int = 2, members: int = 3) -> None:
    """The rollouts of ART step `step` and their history row, as `Model.log(split="train")`
    writes them, then the checkpoint the step's training leaves (every other step)."""
    rows = []
    for group in range(groups):
        for member in range(members):
            rows.append(
                {
                    "group_index": group,
                    "group_metadata": json.dumps({"scenario_id": f"inbox-{group}"}),
                    "group_metrics": None,
                    "group_logs": None,
                    "reward": reward_of(step, group, member),
                    "metrics": json.dumps({"found": member % 2 == 0}),
                    "metadata": None,
                    "tools": None,
                    "logs": None,
                    "messages": [
                        _message("user", f"find mail {group}", trainable=False),
                        _message("assistant", f"answer {member}", trainable=True),
                    ],
                }
            )
    out = folder / "trajectories" / "train"
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), out / f"{step:04d}.parquet")
    rewards = [r["reward"] for r in rows]
    _history(
        folder,
        step,
        {
            "train/reward": sum(rewards) / len(rewards),
            "train/exception_rate": 0.0,
            "train/reward_std_dev": 0.05,
            "time/step_wall_s": 3.0,
            "data/step_num_groups_submitted": float(groups),
        },
    )
    if (step + 1) % 2 == 0:
        (folder / "checkpoints" / f"{step + 1:04d}").mkdir(parents=True)


def log_val(folder: Path, step: int, reward: float) -> None:
    _history(folder, step, {"val/reward": reward, "val/exception_rate": 0.0})


def _message(role: str, content: str, *, trainable: bool) -> dict:
    return {
        "role": role,
        "content": content,
        "tool_calls": None,
        "tool_call_id": None,
        "trainable": trainable,
    }


def _history(folder: Path, step: int, metrics: dict) -> None:
    when = START + timedelta(seconds=3.0 * (step + 1))
    row = {
        **metrics,
        "training_step": step,
        "time/wall_clock_sec": 3.0 * (step + 1),
        "step": step,
        "recorded_at": when.isoformat(),
    }
    with (folder / "history.jsonl").open("a") as file:
        file.write(json.dumps(row) + "\n")
