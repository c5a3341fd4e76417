"""How a run ended, typed (`RunFinished.cause`), and the exit code and words chosen from
it: a run that trained nothing is no success, a budget stop is not a completed run, and
every exit code is in one table, the docs' and the code's the same."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tinker_tui.app.exit_codes import (
    EXIT_BUDGET,
    EXIT_CODE_TABLE,
    EXIT_HEALTH_STOP,
    EXIT_NO_SIGNAL,
    EXIT_OK,
    run_exit_code,
)
from tinker_tui.app.headless import HeadlessReporter
from tinker_tui.app.run_summary import SummaryCollector, next_commands, summary_lines
from tinker_tui.app.screens.finished import finished_content, title
from tinker_tui.engine.events import RunFinished, RunStarted, StepTrained
from tinker_tui.engine.metrics import metric_keys as keys

ROOT = Path(__file__).resolve().parents[1]


def test_the_exit_code_table_in_the_docs_is_the_codes():
    """docs/troubleshooting.md `## Exit codes` has one row per code of `app.exit_codes`,
    each naming what the code means there."""
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\d+)` \| (.+) \|$", section, re.M))
    assert sorted(int(code) for code in rows) == sorted(code for code, _ in EXIT_CODE_TABLE)
    for code, words in EXIT_CODE_TABLE:
        assert words.lower() in rows[str(code)].lower(), (code, words, rows[str(code)])


def _summary(*events) -> SummaryCollector:
    summary = SummaryCollector(task="t.py")
    summary.handle(
        RunStarted(
            time=0.0,
            run_id="r1",
            name="t",
            backend="local",
            base_model="tiny",
            max_steps=2,
            start_step=0,
            config={"max_cost_usd": 1.0},
        )
    )
    for event in events:
        summary.handle(event)
    return summary


def _skipped(step: int) -> StepTrained:
    return StepTrained(
        time=float(step),
        step=step,
        policy_version=0,
        metrics={keys.REWARD_MEAN: 0.0, keys.TRAIN_SKIPPED: 1.0},
    )


def test_a_run_that_trained_nothing_says_so_and_exits_4():
    ended = RunFinished(
        time=3.0, status="completed", final_step=2, reason="reached max_steps", cause="no_signal"
    )
    result = _summary(_skipped(1), _skipped(2), ended).summary()
    lines = summary_lines(result)
    assert lines[0].endswith("(reached max_steps) but trained nothing"), lines[0]
    assert any(
        line.startswith("  trained nothing: in every group all rewards were equal")
        for line in lines
    ), lines
    assert "train further" not in dict(next_commands(result))  # more steps teach no more
    assert run_exit_code(result.status, result.cause) == EXIT_NO_SIGNAL
    assert title(result) == "Run trained nothing"
    assert "trained nothing" in finished_content(result).plain


def test_words_and_codes_come_from_the_cause_not_the_reason():
    """A reason that reads like a budget stop is not one; a budget stop is whatever its
    reason says."""
    by_hand = _summary(
        RunFinished(
            time=1.0,
            status="stopped",
            final_step=1,
            reason="budget: from the dashboard",
            cause="user",
        )
    ).summary()
    assert run_exit_code(by_hand.status, by_hand.cause) == EXIT_OK
    assert "--max-cost-usd" not in dict(next_commands(by_hand))["continue"]
    budget = _summary(
        RunFinished(
            time=1.0, status="stopped", final_step=1, reason="over 1.00 USD", cause="budget"
        )
    ).summary()
    assert run_exit_code(budget.status, budget.cause) == EXIT_BUDGET
    assert dict(next_commands(budget))["continue"].endswith("--max-cost-usd 2")
    assert run_exit_code("stopped", "health") == EXIT_HEALTH_STOP
    assert run_exit_code("completed", "max_steps") == EXIT_OK
    assert run_exit_code("failed", "failed") == 1
    some = _summary(
        _skipped(1),
        StepTrained(time=2.0, step=2, policy_version=1, metrics={keys.REWARD_MEAN: 0.5}),
        RunFinished(time=3.0, status="completed", final_step=2, cause="max_steps"),
    ).summary()
    assert "  1 of 2 steps trained nothing (every group's rewards equal)" in summary_lines(some)


def test_a_step_that_trained_nothing_says_so_in_its_line():
    import io

    out = io.StringIO()
    reporter = HeadlessReporter(out)
    reporter.handle(
        RunStarted(
            time=0.0,
            run_id="r1",
            name="t",
            backend="local",
            base_model="tiny",
            max_steps=2,
            start_step=0,
        )
    )
    reporter.handle(_skipped(1))
    reporter.handle(
        StepTrained(time=2.0, step=2, policy_version=1, metrics={keys.REWARD_MEAN: 0.5})
    )
    step_lines = [line for line in out.getvalue().splitlines() if line.startswith("step ")]
    assert "  trained nothing (every group's rewards equal)" in step_lines[0]
    assert "trained nothing" not in step_lines[1]


ALL_ZERO_TASK = """
from tinker_tui import Scenario, Task, Trajectory

def scenarios(rng):
    i = 0
    while True:
        yield Scenario(id=f"s{i}", data=i)
        i += 1

async def rollout(client, model, scenario):
    completion = await client.chat.completions.create(
        model=model, max_tokens=2, messages=[{"role": "user", "content": "?"}])
    return Trajectory.from_choices([completion.choices[0]], reward=0.0)

TASK = Task(name="zeros", scenarios=scenarios, rollout=rollout,
            settings={"group_size": 2, "groups_per_step": 2, "warmup_steps": 0,
                      "eval_every": 0, "health_window": 64})
"""


def test_run_no_ui_of_an_all_zero_task_exits_4_and_says_it_trained_nothing(tmp_path):
    (tmp_path / "zeros.py").write_text(textwrap.dedent(ALL_ZERO_TASK))
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    env.pop("TINKER_API_KEY", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "zeros.py",
            "--no-ui",
            "--steps",
            "2",
            "--db",
            str(tmp_path / "runs.db"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == EXIT_NO_SIGNAL, done.stdout + done.stderr[-3000:]
    step_lines = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert step_lines and all("trained nothing" in line for line in step_lines), step_lines
    assert re.search(
        r"^run \S+ completed at step 2/2 \(reached max_steps\) but trained "
        r"nothing$",
        done.stdout,
        re.M,
    ), done.stdout
    assert "  trained nothing: in every group all rewards were equal" in done.stdout
    import sqlite3

    with sqlite3.connect(tmp_path / "runs.db") as db:
        assert db.execute("SELECT status, cause FROM runs").fetchall() == [
            ("completed", "no_signal")
        ]


def test_the_throughput_pane_and_finish_screen_name_a_stuck_rollout():
    from tinker_tui.app.dashboard_state import DashboardState
    from tinker_tui.app.widgets.throughput import verdict_text
    from tinker_tui.engine.clock import FakeClock
    from tinker_tui.engine.events import StalledRollout, ThroughputMeasured

    stuck = StalledRollout(
        group_id=3,
        scenario_id="s1",
        age=42.4,
        waiting_at="it is waiting at /t/task.py:20 (await slow())",
        file="/t/task.py",
        line=20,
        code="await slow()",
    )
    model = DashboardState(FakeClock())
    model.apply(
        RunStarted(
            time=0.0,
            run_id="r1",
            name="t",
            backend="local",
            base_model="tiny",
            max_steps=2,
            start_step=0,
        )
    )
    model.apply(
        ThroughputMeasured(
            time=1.0,
            window=1.0,
            rollouts_per_s=0.0,
            sampled_tokens_per_s=0.0,
            trained_tokens_per_s=0.0,
            queue_depth=0,
            in_flight=1,
            trainer_busy=0.0,
            sampler_busy=1.0,
            verdict="sampler-bound",
            stalled=(stuck,),
        )
    )
    assert verdict_text(model) == "⚠ stuck 42s at task.py:20 await slow()"
    summary = _summary(RunFinished(time=2.0, status="stopped", final_step=0, cause="user"))
    from dataclasses import replace

    text = finished_content(replace(summary.summary(), stalled=(stuck,))).plain
    assert (
        "rollouts of scenario s1 (group 3) stuck for 42 s; it is waiting at "
        "/t/task.py:20 (await slow())" in text
    )


def test_rollout_timeout_defaults_per_backend_and_a_setting_wins():
    """A local rollout that takes minutes is hung (300 s); Tinker's queues can hold one
    longer (600 s). The task's settings, a config file or a flag still win."""
    from tinker_tui.app.task_loader import layered_config
    from tinker_tui.engine.rollouts.task import Scenario, Task

    async def rollout(client, model, scenario):
        raise AssertionError("not run")

    task = Task(name="t", scenarios=lambda rng: iter([Scenario(id="a", data=0)]), rollout=rollout)
    assert layered_config(task, "local").rollout_timeout == 300
    assert layered_config(task, "tinker").rollout_timeout == 600
    assert layered_config(task, "local", flags={"rollout_timeout": 50}).rollout_timeout == 50
    set_by_task = Task(
        name="t", scenarios=task.scenarios, rollout=rollout, settings={"rollout_timeout": 900}
    )
    assert layered_config(set_by_task, "local").rollout_timeout == 900
