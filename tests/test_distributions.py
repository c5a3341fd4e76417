"""A step's distributions (`engine.rollouts.distributions`) on known inputs, the reward
components a task declares, and a real local run whose store and JSONL carry them."""

import json
import math
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from tinker_tui.app.exit_codes import EXIT_NO_SIGNAL, EXIT_OK
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.rollouts.distributions import (
    dominant_component,
    histogram,
    percentile,
    step_distributions,
    truncated,
)
from tinker_tui.engine.rollouts.task import Scenario, Task, TaskError, check_task
from tinker_tui.engine.rollouts.trajectory import SampledTurn, Trajectory, TrajectoryGroup


def traj(reward, tokens=1, finish="stop", **metrics):
    turn = SampledTurn(
        prompt_tokens=(1,),
        tokens=tuple(range(tokens)),
        logprobs=(-0.1,) * tokens,
        policy_version=0,
        finish_reason=finish,
    )
    return Trajectory(turns=(turn,), reward=reward, metrics=metrics)


def group(*trajectories, group_id=0):
    return TrajectoryGroup(
        group_id=group_id,
        scenario_id="s",
        trajectories=trajectories,
        started_at=0.0,
        finished_at=0.0,
    )


def test_percentile_is_nearest_rank():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == 5.0
    assert percentile(values, 0) == 1.0
    assert math.isnan(percentile([], 50))


def test_histogram_bins_from_min_to_max_and_keeps_the_max():
    h = histogram([0.0, 0.0, 0.5, 1.0], bins=4)
    assert h == {"lo": 0.0, "hi": 1.0, "counts": [2, 0, 1, 1]}
    same = histogram([0.3, 0.3, 0.3], bins=3)
    assert same["counts"] == [0, 0, 3] and same["lo"] == same["hi"] == 0.3
    assert histogram([], bins=2) == {"lo": 0.0, "hi": 0.0, "counts": [0, 0]}
    assert sum(histogram([float("nan"), 1.0, 2.0])["counts"]) == 2


def test_a_steps_distributions_by_hand():
    flat = group(traj(1.0, tokens=2), traj(1.0, tokens=4), group_id=0)
    mixed = group(
        traj(0.0, tokens=10, finish="length", fmt=1.0, correct=0.0),
        traj(1.0, tokens=6, fmt=1.0, correct=1.0),
        group_id=1,
    )
    metrics, hists = step_distributions([flat, mixed], ("fmt", "correct", "absent"))
    assert metrics[keys.ZERO_VARIANCE_FRAC] == 0.5
    assert metrics[keys.TRUNCATED_FRAC] == 0.25
    assert metrics[keys.RESPONSE_LEN_MEAN] == 5.5
    assert metrics[keys.RESPONSE_LEN_P50] == 4.0
    assert metrics[keys.RESPONSE_LEN_P90] == 10.0
    assert metrics[keys.RESPONSE_LEN_MAX] == 10.0
    assert metrics["reward/component/fmt"] == 1.0
    assert metrics["reward/component/fmt/std"] == 0.0
    assert metrics["reward/component/correct"] == 0.5
    assert metrics["reward/component/correct/std"] == 0.5
    assert not any("absent" in k for k in metrics)  # no rollout reported it
    assert hists["reward"]["counts"] == [1, 0, 0, 0, 0, 0, 0, 0, 0, 3]
    # advantages: reward minus the group's mean: 0, 0, -0.5, +0.5
    assert hists["advantage"]["lo"] == -0.5 and hists["advantage"]["hi"] == 0.5
    assert hists["advantage"]["counts"][0] == 1 and hists["advantage"]["counts"][-1] == 1
    assert sum(hists["advantage"]["counts"]) == 4
    assert dominant_component(metrics) == "correct"  # fmt never varies


def test_a_component_dominates_only_with_most_of_the_spread():
    assert (
        dominant_component(
            {
                "reward/component/a": 0.5,
                "reward/component/a/std": 0.3,
                "reward/component/b": 0.5,
                "reward/component/b/std": 0.3,
            }
        )
        is None
    )
    assert (
        dominant_component(
            {
                "reward/component/a": 0.5,
                "reward/component/a/std": 0.9,
                "reward/component/b": 0.5,
                "reward/component/b/std": 0.1,
            }
        )
        == "a"
    )
    assert dominant_component({"reward/component/a/std": 1.0, "reward/component/a": 1}) is None


def test_truncated_is_any_turn_cut_by_the_length_limit():
    assert truncated(traj(0.0, finish="length"))
    assert not truncated(traj(0.0, finish="stop"))
    assert not truncated(traj(0.0, finish=""))
    choice = {
        "prompt_token_ids": [1],
        "token_ids": [2],
        "token_logprobs": [-0.5],
        "policy_version": 3,
        "finish_reason": "length",
    }
    assert SampledTurn.from_choice(choice).finish_reason == "length"


def test_reward_components_are_checked():
    def scenarios(rng):
        yield Scenario(id="a", data=None)

    async def rollout(client, model, scenario):
        raise AssertionError

    ok = Task(name="t", scenarios=scenarios, rollout=rollout, reward_components=("fmt", "ok"))
    assert check_task(ok) is ok
    with pytest.raises(TaskError, match="tuple of metric names"):
        check_task(Task(name="t", scenarios=scenarios, rollout=rollout, reward_components="fmt"))  # type: ignore[arg-type]
    with pytest.raises(TaskError, match="'a b' is not a metric name"):
        check_task(Task(name="t", scenarios=scenarios, rollout=rollout, reward_components=("a b",)))


TASK_FILE = """
from tinker_tui import Scenario, Task, Trajectory

def scenarios(rng):
    i = 0
    while True:
        yield Scenario(id=f"q{i % 3}", data=rng.choice(["yes", "no", "maybe"]))
        i += 1

async def rollout(client, model, scenario):
    messages = [{"role": "user", "content": "Answer yes, no or maybe: is it " + scenario.data + "?"}]
    completion = await client.chat.completions.create(model=model, messages=messages,
                                                      max_tokens=3)
    answer = (completion.choices[0].message.content or "").strip().lower()
    short = float(len(answer) < 8)
    right = float(answer == "maybe")
    return Trajectory.from_choices(completion.choices, reward=0.2 * short + right,
                                   short=short, right=right)

TASK = Task(name="shapes_demo", scenarios=scenarios, rollout=rollout,
            reward_components=("short", "right"),
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


def test_a_local_runs_jsonl_and_store_carry_the_distributions(tmp_path):
    (tmp_path / "shapes.py").write_text(textwrap.dedent(TASK_FILE))
    db = tmp_path / "runs.db"
    done = run_cli("run", "shapes.py", "--no-ui", "--steps", "3", "--db", str(db), cwd=tmp_path)
    # completed; whether its 3 steps found a group with differing rewards depends on what
    # the tiny model sampled (exit 4: trained nothing), which is not what this test is about
    assert done.returncode in (EXIT_OK, EXIT_NO_SIGNAL), done.stderr + done.stdout
    conn = sqlite3.connect(db)
    [run_id] = [r for (r,) in conn.execute("select run_id from runs")]
    lines = [
        json.loads(line) for line in (tmp_path / f"{run_id}.metrics.jsonl").read_text().splitlines()
    ]
    steps = [line for line in lines if line["event"] == "step"]
    assert len(steps) == 3
    wanted = {
        keys.ZERO_VARIANCE_FRAC,
        keys.TRUNCATED_FRAC,
        keys.RESPONSE_LEN_MEAN,
        keys.RESPONSE_LEN_P50,
        keys.RESPONSE_LEN_P90,
        keys.RESPONSE_LEN_MAX,
        "reward/component/short",
        "reward/component/right",
        "reward/component/right/std",
    }
    for line in steps:
        assert wanted <= set(line), wanted - set(line)
        assert 0.0 <= line[keys.ZERO_VARIANCE_FRAC] <= 1.0
        assert 0.0 <= line[keys.TRUNCATED_FRAC] <= 1.0
        assert 1 <= line[keys.RESPONSE_LEN_P50] <= line[keys.RESPONSE_LEN_MAX] <= 3
    # the store: each rollout's advantage and truncation, each step's histograms
    rows = conn.execute(
        "select reward, advantage, truncated, num_tokens, group_id from trajectories"
    ).fetchall()
    assert rows and all(a is not None for _, a, _, _, _ in rows)
    by_group: dict[int, list[tuple[float, float]]] = {}
    for reward, advantage, _, _, group_id in rows:
        by_group.setdefault(group_id, []).append((reward, advantage))
    for members in by_group.values():  # the default rule: reward minus the group's mean
        mean = sum(r for r, _ in members) / len(members)
        assert all(abs(a - (r - mean)) < 1e-9 for r, a in members)
    # sampled with max_tokens=3: only a rollout of 3 tokens can have been cut off, and the
    # steps' shares count the stored flags
    assert all(not t for _, _, t, n, _ in rows if n < 3)
    flagged = sum(
        t
        for (t,) in conn.execute(
            "select t.truncated from trajectories t join group_lifecycle g using (run_id, group_id) "
            "where g.status = 'trained' or g.reason = 'zero_variance'"
        )
    )
    assert flagged == round(sum(line[keys.TRUNCATED_FRAC] for line in steps) * 8)
    hists = [json.loads(h) for (h,) in conn.execute("select histograms from steps")]
    assert len(hists) == 3
    for h in hists:
        assert set(h) == {"reward", "advantage"}
        assert sum(h["reward"]["counts"]) >= 4
