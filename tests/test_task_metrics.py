"""What a task reports besides its reward: a trajectory's metrics, checked, aggregated per
step (`task/<name>`), per evaluation (`eval/task/<name>`), and followed through a real run on
the local backend into the store, the JSONL file, `export` and the `--no-ui` lines."""

import csv
import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from tinker_tui.engine.rollouts.task_metrics import (
    eval_task_metrics,
    step_task_metrics,
    trajectory_metrics,
)
from tinker_tui.engine.rollouts.trajectory import (
    SampledTurn,
    Trajectory,
    TrajectoryError,
    TrajectoryGroup,
)

TURN = SampledTurn(prompt_tokens=(1,), tokens=(2,), logprobs=(-0.1,), policy_version=0)


def traj(reward=0.0, **metrics):
    return Trajectory(turns=(TURN,), reward=reward, metrics=metrics)


def group(*trajectories, part=""):
    return TrajectoryGroup(
        group_id=0,
        scenario_id="s",
        trajectories=trajectories,
        started_at=0.0,
        finished_at=0.0,
        part=part,
    )


@pytest.mark.parametrize(
    "metrics, message",
    [
        ({"has space": 1.0}, "metric name 'has space'"),
        ({"a/b": 1.0}, "metric name 'a/b'"),
        ({"calls": "two"}, "must be a number or a bool"),
        ({"calls": float("nan")}, "finite number"),
        ({"calls": None}, "must be a number or a bool"),
    ],
)
def test_metrics_are_checked(metrics, message):
    with pytest.raises(TrajectoryError, match=message):
        Trajectory(turns=(TURN,), reward=0.0, metrics=metrics)


def test_numbers_become_floats_and_booleans_stay_booleans():
    t = traj(correct=True, calls=2)
    assert t.metrics == {"correct": True, "calls": 2.0}
    assert isinstance(t.metrics["correct"], bool) and isinstance(t.metrics["calls"], float)


def test_step_metrics_by_hand():
    batch = [
        group(traj(correct=True, calls=1), traj(correct=False, calls=4)),
        group(traj(correct=True, calls=1), traj(correct=True)),
    ]
    assert step_task_metrics(batch) == {
        "task/correct": 0.75,  # a rate: no min or max
        "task/calls": 2.0,
        "task/calls/min": 1.0,
        "task/calls/max": 4.0,  # over those with it
    }


def test_a_mixed_task_reports_each_part_under_its_name():
    batch = [
        group(traj(1.0, correct=True), traj(0.0, correct=False), part="maths"),
        group(traj(0.5), traj(0.25), part="words"),
    ]
    metrics = step_task_metrics(batch)
    assert metrics["reward/maths/mean"] == 0.5 and metrics["reward/words/mean"] == 0.375
    assert metrics["task/maths/correct"] == 0.5 and metrics["task/correct"] == 0.5
    assert not any(k.startswith("task/words/") for k in metrics)


def test_eval_metrics_count_only_finished_rollouts_and_split_parts():
    results = [
        ("a", traj(1.0, correct=True)),
        ("a", RuntimeError("x")),
        ("b", traj(0.0, correct=False)),
        ("b", traj(1.0, correct=True)),
    ]
    assert eval_task_metrics(results) == {
        "eval/task/correct": pytest.approx(2 / 3),
        "eval/a/reward_mean": 1.0,
        "eval/a/task/correct": 1.0,
        "eval/b/reward_mean": 0.5,
        "eval/b/task/correct": 0.5,
    }
    assert trajectory_metrics([]) == {}


TASK_FILE = """
from tinker_tui import Scenario, Task, Trajectory

def scenarios(rng):
    i = 0
    while True:
        yield Scenario(id=f"q{i}", data=rng.choice(["yes", "no", "maybe"]))
        i += 1

async def rollout(client, model, scenario):
    messages = [{"role": "user", "content": "Answer yes, no or maybe: is it " + scenario.data + "?"}]
    completion = await client.chat.completions.create(model=model, messages=messages,
                                                      max_tokens=4)
    answer = (completion.choices[0].message.content or "").strip().lower()
    return Trajectory.from_choices(completion.choices, reward=float(answer == "maybe"),
                                   correct=answer == "maybe", words=len(answer.split()))

TASK = Task(name="metrics_demo", scenarios=scenarios, rollout=rollout,
            eval_scenarios=lambda: [Scenario(id=f"e{i}", data="x") for i in range(3)],
            settings={"group_size": 4, "groups_per_step": 2})
"""


def run_cli(*args, cwd):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TINKER_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "tinker_tui.app.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_a_runs_metrics_reach_the_store_the_jsonl_export_and_the_headless_lines(tmp_path):
    (tmp_path / "demo.py").write_text(textwrap.dedent(TASK_FILE))
    db = tmp_path / "runs.db"
    done = run_cli("run", "demo.py", "--no-ui", "--steps", "3", "--db", str(db), cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    # the final step is evaluated, and --no-ui prints it: step, mean, count
    [eval_line] = [line for line in done.stdout.splitlines() if line.startswith("eval ")]
    assert eval_line.split()[1] == "3/3" and "scenarios 3" in eval_line

    conn = sqlite3.connect(db)
    stored = [json.loads(m) for (m,) in conn.execute("select metrics from trajectories")]
    assert stored and all(set(m) == {"correct", "words"} for m in stored)
    assert all(isinstance(m["correct"], bool) for m in stored)
    steps = [json.loads(m) for (m,) in conn.execute("select metrics from steps order by step")]
    assert len(steps) == 3
    for metrics in steps:
        assert 0.0 <= metrics["task/correct"] <= 1.0 and "task/correct/min" not in metrics
        assert metrics["task/words/min"] <= metrics["task/words"] <= metrics["task/words/max"]
    [eval_metrics] = [json.loads(m) for (m,) in conn.execute("select metrics from evals")]
    assert "eval/task/correct" in eval_metrics

    [run_id] = [r for (r,) in conn.execute("select run_id from runs")]
    lines = [
        json.loads(line) for line in (tmp_path / f"{run_id}.metrics.jsonl").read_text().splitlines()
    ]
    assert [line["event"] for line in lines] == ["step", "step", "step", "eval"]
    assert all("task/correct" in line for line in lines[:3])

    done = run_cli(
        "export", run_id, "--db", str(db), "--format", "jsonl", "-o", "out.jsonl", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    samples = [
        r
        for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())
        if r["record"] == "sample"
    ]
    assert samples and all(set(s["metrics"]) == {"correct", "words"} for s in samples)
    done = run_cli(
        "export",
        run_id,
        "--db",
        str(db),
        "--format",
        "csv",
        "--what",
        "samples",
        "-o",
        "samples.csv",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "samples.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and {"metrics.correct", "metrics.words"} <= set(rows[0])
    assert {row["metrics.correct"] for row in rows} <= {"True", "False"}
