"""Schedules, substeps and the truncation cap in whole runs (`run --no-ui`, the local
backend, in this process): the effective learning rate in the metrics JSONL follows the
schedule (warm-up, then the decay), `num_substeps = 2` makes two optimizer steps per batch,
and a cut-off rollout's reward is at most `truncated_reward_cap` while the others keep
theirs."""

import asyncio
import json
import random
import sqlite3

import pytest

from tinker_tui.app.cli import build_parser, main
from tinker_tui.app.commands.run import build_session, plan_run
from tinker_tui.engine.events import StepTrained
from tinker_tui.engine.training.lr_schedule import lr_factor

#: Half the rollouts may write 2 tokens (cut off), half 48 (most end on their own); the
#: reward is a random number the rollout also reports as `raw`, so the test knows what the
#: grader gave before the cap.
TASK_FILE = """
import random

from tinker_tui import Scenario, Task, Trajectory

RNG = random.Random(7)


def scenarios(rng):
    index = 0
    while True:
        yield Scenario(id=f"s{index}", data=index)
        index += 1


async def rollout(client, model, scenario):
    completion = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say yes."}],
        max_tokens=2 if scenario.data % 2 else 48,
    )
    raw = round(RNG.random(), 6)
    return Trajectory.from_choices(completion.choices, reward=raw, raw=raw)


TASK = Task(name="schedules", scenarios=scenarios, rollout=rollout)
"""
STEPS, WARMUP, LR, CAP = 5, 2, 0.002, 0.4


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("schedules")
    task = folder / "schedules.py"
    task.write_text(TASK_FILE)
    db = folder / "runs.db"
    random.seed(0)
    code = main(
        [
            "run",
            str(task),
            "--no-ui",
            "--db",
            str(db),
            "--seed",
            "1",
            "--steps",
            str(STEPS),
            "--group-size",
            "4",
            "--groups-per-step",
            "2",
            "--rollout-workers",
            "2",
            "--max-steps-off-policy",
            "0",
            "--eval-every",
            "0",
            "--learning-rate",
            str(LR),
            "--lr-schedule",
            "linear",
            "--lr-warmup-steps",
            str(WARMUP),
            "--num-substeps",
            "2",
            "--truncation-policy",
            "cap",
            "--truncated-reward-cap",
            str(CAP),
        ]
    )
    assert code == 0
    (metrics_file,) = folder.glob("*.metrics.jsonl")
    lines = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    steps = [line for line in lines if line["event"] == "step"]
    with sqlite3.connect(db) as connection:
        rows = connection.execute("select reward, metrics, truncated from trajectories").fetchall()
    return steps, rows


def test_the_effective_learning_rate_follows_warm_up_then_linear_decay(scheduled):
    steps, _ = scheduled
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    expected = [0.5, 1.0, 1.0, 2 / 3, 1 / 3]  # warm-up over 2 steps, then 3 steps down to 0
    assert [lr_factor("linear", s, STEPS, WARMUP) for s in range(STEPS)] == pytest.approx(expected)
    assert [s["optim/lr_factor"] for s in steps] == pytest.approx(expected)
    assert [s["optim/lr"] for s in steps] == pytest.approx([LR * f for f in expected])


def test_two_substeps_make_two_optimizer_steps_per_batch(scheduled):
    steps, _ = scheduled
    trained = [s for s in steps if not s.get("train/skipped")]
    assert trained, "no step trained"
    for step in trained:
        assert step["train/num_datums"] >= 2
        assert step["optim/steps"] == 2


def test_a_cut_off_rollout_gets_at_most_the_cap_and_the_others_keep_their_reward(scheduled):
    steps, rows = scheduled
    cut = [(reward, json.loads(m)["raw"]) for reward, m, t in rows if t]
    whole = [(reward, json.loads(m)["raw"]) for reward, m, t in rows if not t]
    assert cut, "no rollout was cut off"
    assert all(reward == pytest.approx(min(raw, CAP)) for reward, raw in cut)
    assert any(raw > CAP for _, raw in cut)  # the cap lowered some
    assert all(reward == pytest.approx(raw) for reward, raw in whole)
    lowered = sum(1 for _, raw in cut if raw > CAP)
    # every trained step counts those it lowered (stored rows include groups not trained)
    assert 0 < sum(s["env/truncated_capped"] for s in steps) <= lowered


async def test_a_resumed_run_continues_the_schedule_at_its_step(tmp_path):
    """Stopped after step 2 and resumed: the resumed steps train at the schedule's factor
    of their own step (the schedule is a function of the step, nothing restarts it)."""
    db = tmp_path / "runs.db"
    common = ["--no-ui", "--db", str(db), "--eval-every", "0"]
    flags = ["--steps", "6", "--warmup-steps", "0", "--lr-schedule", "cosine"]
    flags += ["--lr-warmup-steps", "1", "--learning-rate", str(LR), "--checkpoint-every", "1"]

    async def train(args, stop_at=None):
        session = build_session(await asyncio.to_thread(plan_run, args))
        steps = []

        def watch(event):
            if isinstance(event, StepTrained):
                steps.append(event)
                if event.step == stop_at:
                    session.control.stop("test")

        session.events.subscribe(watch)
        status = await asyncio.wait_for(session.run(), 300)
        return status, steps, session.run_id

    parser = build_parser()
    status, first, run_id = await train(
        parser.parse_args(["run", "example", *common, *flags]), stop_at=2
    )
    assert status == "stopped"
    status, resumed, _ = await train(
        parser.parse_args(["run", "example", *common, "--resume", run_id])
    )
    assert status == "completed"
    steps = first + resumed
    assert resumed[0].step == first[-1].step + 1 and steps[-1].step == 6
    for event in steps:
        factor = lr_factor("cosine", event.step - 1, 6, 1)
        assert event.metrics["optim/lr_factor"] == pytest.approx(factor)
        assert event.metrics["optim/lr"] == pytest.approx(LR * factor)
