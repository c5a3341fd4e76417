"""A task's scenarios that fail or run out: the run ends by itself and says why.

An error inside `scenarios()` (a wrong keyword to `Scenario`, a generator raising at its
50th item) fails the run with one line naming the task file's line, after checkpointing what
it trained, so `--resume` continues it once fixed; a finite list that runs out ends the run,
completed, after training what it drew. Both hung forever before, headless and under the
dashboard."""

import asyncio
import os
import random
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.simulated import SimulatedClient, SimulatedPolicy
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import CheckpointSaved, EventBus, StepTrained
from tinker_tui.engine.rollouts.task import Scenario, Task
from tinker_tui.engine.rollouts.trajectory import Trajectory
from tinker_tui.engine.training.pipeline import Pipeline
from tinker_tui.engine.training.resume import ScenarioError


async def _rollout(client, model, scenario):
    choice = await client.chat.completions.create(model=model, messages=[])
    return Trajectory.from_choices([choice], reward=random.random())


def make_pipeline(scenarios, **overrides):
    session = SimulatedPolicy()
    config = RunConfig(
        max_steps=10, group_size=4, groups_per_step=2, rollout_workers=4, checkpoint_every=0
    ).with_overrides(overrides)
    bus = EventBus()
    events = []
    bus.subscribe(events.append)
    pipeline = Pipeline(
        config=config,
        task=Task(name="t", scenarios=scenarios, rollout=_rollout),
        session=session,
        client_factory=lambda: SimulatedClient(session),
        model_name="m",
        bus=bus,
        clock=FakeClock(),
        rng=random.Random(0),
    )
    return pipeline, session, events


def six(rng):
    return [Scenario(id=f"s{i}", data=i) for i in range(6)]


def raising_at_50(rng):
    i = 0
    while True:
        if i == 50:
            raise ValueError("scenario 50 is broken")
        yield Scenario(id=f"s{i}", data=i)
        i += 1


def wrong_keyword(rng):
    while True:
        yield Scenario(id="s", datum=1)  # the mistake: `data`


async def test_scenarios_that_run_out_end_the_run_completed_after_training_them():
    pipeline, session, events = make_pipeline(six)
    assert await asyncio.wait_for(pipeline.run(), 10) == "completed"
    steps = [e for e in events if isinstance(e, StepTrained)]
    trained = sum(len(e.group_ids) for e in steps)
    assert trained == 6  # every scenario drawn was trained, the last batch a short one
    assert pipeline.end_reason == f"scenarios ran out after 6: {len(steps)} of 10 steps trained"
    assert session.saved[-1] == f"step-{len(steps):06d}"  # and checkpointed


@pytest.mark.parametrize("scenarios", [raising_at_50, wrong_keyword])
async def test_an_error_in_the_scenarios_fails_the_run_naming_the_line(scenarios):
    pipeline, session, events = make_pipeline(scenarios, max_steps=1000)
    with pytest.raises(ScenarioError) as caught:
        await asyncio.wait_for(pipeline.run(), 10)
    message = str(caught.value)
    assert "\n" not in message
    code = "raise ValueError" if scenarios is raising_at_50 else 'yield Scenario(id="s"'
    assert f"at {__file__}:" in message and code in message, message
    assert message.endswith("fix them, then continue the run with --resume")
    if scenarios is raising_at_50:
        assert "failed at scenario 50" in message and "ValueError: scenario 50 is broken" in message
        # what it trained is checkpointed: a resume continues from there
        saved = [e for e in events if isinstance(e, CheckpointSaved)]
        assert saved and saved[-1].step == pipeline.step > 0
    else:
        assert "unexpected keyword argument 'datum'" in message


async def test_a_scenario_of_the_wrong_type_is_named():
    def dicts(rng):
        yield {"id": "s", "data": 1}

    pipeline, _, _ = make_pipeline(dicts)
    with pytest.raises(ScenarioError, match=r"it gave a dict, expected a Scenario"):
        await asyncio.wait_for(pipeline.run(), 10)


BROKEN_TASK = """
from tinker_tui import Scenario, Task
from tinker_tui.examples.yes_no_maybe import rollout

BROKEN = True

def scenarios(rng):
    i = 0
    while True:
        if BROKEN and i == 20:
            raise ValueError("scenario 20 is broken")
        yield Scenario(id=f"s{i}", data="Is the sky blue?")
        i += 1

TASK = Task(name="broken", scenarios=scenarios, rollout=rollout,
            settings={"max_steps": 12, "warmup_steps": 0, "group_size": 4})
"""

FINITE_TASK = """
from tinker_tui import Scenario, Task
from tinker_tui.examples.yes_no_maybe import rollout

def scenarios(rng):
    return [Scenario(id=f"s{i}", data="Is the sky blue?") for i in range(6)]

TASK = Task(name="finite", scenarios=scenarios, rollout=rollout,
            settings={"max_steps": 10, "warmup_steps": 0, "group_size": 4})
"""


ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path, *args):
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))  # this checkout's code
    env.pop("TINKER_API_KEY", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            *args,
            "--no-ui",
            "--db",
            str(tmp_path / "runs.db"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )


def test_headless_a_broken_generator_fails_with_its_line_and_resumes_once_fixed(tmp_path):
    task = tmp_path / "broken.py"
    task.write_text(textwrap.dedent(BROKEN_TASK))
    done = _run(tmp_path, "broken.py")
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("tinker-tui:")]
    assert line.startswith(
        "tinker-tui: run failed: ScenarioError: the scenarios of task "
        "'broken' failed at scenario 20 at "
    )
    assert f"{task}:11 (raise ValueError" in line
    db = sqlite3.connect(tmp_path / "runs.db")
    run_id, status, step = db.execute("select run_id, status, final_step from runs").fetchone()
    assert status == "failed"
    assert db.execute("select max(step) from checkpoints").fetchone()[0] == step
    task.write_text(textwrap.dedent(BROKEN_TASK).replace("BROKEN = True", "BROKEN = False"))
    again = _run(tmp_path, "broken.py", "--resume", run_id)
    assert again.returncode == 0, again.stdout + again.stderr
    assert db.execute("select status, final_step from runs").fetchone() == ("completed", 12)


def test_headless_scenarios_that_run_out_end_the_run_with_exit_0(tmp_path):
    (tmp_path / "finite.py").write_text(textwrap.dedent(FINITE_TASK))
    done = _run(tmp_path, "finite.py")
    assert done.returncode == 0, done.stdout + done.stderr
    db = sqlite3.connect(tmp_path / "runs.db")
    status, reason, step = db.execute("select status, reason, final_step from runs").fetchone()
    assert status == "completed"
    assert reason == f"scenarios ran out after 6: {step} of 10 steps trained"
    assert f"completed at step {step}/10 ({reason})" in done.stdout
    # A resume with more steps would find the scenarios still run out: not offered.
    assert "train further:" not in done.stdout and "--steps" not in done.stdout, done.stdout


async def test_the_dashboard_ends_with_the_run_when_its_scenarios_fail_or_run_out(tmp_path):
    """The dashboard's engine (its own process), followed through the store, as `run` with
    the dashboard does: it sat at "first rollouts: 0/32" forever."""
    from tinker_tui.app.engine_process import EngineProcess
    from tinker_tui.app.store_session import StoreSession

    (tmp_path / "finite.py").write_text(textwrap.dedent(FINITE_TASK))
    (tmp_path / "broken.py").write_text(textwrap.dedent(BROKEN_TASK))
    db = tmp_path / "runs.db"
    for name, status in (("finite", "completed"), ("broken", "failed")):
        engine = EngineProcess(
            ["run", str(tmp_path / f"{name}.py"), "--db", str(db)], run_id=f"r-{name}", db_path=db
        )
        session = StoreSession(
            db, run_id=f"r-{name}", follow=True, poll_interval=0.05, engine=engine
        )
        try:
            assert await asyncio.wait_for(session.run(), 180) == status
        finally:
            if engine.process is not None and engine.process.poll() is None:
                engine.process.kill()
        assert session.finished is not None
        if name == "finite":
            assert session.finished.reason.startswith("scenarios ran out after 6: ")
        else:
            assert "the scenarios of task 'broken' failed at scenario 20" in session.finished.reason
