"""Rollouts that fail: a hung rollout bounded by `rollout_timeout`, a failed member dropped
from its group (`min_group_size`), and a health pause that stops a run nobody can resume
(`on_health_pause`), down to the exit code of `run --no-ui`."""

import asyncio
import io
import os
import random
import re
import subprocess
import sys
import textwrap

import pytest

from bench.simulated import SimulatedClient, SimulatedPolicy
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import (
    EventBus,
    GroupDiscarded,
    GroupSampled,
    LogEmitted,
    RunStateChanged,
    StepTrained,
)
from tinker_tui.engine.rollouts.task import Scenario, Task
from tinker_tui.engine.rollouts.trajectory import Trajectory
from tinker_tui.engine.training.pipeline import Pipeline


def scenarios(rng):
    i = 0
    while True:
        yield Scenario(id=f"s{i}", data=i)
        i += 1


def make_pipeline(task, **overrides):
    session = SimulatedPolicy()
    config = RunConfig(
        max_steps=4, group_size=4, groups_per_step=2, rollout_workers=2, checkpoint_every=0
    ).with_overrides(overrides)
    bus = EventBus()
    events = []
    bus.subscribe(events.append)
    pipeline = Pipeline(
        config=config,
        task=task,
        session=session,
        client_factory=lambda: SimulatedClient(session),
        model_name="m",
        bus=bus,
        clock=FakeClock(),
        rng=random.Random(0),
    )
    return pipeline, events


async def test_a_hung_rollout_is_cancelled_logged_with_its_line_and_counted():
    calls = {"n": 0}

    async def rollout(client, model, scenario):
        calls["n"] += 1
        choice = await client.chat.completions.create(model=model, messages=[])
        if scenario.data == 1:
            await asyncio.sleep(10**6)  # hangs
        return Trajectory.from_choices([choice], reward=random.random())

    pipeline, events = make_pipeline(
        Task(name="t", scenarios=scenarios, rollout=rollout),
        rollout_timeout=0.3,
        min_group_size=4,
        max_steps=300,
    )
    assert await asyncio.wait_for(pipeline.run(), 30) == "completed"
    [discarded] = [e for e in events if isinstance(e, GroupDiscarded)]
    assert discarded.scenario_id == "s1" and discarded.reason == "error"
    assert "timed out after 0.3 s" in discarded.detail
    [log] = [
        e for e in events if isinstance(e, LogEmitted) and "rollout of scenario s1" in e.message
    ]
    assert log.level == "error"
    # where it hung: this file, the line of the sleep
    assert f"{__file__}:" in log.message and "await asyncio.sleep(10**6)" in log.message
    steps = [e for e in events if isinstance(e, StepTrained)]
    assert sum(e.metrics["discarded/error"] for e in steps) == 1
    assert sum(e.metrics["rollouts/failed"] for e in steps) == 4


async def test_a_hung_group_rollout_fails_its_group_within_the_timeout():
    async def group_rollout(client, model, scenario, n):
        if scenario.data == 0:
            await asyncio.sleep(10**6)
        choices = [await client.chat.completions.create(model=model) for _ in range(n)]
        return [Trajectory.from_choices([c], reward=float(i)) for i, c in enumerate(choices)]

    task = Task(name="g", scenarios=scenarios, group_rollout=group_rollout)
    pipeline, events = make_pipeline(task, rollout_timeout=0.3, max_steps=300)
    assert await asyncio.wait_for(pipeline.run(), 30) == "completed"
    [discarded] = [e for e in events if isinstance(e, GroupDiscarded)]
    assert discarded.scenario_id == "s0" and "timed out after 0.3 s" in discarded.detail
    assert all(e.num_trajectories == 4 for e in events if isinstance(e, GroupSampled))


async def test_failed_members_are_dropped_and_the_group_trains_with_the_rest():
    # the case: 1 rollout in 5 raises (at random)
    rng = random.Random(1)

    async def rollout(client, model, scenario):
        choice = await client.chat.completions.create(model=model, messages=[])
        if rng.random() < 0.2:
            raise ValueError("the tool crashed")
        return Trajectory.from_choices([choice], reward=rng.random())

    pipeline, events = make_pipeline(
        Task(name="t", scenarios=scenarios, rollout=rollout), max_steps=20, group_size=8
    )
    assert await asyncio.wait_for(pipeline.run(), 60) == "completed"
    sampled = [e for e in events if isinstance(e, GroupSampled)]
    partial = [e for e in sampled if e.failed]
    assert partial, "some groups lost members"
    assert all(
        e.num_trajectories + e.failed == 8 and len(e.trajectories) == e.num_trajectories
        for e in sampled
    )
    assert all("ValueError: the tool crashed" in e.detail for e in partial)
    assert not [e for e in events if isinstance(e, RunStateChanged) and e.state == "paused"]
    steps = [e for e in events if isinstance(e, StepTrained)]
    failed_in_steps = sum(e.metrics["rollouts/failed"] for e in steps)
    assert failed_in_steps >= sum(
        e.failed for e in sampled if e.group_id in {g for s in steps for g in s.group_ids}
    )
    assert any(
        "dropped; the group trains with the other" in e.message
        for e in events
        if isinstance(e, LogEmitted) and e.level == "warning"
    )


async def test_too_few_members_left_discards_the_group():
    async def rollout(client, model, scenario):
        choice = await client.chat.completions.create(model=model, messages=[])
        if scenario.data % 2:
            raise ValueError("odd")
        return Trajectory.from_choices([choice], reward=random.random())

    def half_failing(rng):  # one group's members: two succeed, two fail
        i = 0
        while True:
            yield Scenario(id=f"s{i}", data=i)
            i += 1

    members = iter(range(10**6))

    async def by_member(client, model, scenario):
        return await rollout(client, model, Scenario(id=scenario.id, data=next(members)))

    task = Task(name="t", scenarios=half_failing, rollout=by_member)
    pipeline, events = make_pipeline(task, max_steps=2, min_group_size=3, error_pause_rate=1.0)
    run = asyncio.create_task(pipeline.run())
    while not any(isinstance(e, GroupDiscarded) for e in events):
        await asyncio.sleep(0.001)
    pipeline.stop("test")
    await run
    first = next(e for e in events if isinstance(e, GroupDiscarded))
    assert first.reason == "error" and first.detail.startswith("2 of 4 rollouts failed")


@pytest.mark.parametrize("reaction, expected", [("stop", "stopped"), ("wait", None)])
async def test_a_health_pause_stops_the_run_or_waits(reaction, expected):
    async def rollout(client, model, scenario):
        raise RuntimeError("always")

    task = Task(name="t", scenarios=scenarios, rollout=rollout)
    pipeline, events = make_pipeline(task, max_steps=10, health_window=4, on_health_pause=reaction)
    run = asyncio.create_task(pipeline.run())
    try:
        status = await asyncio.wait_for(asyncio.shield(run), 2)
    except TimeoutError:
        status = None
    assert status == expected
    if reaction == "stop":
        assert pipeline.health_stop_reason.startswith("rollout errors: 100%")
        assert pipeline.stop_reason == f"health check: {pipeline.health_stop_reason}"
    else:
        assert pipeline.paused and not pipeline.health_stop_reason
        pipeline.stop("test")
        await run


async def test_auto_means_what_the_front_end_says():
    task = Task(name="t", scenarios=scenarios, rollout=lambda *a: None)
    config = RunConfig(on_health_pause="auto")
    for default in ("stop", "wait"):
        pipeline = Pipeline(
            config=config,
            task=task,
            session=SimulatedPolicy(),
            client_factory=lambda: None,
            model_name="m",
            bus=EventBus(),
            clock=FakeClock(),
            rng=random.Random(0),
            health_pause_default=default,
        )
        assert pipeline.on_health_pause == default
    explicit = Pipeline(
        config=RunConfig(on_health_pause="wait"),
        task=task,
        session=SimulatedPolicy(),
        client_factory=lambda: None,
        model_name="m",
        bus=EventBus(),
        clock=FakeClock(),
        rng=random.Random(0),
        health_pause_default="stop",
    )
    assert explicit.on_health_pause == "wait"


FAILING_TASK = """
from tinker_tui import Scenario, Task

def scenarios(rng):
    while True:
        yield Scenario(id="s", data=0)

async def rollout(client, model, scenario):
    raise RuntimeError("the environment is down")

TASK = Task(name="down", scenarios=scenarios, rollout=rollout,
            settings={"health_window": 4, "group_size": 2})
"""


def test_run_no_ui_stops_on_a_health_pause_and_exits_3(tmp_path):
    from pathlib import Path

    (tmp_path / "down.py").write_text(textwrap.dedent(FAILING_TASK))
    env = dict(
        os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(Path(__file__).resolve().parents[1])
    )  # this checkout's code
    env.pop("TINKER_API_KEY", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "down.py",
            "--no-ui",
            "--steps",
            "5",
            "--db",
            str(tmp_path / "runs.db"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert (
        "stopping: health check: rollout errors: 100% of the last 8 rollouts (4 groups) failed"
    ) in done.stdout
    assert re.search(r"run \S+ stopped at step 0/5 \(health check: rollout errors", done.stdout)


def _score(scenario):
    return {"right": 1.0}[scenario.data]  # raises KeyError: the task's own mistake


async def test_the_headless_log_says_where_in_the_task_a_rollout_raised(tmp_path):
    """`--no-ui` keeps one line per message, plus the line of the user's code that raised
    (not the engine's frames above it); `show RUN --log` has the whole traceback."""

    from tinker_tui.app.headless import HeadlessReporter

    async def rollout(client, model, scenario):
        choice = await client.chat.completions.create(model=model, messages=[])
        return Trajectory.from_choices([choice], reward=_score(scenario))

    pipeline, events = make_pipeline(
        Task(name="t", scenarios=scenarios, rollout=rollout), max_steps=1, on_health_pause="stop"
    )
    out = io.StringIO()
    reporter = HeadlessReporter(out, db_path=tmp_path / "r.db")
    await asyncio.wait_for(pipeline.run(), 30)
    for event in events:
        reporter.handle(event)
    lines = out.getvalue().splitlines()
    first = next(i for i, line in enumerate(lines) if "rollout of scenario" in line)
    assert lines[first].startswith("error: ") and "KeyError: 0" in lines[first]
    where = lines[first + 1]
    assert where.startswith(f"  at {__file__}:") and 'in _score: return {"right": 1.0}' in where
    assert where.endswith(f"--log --db {tmp_path / 'r.db'})")
    log = next(e for e in events if isinstance(e, LogEmitted) and "rollout of" in e.message)
    assert log.message.startswith(lines[first][len("error: ") :] + "\n")
    assert "Traceback (most recent call last)" in log.message  # what `show --log` prints


async def test_the_headless_log_names_the_users_line_of_an_error_raised_in_ours(tmp_path):
    """A reward of the wrong type is refused inside the engine's Trajectory; the place to
    fix is the rollout's line that passed it. The same error again is counted, not
    repeated."""

    from tinker_tui.app.headless import HeadlessReporter
    from tinker_tui.engine.events import RunFinished

    async def rollout(client, model, scenario):
        choice = await client.chat.completions.create(model=model, messages=[])
        return Trajectory.from_choices([choice], reward="1")  # the mistake

    pipeline, events = make_pipeline(
        Task(name="t", scenarios=scenarios, rollout=rollout),
        max_steps=1,
        on_health_pause="stop",
        health_window=4,
    )
    out = io.StringIO()
    reporter = HeadlessReporter(out)
    await asyncio.wait_for(pipeline.run(), 30)
    for event in events:
        reporter.handle(event)
    reporter.handle(RunFinished(time=0.0, status="stopped", final_step=0, reason="health"))
    lines = out.getvalue().splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("error: rollout of")]
    assert len(errors) == 1, lines  # once, then counted
    assert "reward must be a number, got str" in lines[errors[0]]
    assert lines[errors[0] + 1].startswith(f"  at {__file__}:")
    assert 'reward="1")  # the mistake' in lines[errors[0] + 1]
    failed = sum(isinstance(e, GroupDiscarded) and e.reason == "error" for e in events)
    assert failed >= 4 and any(
        line.startswith(f"  (and {failed - 1} more like 'rollout of") for line in lines
    ), lines


def test_the_headless_lines_stop_quietly_when_their_reader_goes_away():
    """`run --no-ui | head -3`: once the pipe is closed, nothing more is printed and no
    handler fails (the event bus would log each failure); the run is not disturbed."""
    from tinker_tui.app.headless import HeadlessReporter

    class ClosedPipe:
        writes = 0

        def write(self, text):
            ClosedPipe.writes += 1
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

    reporter = HeadlessReporter(ClosedPipe())
    for i in range(3):
        reporter.handle(LogEmitted(time=float(i), level="error", message=f"failure {i}"))
    assert ClosedPipe.writes == 1  # the first write found the pipe closed; then silence


def test_headless_errors_that_differ_in_a_quoted_value_are_counted_as_one():
    """`int(answer)` raising for every answer printed one error per answer ('man', then
    'travel', ...); the count says which message it counts, wherever it lands."""
    from tinker_tui.app.headless import HeadlessReporter
    from tinker_tui.engine.events import LogEmitted, RunFinished

    out = io.StringIO()
    reporter = HeadlessReporter(out)
    for word in ("man", "travel", "song"):
        reporter.handle(
            LogEmitted(
                time=1.0,
                level="error",
                message=(
                    f"rollout of s1 failed: ValueError: invalid literal for int() with base 10: "
                    f"'{word}'"
                ),
            )
        )
    reporter.handle(RunFinished(time=2.0, status="stopped", final_step=0, reason="health"))
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == (
        "error: rollout of s1 failed: ValueError: invalid literal for int() with base 10: 'man'"
    )
    assert lines[1].startswith("  (and 2 more like 'rollout of s1 failed: ValueError: invalid")


def test_the_summary_counts_the_groups_the_tasks_errors_cost():
    """A completed run whose groups failed by the dozen said nothing of it at its end."""
    from tinker_tui.app.run_summary import SummaryCollector, summary_lines
    from tinker_tui.engine.events import RunFinished, RunStarted

    summary = SummaryCollector(task="calc.py")
    summary.handle(
        RunStarted(
            time=0.0,
            run_id="r",
            name="calc",
            backend="local",
            base_model="tiny",
            max_steps=2,
            start_step=0,
        )
    )
    for group_id, reason in ((1, "error"), (2, "stale"), (3, "error")):
        summary.handle(
            GroupDiscarded(
                time=1.0,
                group_id=group_id,
                scenario_id="s",
                reason=reason,
                policy_version=0,
                trainer_version=0,
                num_tokens=0,
                step=1,
            )
        )
    summary.handle(RunFinished(time=2.0, status="completed", final_step=2, reason="done"))
    assert "  errors: 2 groups lost to failed rollouts (`show --log`)" in summary_lines(
        summary.summary()
    )


def _maybe_only(scenario_data, answer):
    return {"maybe": 1.0}[answer]  # the bug: raises for every answer but "maybe"


async def test_failed_rollouts_count_toward_the_error_rate_though_their_groups_train():
    """A reward that raises on most answers: each group trains on its few survivors (all
    rewarded 1.0, so every step read `reward 1.000`), and no group failed as a whole, so
    the health check never saw an error. The rate is the share of rollouts that failed."""
    answers = random.Random(1)

    async def rollout(client, model, scenario):
        choice = await client.chat.completions.create(model=model, messages=[])
        answer = answers.choice(["maybe", "no", "yes", "no"])  # about 75 % raise
        return Trajectory.from_choices([choice], reward=_maybe_only(scenario.data, answer))

    pipeline, events = make_pipeline(
        Task(name="t", scenarios=scenarios, rollout=rollout),
        max_steps=1000,
        group_size=8,
        min_group_size=1,
        health_window=8,
        error_pause_rate=0.5,
        on_health_pause="stop",
    )
    assert await asyncio.wait_for(pipeline.run(), 30) == "stopped"
    assert re.fullmatch(
        r"rollout errors: \d+% of the last 64 rollouts \(8 groups\) failed; "
        r"the last: KeyError: '(no|yes)'",
        pipeline.health_stop_reason,
    )
    steps = [e for e in events if isinstance(e, StepTrained)]
    assert steps and all(e.metrics["reward/mean"] == 1.0 for e in steps)  # survivors only
    failed = sum(e.metrics["rollouts/failed"] for e in steps)
    ended = sum(e.metrics["rollouts/ended"] for e in steps)
    assert 0.5 < failed / ended < 0.95
    assert not [e for e in events if isinstance(e, GroupDiscarded) and e.reason == "error"]


MOSTLY_FAILING_TASK = """
import random
from tinker_tui import Scenario, Task, Trajectory

def scenarios(rng):
    i = 0
    while True:
        yield Scenario(id=f"s{i}", data=i)
        i += 1

def reward(answer):
    return {"maybe": 1.0}[answer]

async def rollout(client, model, scenario):
    completion = await client.chat.completions.create(
        model=model, max_tokens=2, messages=[{"role": "user", "content": "?"}])
    choice = completion.choices[0]
    answer = random.choice(["maybe", "no", "yes", "no", "yes"])
    return Trajectory.from_choices([choice], reward=reward(answer))

TASK = Task(name="mostly", scenarios=scenarios, rollout=rollout,
            settings={"health_window": 24, "group_size": 8, "min_group_size": 1,
                      "warmup_steps": 0})
"""


def test_run_no_ui_shows_failed_rollouts_and_stops_on_their_rate(tmp_path):
    """Headless: the step line, the JSONL (`rollouts/failed`) and the summary count the
    failed rollouts; the run stops with exit 3 naming the rate and the last error."""
    import json
    from pathlib import Path

    (tmp_path / "mostly.py").write_text(textwrap.dedent(MOSTLY_FAILING_TASK))
    env = dict(
        os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(Path(__file__).resolve().parents[1])
    )  # this checkout's code
    env.pop("TINKER_API_KEY", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "mostly.py",
            "--no-ui",
            "--steps",
            "200",
            "--db",
            str(tmp_path / "runs.db"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    out = done.stdout
    # The window is long enough (24 groups) for steps to train before the check stops the
    # run: with 8 groups, a loaded machine sampled them all before step 1 and no step line
    # was printed.
    assert re.search(
        r"stopping: health check: rollout errors: \d+% of the last 192 "
        r"rollouts \(24 groups\) failed; the last: KeyError: '(no|yes)'",
        out,
    ), out
    step_lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert step_lines and all(
        re.search(r"failed rollouts \d+/\d+ \(\d+ in all\)", line) for line in step_lines
    ), step_lines
    (jsonl,) = tmp_path.glob("*.metrics.jsonl")
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    failed = int(sum(r["rollouts/failed"] for r in records if r["event"] == "step"))
    ended = int(sum(r["rollouts/ended"] for r in records if r["event"] == "step"))
    assert failed > 0 and ended >= failed
    assert f"  errors: {failed:,} of {ended:,} rollouts failed ({failed / ended:.0%})" in out


def test_the_dashboard_counts_failed_rollouts_per_step_and_in_all():
    from tinker_tui.app.dashboard_state import DashboardState
    from tinker_tui.app.widgets.discarded import discarded_subtitle

    model = DashboardState(FakeClock())
    for step, (failed, ended) in enumerate([(6, 8), (13, 16)], start=1):
        model.apply(
            StepTrained(
                time=float(step),
                step=step,
                policy_version=step,
                metrics={"reward/mean": 1.0, "rollouts/failed": failed, "rollouts/ended": ended},
            )
        )
    assert model.rollouts_failed == 19 and model.rollouts_ended == 24
    assert discarded_subtitle(model).endswith(" · 19 of 24 rollouts failed")
    assert model.series["rollouts/failed"] == [(1, 6.0), (2, 13.0)]  # the metrics view's


class _MonotonicClock:
    """Real seconds: the stall is measured as a run measures it."""

    def now(self) -> float:
        import time

        return time.monotonic()


async def test_a_hung_rollout_is_shown_with_its_age_and_line_long_before_its_timeout():
    """The oldest rollout in flight past `stall_after` (30 s in a run; short here, injected)
    is carried, with its age and the line of the task it waits at, in the throughput
    events; the headless log warns once per stuck rollout, and the stop summary names it,
    long before `rollout_timeout` cancels it."""
    from tinker_tui.app.headless import HeadlessReporter
    from tinker_tui.app.run_summary import SummaryCollector, summary_lines
    from tinker_tui.engine.events import RunFinished, RunStarted, ThroughputMeasured

    hung = asyncio.Event()

    async def rollout(client, model, scenario):
        choice = await client.chat.completions.create(model=model, messages=[])
        if scenario.data == 1:
            hung.set()
            await asyncio.sleep(10**6)  # hangs here
        return Trajectory.from_choices([choice], reward=random.random())

    session = SimulatedPolicy()
    config = RunConfig(
        max_steps=1000,
        group_size=2,
        groups_per_step=1,
        rollout_workers=2,
        checkpoint_every=0,
        rollout_timeout=600,
    )
    bus = EventBus()
    events = []
    bus.subscribe(events.append)
    out = io.StringIO()
    reporter = HeadlessReporter(out)
    bus.subscribe(reporter.handle)
    summary = SummaryCollector(task="t.py")
    bus.subscribe(summary.handle)
    pipeline = Pipeline(
        config=config,
        task=Task(name="t", scenarios=scenarios, rollout=rollout),
        session=session,
        client_factory=lambda: SimulatedClient(session),
        model_name="m",
        bus=bus,
        clock=_MonotonicClock(),
        rng=random.Random(0),
        stall_after=0.5,
    )
    pipeline.report_interval = 0.1
    bus.publish(
        RunStarted(
            time=0.0,
            run_id="r1",
            name="t",
            backend="local",
            base_model="tiny",
            max_steps=1000,
            start_step=0,
        )
    )
    run = asyncio.ensure_future(pipeline.run())
    await asyncio.wait_for(hung.wait(), 30)

    def stalled():
        return [s for e in events if isinstance(e, ThroughputMeasured) for s in e.stalled]

    async def until_stalled():
        while not stalled():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(until_stalled(), 60)
    first = stalled()[0]
    assert first.scenario_id == "s1" and first.age >= 0.5
    assert f"{__file__}:" in first.waiting_at and "await asyncio.sleep(10**6)" in first.waiting_at
    await asyncio.sleep(0.5)  # more reports of the same stuck rollout: one warning
    warnings = [
        line
        for line in out.getvalue().splitlines()
        if line.startswith("warning:") and "scenario s1" in line
    ]
    assert len(warnings) == 1, out.getvalue()
    assert "stuck" in warnings[0] and "await asyncio.sleep(10**6)" in warnings[0]
    pipeline.stop()
    await asyncio.wait_for(run, 30)
    bus.publish(RunFinished(time=1.0, status="stopped", final_step=pipeline.step, cause="user"))
    stuck = [line for line in summary_lines(summary.summary()) if line.startswith("  stuck:")]
    assert (
        len(stuck) == 1 and "scenario s1" in stuck[0] and "await asyncio.sleep(10**6)" in stuck[0]
    ), summary_lines(summary.summary())
