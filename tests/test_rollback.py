"""A collapse rolled back on the real local backend: the run goes back to its checkpoint at or
before the best step, with the learning rate scaled, and the store ends as an exactly-once
resume leaves it (the steps after that checkpoint removed, their scenarios trained again),
the rollback recorded as a command."""

from __future__ import annotations

import dataclasses
import io
import json
import random
import re
import sqlite3

import pytest
from exactly_once import check_exactly_once
from test_trackers import (
    assert_tensorboard_matches,
    needs_tensorboard,
    needs_wandb,
    offline_wandb,  # noqa: F401 (a fixture)
    settled_wandb_segments,
    store_records,
    tensorboard_scalars,
)

from tinker_tui import Scenario, Task, Trajectory
from tinker_tui.app.headless import HeadlessReporter, MetricsFile
from tinker_tui.app.run_summary import SummaryCollector, summary_lines
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import (
    CheckpointSaved,
    CommandReceived,
    LogEmitted,
    RunFinished,
    StepTrained,
)
from tinker_tui.engine.run import Run

STEPS = 14
#: The runs are short, 2 groups a step: a collapse is judged over 6 groups (3 steps), not
#: the default `collapse_groups`.
SHORT = 6


def endless_scenarios(rng: random.Random):
    """Scenarios s0, s1, … for ever; `data` is the index (the tasks here script by it)."""
    index = 0
    while True:
        yield Scenario(id=f"s{index}", data=index)
        index += 1


def collapsing_task(phase: dict[str, bool]) -> Task:
    """Rewards 0 or 1 at random per rollout (a learning signal) until step 6; then, until
    the run rolls back, every rollout earns 0: a collapse the run cannot climb out of."""

    tries: dict[str, int] = {}

    async def rollout(client, model, scenario: Scenario) -> Trajectory:
        completion = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say yes."}], max_tokens=2
        )
        collapsed = phase["collapsing"] and scenario.data >= 12
        tries[scenario.id] = n = tries.get(scenario.id, 0) + 1  # the same draws every run
        reward = 0.0 if collapsed else float(random.Random(f"{scenario.id}/{n}").random() < 0.5)
        return Trajectory.from_choices(completion.choices, reward=reward)

    return Task(name="collapsing", scenarios=endless_scenarios, rollout=rollout)


async def test_a_collapse_is_rolled_back_exactly_once(tmp_path):
    phase = {"collapsing": True}
    config = RunConfig(
        max_steps=STEPS,
        group_size=4,
        groups_per_step=2,
        rollout_workers=2,
        collapse_groups=SHORT,
        max_steps_off_policy=0,
        checkpoint_every=2,
        seed=3,
        on_collapse="rollback",
        max_rollbacks=1,
        rollback_lr_scale=0.5,
        learning_rate=1e-3,
        keep_last_checkpoints=2,
    )
    db = tmp_path / "runs.db"
    run = Run(
        task=collapsing_task(phase), config=config, backend="local", db_path=db, headless=True
    )
    metrics_file = MetricsFile(tmp_path)
    summary = SummaryCollector(task="collapsing", db_path=db)
    rolled: list[CommandReceived] = []
    learning_rates: dict[int, float] = {}

    def on_event(event):
        metrics_file.handle(event)
        summary.handle(event)
        if isinstance(event, CommandReceived) and event.command == "rolled_back":
            rolled.append(event)
            phase["collapsing"] = False  # the policy after the rollback learns again
        elif isinstance(event, StepTrained):
            learning_rates[event.step] = event.metrics["optim/lr"]

    run.events.subscribe(on_event)
    assert await run.run() == "completed"

    assert len(rolled) == 1
    to_step = rolled[0].args["to_step"]
    assert 2 <= to_step <= 6 and rolled[0].args["steps_undone"] >= 3
    assert re.match(
        r"collapsed at step [4-7] \(best [0-9.]+ at step [1-6]\); best checkpoint "
        rf"step-{to_step:06d} \(on_collapse = rollback, 1 of 1\)$",
        rolled[0].args["reason"],
    ), rolled[0].args["reason"]
    assert rolled[0].args["value"] == rolled[0].args["old"] * 0.5 == 5e-4
    assert learning_rates[to_step + 1] == 5e-4 and learning_rates[STEPS] == 5e-4
    # The store as an exactly-once resume leaves it: steps 1..N once each, one policy
    # version per step, every scenario position trained once (the undone ones again).
    check_exactly_once(db, STEPS, groups_per_step=2)
    with sqlite3.connect(db) as conn:
        commands = [
            (c, json.loads(a))
            for c, a in conn.execute("select command, args from commands order by id")
        ]
    conn.close()
    assert [c for c, _ in commands if c.startswith("roll")] == ["rollback", "rolled_back"]
    lines = summary_lines(summary.summary())
    assert any(
        line.startswith(
            f"  rolled back to step-{to_step:06d} (step {to_step}) at learning rate 0.0005"
        )
        for line in lines
    ), lines


async def test_a_rollback_loads_the_weights_that_sampled_the_best_step_not_its_update(tmp_path):
    """With a checkpoint at every step, the best step has one of its own: it holds the best
    step's update, perhaps the one that broke the run. The rollback loads the checkpoint
    before it, whose weights sampled the best step's groups (on policy, each step had a
    gradient), and says so in its command's fields."""
    phase = {"collapsing": True}
    config = RunConfig(
        max_steps=10,
        group_size=4,
        groups_per_step=2,
        rollout_workers=2,
        collapse_groups=SHORT,
        max_steps_off_policy=0,
        checkpoint_every=1,
        seed=3,
        on_collapse="rollback",
        max_rollbacks=1,
        rollback_lr_scale=0.5,
        learning_rate=1e-3,
        keep_last_checkpoints=2,
    )
    db = tmp_path / "runs.db"
    run = Run(
        task=collapsing_task(phase), config=config, backend="local", db_path=db, headless=True
    )
    rolled: list[CommandReceived] = []
    steps: dict[int, StepTrained] = {}
    checkpoints: dict[int, int] = {}  # step -> policy version, of the first attempt

    def on_event(event):
        if isinstance(event, CommandReceived) and event.command == "rolled_back":
            rolled.append(event)
            phase["collapsing"] = False
        elif isinstance(event, StepTrained) and not rolled:
            steps[event.step] = event
        elif isinstance(event, CheckpointSaved) and event.kind == "state" and not rolled:
            checkpoints[event.step] = event.resume_state["policy_version"]

    run.events.subscribe(on_event)
    assert await run.run() == "completed"
    assert len(rolled) == 1
    args = rolled[0].args
    best = args["best_step"]
    assert best in checkpoints and best - 1 in checkpoints  # one at and one before the best
    trained = steps[best].metrics.get("train/skipped") != 1.0
    assert args["to_step"] == (best - 1 if trained else best)
    assert args["best_sampled_by"] == steps[best].policy_version - trained
    assert args["checkpoint_version"] == checkpoints[args["to_step"]] == args["best_sampled_by"]


async def test_the_summary_of_a_rolled_back_run_forgets_the_undone_steps(tmp_path):
    """The live summary's reward line (final, best and its step) is the one `show` prints
    from the store: the best step a rollback undid is no longer the run's, in either."""
    from tinker_tui.app.store_session import StoreSession
    from tinker_tui.engine.store import StoreReader

    phase = {"rolled_back": False}
    tries: dict[str, int] = {}

    async def rollout(client, model, scenario: Scenario) -> Trajectory:
        """Rewards 0 or 1 at random, all 1 around step 7 (the best), 0 after it (a collapse),
        until the rollback; after it, at random again (below that best)."""
        completion = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say yes."}], max_tokens=2
        )
        index = scenario.data
        tries[scenario.id] = n = tries.get(scenario.id, 0) + 1  # the same draws every run
        draw = random.Random(f"{scenario.id}/{n}").random()
        if phase["rolled_back"] or index < 12:
            reward = float(draw < 0.4)
        else:
            reward = 1.0 if index < 14 else 0.0
        return Trajectory.from_choices(completion.choices, reward=reward)

    config = RunConfig(
        max_steps=STEPS,
        group_size=4,
        groups_per_step=2,
        rollout_workers=2,
        max_steps_off_policy=0,
        checkpoint_every=3,
        seed=3,
        on_collapse="rollback",
        max_rollbacks=1,
        learning_rate=1e-3,
        keep_last_checkpoints=2,
        collapse_groups=SHORT,
    )
    db = tmp_path / "runs.db"
    run = Run(
        task=Task(name="peaked", scenarios=endless_scenarios, rollout=rollout),
        config=config,
        backend="local",
        db_path=db,
        headless=True,
    )
    live = SummaryCollector(task="peaked", db_path=db)
    rewards: dict[int, float] = {}
    undone: dict[int, float] = {}

    def on_event(event):
        live.handle(event)
        if isinstance(event, CommandReceived) and event.command == "rolled_back":
            phase["rolled_back"] = True
            undone.update(
                (s, rewards.pop(s)) for s in [s for s in rewards if s > event.args["to_step"]]
            )
        elif isinstance(event, StepTrained):
            rewards[event.step] = event.metrics["reward/mean"]

    run.events.subscribe(on_event)
    assert await run.run() == "completed"
    assert undone and max(undone.values()) > max(rewards.values())  # the best was undone
    async with await StoreReader.open_readonly(db) as store:
        stored = await store.find_run(run.run_id)
    replayed = SummaryCollector(task="peaked", db_path=db)
    for event in await StoreSession(db, stored).read_all():
        replayed.handle(event)
    best = max(rewards.values())
    want = (rewards[STEPS], best, min(s for s, r in rewards.items() if r == best))
    for summary in (live.summary(), replayed.summary()):
        assert (summary.final_reward, summary.best_reward, summary.best_step) == want


def resumed(task: Task, config: RunConfig, db, run_id: str) -> Run:
    return Run(
        task=task,
        config=config,
        backend="local",
        db_path=db,
        run_id=run_id,
        resume=True,
        headless=True,
    )


async def test_a_collapse_is_still_named_with_its_best_checkpoint_after_a_resume(tmp_path):
    """Stopped by its collapse (headless: on_collapse = stop), then resumed: the resumed
    process names the same collapse and its best checkpoint, in its log, the step lines and
    the summary, and can still roll back to that checkpoint."""
    phase = {"collapsing": True}
    config = RunConfig(
        max_steps=STEPS,
        group_size=4,
        groups_per_step=2,
        rollout_workers=2,
        collapse_groups=SHORT,
        max_steps_off_policy=0,
        checkpoint_every=2,
        seed=3,
        on_collapse="stop",
        learning_rate=1e-3,
        keep_last_checkpoints=2,
    )
    db = tmp_path / "runs.db"
    first = Run(
        task=collapsing_task(phase), config=config, backend="local", db_path=db, headless=True
    )
    assert await first.run() == "stopped"
    collapse = first.pipeline.health.collapse
    assert collapse is not None and collapse.checkpoint_step is not None
    words = collapse.words()
    assert re.match(
        r"collapsed at step \d+ \(best [0-9.]+ at step \d+\); best checkpoint "
        r"step-\d{6}$",
        words,
    ), words

    again = resumed(
        collapsing_task(phase), dataclasses.replace(config, max_steps=STEPS + 2), db, first.run_id
    )
    reporter = HeadlessReporter(out=io.StringIO())
    summary = SummaryCollector(task="collapsing", db_path=db)
    reporter.remember(await summary.read_earlier(db, first.run_id))
    logs: list[str] = []

    def on_event(event):
        reporter.handle(event)
        summary.handle(event)
        if isinstance(event, LogEmitted) and event.level == "warning":
            logs.append(event.message)

    again.events.subscribe(on_event)
    assert await again.run() == "completed"  # told before: named, not acted on again
    assert again.pipeline.health.collapse is not None
    assert again.pipeline.health.collapse.words() == words
    assert again.pipeline.checkpointer.rollback_target() == (
        collapse.checkpoint_step,
        collapse.checkpoint,
    )
    assert any(
        m.startswith(f"resumed after a collapse: {words} (0 of 2 automatic rollbacks") for m in logs
    ), logs
    step_lines = [
        line
        for line in reporter.out.getvalue().splitlines()  # type: ignore[attr-defined]
        if line.startswith("step ")
    ]
    assert len(step_lines) == 2 + STEPS - first.pipeline.step
    assert all(
        f"collapsed (best {collapse.best:.3f} at step {collapse.best_step})" in line
        for line in step_lines
    ), step_lines
    lines = summary_lines(summary.summary())
    assert f"  health: {words}" in lines
    # How to go back to that checkpoint: resumed so, the run rolls back at once (below).
    assert any(
        line.startswith("  roll back:")
        and line.endswith(
            f"--resume {first.run_id} --db {db} --steps {2 * (STEPS + 2)} --on-collapse rollback"
        )
        for line in lines
    ), lines


async def test_the_automatic_rollbacks_made_count_across_a_resume(tmp_path):
    """One rollback allowed (max_rollbacks = 1) and made before the run ended; the resumed
    run collapses again: no second rollback, it stops (headless) as once the allowance is
    spent within one process."""
    phase = {"collapsing": True}
    config = RunConfig(
        max_steps=STEPS,
        group_size=4,
        groups_per_step=2,
        rollout_workers=2,
        collapse_groups=SHORT,
        max_steps_off_policy=0,
        checkpoint_every=2,
        seed=3,
        on_collapse="rollback",
        max_rollbacks=1,
        rollback_lr_scale=0.5,
        learning_rate=1e-3,
        keep_last_checkpoints=2,
    )
    db = tmp_path / "runs.db"
    first = Run(
        task=collapsing_task(phase), config=config, backend="local", db_path=db, headless=True
    )

    def learns_after_a_rollback(event):
        if isinstance(event, CommandReceived) and event.command == "rolled_back":
            phase["collapsing"] = False

    first.events.subscribe(learns_after_a_rollback)
    assert await first.run() == "completed"
    assert first.pipeline.rollbacks == 1 and first.pipeline.health.collapse is None

    phase["collapsing"] = True  # and it collapses again once resumed
    again = resumed(
        collapsing_task(phase), dataclasses.replace(config, max_steps=STEPS + 8), db, first.run_id
    )
    logs: list[str] = []
    again.events.subscribe(lambda e: logs.append(e.message) if isinstance(e, LogEmitted) else None)
    summary = SummaryCollector(task="collapsing", db_path=db)
    await summary.read_earlier(db, first.run_id)
    again.events.subscribe(summary.handle)
    assert await again.run() == "stopped"
    assert any(line.endswith("; no rollback: max_rollbacks (1) reached") for line in logs), logs
    assert again.pipeline.rollbacks == 1
    # The command it prints to roll back gives it one more: with none left, the resumed run
    # would go on without rolling back.
    (roll_back,) = [
        line for line in summary_lines(summary.summary()) if line.startswith("  roll back:")
    ]
    assert roll_back.endswith(
        f"--resume {first.run_id} --db {db} --on-collapse rollback --max-rollbacks 2"
    ), roll_back
    with sqlite3.connect(db) as conn:
        commands = conn.execute("select command, source from commands order by id").fetchall()
    conn.close()
    # Asked for by on_collapse, not by a person (the control view's "from" column).
    assert commands == [
        ("rollback", "on_collapse"),
        ("rolled_back", "on_collapse"),
        ("stop", "on_collapse"),
    ]


@needs_wandb
@needs_tensorboard
@pytest.mark.usefixtures("offline_wandb")
async def test_a_rollback_reaches_the_trackers_as_the_store_holds_it(tmp_path):
    """A real run rolled back with TensorBoard and W&B (offline) on: TensorBoard shows what
    the store keeps (each step once, the redone values), W&B marks where the redo starts."""
    phase = {"collapsing": True}
    config = RunConfig(
        max_steps=STEPS,
        group_size=4,
        groups_per_step=2,
        rollout_workers=2,
        collapse_groups=SHORT,
        max_steps_off_policy=0,
        checkpoint_every=2,
        seed=3,
        on_collapse="rollback",
        max_rollbacks=1,
        learning_rate=1e-3,
        keep_last_checkpoints=2,
        tensorboard_dir=str(tmp_path / "tb"),
        wandb_project="charts",
        wandb_run_id="w-rollback",
    )
    db = tmp_path / "runs.db"
    run = Run(
        task=collapsing_task(phase), config=config, backend="local", db_path=db, headless=True
    )
    rolled: list[CommandReceived] = []

    def on_event(event):
        if isinstance(event, CommandReceived) and event.command == "rolled_back":
            rolled.append(event)
            phase["collapsing"] = False

    run.events.subscribe(on_event)
    assert await run.run() == "completed"
    (rollback,) = rolled
    to_step, undone = rollback.args["to_step"], rollback.args["steps_undone"]

    _, steps, evals = await store_records(db, run.run_id)
    assert [s for s, _ in steps] == list(range(1, STEPS + 1))
    assert_tensorboard_matches(tensorboard_scalars(tmp_path / "tb" / run.run_id), steps, evals)

    (segment,) = settled_wandb_segments(tmp_path, "w-rollback")
    logged = [row["step"] for row in segment["rows"] if "reward/mean" in row]
    (mark,) = [i for i, row in enumerate(segment["rows"]) if "rollback/to_step" in row]
    assert segment["rows"][mark]["rollback/to_step"] == to_step
    assert segment["rows"][mark]["rollback/steps_undone"] == undone
    before = sum("reward/mean" in row for row in segment["rows"][:mark])
    assert logged == list(range(1, before + 1)) + list(range(to_step + 1, STEPS + 1))
    assert before == to_step + undone


async def test_a_run_stopped_by_its_collapse_rolls_back_when_resumed_so(tmp_path):
    """Stopped by its collapse, then resumed with on_collapse = rollback: it goes back to
    its best checkpoint at once, and the store ends as an exactly-once resume leaves it."""
    phase = {"collapsing": True}
    config = RunConfig(
        max_steps=STEPS,
        group_size=4,
        groups_per_step=2,
        rollout_workers=2,
        collapse_groups=SHORT,
        max_steps_off_policy=0,
        checkpoint_every=2,
        seed=3,
        on_collapse="stop",
        learning_rate=1e-3,
        keep_last_checkpoints=2,
    )
    db = tmp_path / "runs.db"
    first = Run(
        task=collapsing_task(phase), config=config, backend="local", db_path=db, headless=True
    )
    first.events.subscribe(MetricsFile(tmp_path).handle)
    assert await first.run() == "stopped"
    collapse = first.pipeline.health.collapse
    assert collapse is not None and collapse.checkpoint_step is not None

    again = resumed(
        collapsing_task(phase),
        dataclasses.replace(config, on_collapse="rollback", max_rollbacks=1),
        db,
        first.run_id,
    )
    rolled: list[CommandReceived] = []

    def on_event(event):
        if isinstance(event, CommandReceived) and event.command == "rolled_back":
            rolled.append(event)
            phase["collapsing"] = False

    again.events.subscribe(on_event)
    again.events.subscribe(MetricsFile(tmp_path).handle)
    assert await again.run() == "completed"
    (rollback,) = rolled
    assert rollback.args["to_step"] == collapse.checkpoint_step
    assert rollback.args["steps_undone"] == first.pipeline.step - collapse.checkpoint_step
    assert rollback.args["reason"] == f"{collapse.words()} (on_collapse = rollback, 1 of 1)"
    assert again.pipeline.rollbacks == 1
    check_exactly_once(db, STEPS, groups_per_step=2)


async def test_a_resumed_run_that_rolls_back_ends_at_the_step_it_reached(tmp_path):
    """Resumed, rolled back below the step it resumed from, and stopped soon after: the run
    ends at the last step it trained (its RunFinished, `runs`' row and the store's last step
    agree), not at the step it resumed from."""
    phase = {"collapsing": True}
    config = RunConfig(
        max_steps=STEPS,
        group_size=4,
        groups_per_step=2,
        rollout_workers=2,
        max_steps_off_policy=0,
        checkpoint_every=2,
        seed=3,
        on_collapse="stop",
        learning_rate=1e-3,
        keep_last_checkpoints=2,
        collapse_groups=SHORT,
    )
    db = tmp_path / "runs.db"
    first = Run(
        task=collapsing_task(phase), config=config, backend="local", db_path=db, headless=True
    )
    assert await first.run() == "stopped"
    resumed_at = first.pipeline.step
    again = resumed(
        collapsing_task(phase),
        dataclasses.replace(config, on_collapse="rollback"),
        db,
        first.run_id,
    )
    finished: list[RunFinished] = []

    def on_event(event):
        if isinstance(event, CommandReceived) and event.command == "rolled_back":
            again.pipeline.stop()  # `b`, then `q`: stopped after the next step
        elif isinstance(event, RunFinished):
            finished.append(event)

    again.events.subscribe(on_event)
    assert await again.run() == "stopped"
    assert again.pipeline.rollbacks == 1 and again.pipeline.step < resumed_at
    with sqlite3.connect(db) as connection:
        (last,) = connection.execute("SELECT max(step) FROM steps").fetchone()
        (final,) = connection.execute("SELECT final_step FROM runs").fetchone()
    (event,) = finished
    assert event.final_step == last == final == again.pipeline.step


TASK_FILE = """
import random

from tinker_tui import Scenario, Task, Trajectory


def scenarios(rng):
    index = 0
    while True:
        yield Scenario(id=f"s{index}", data=index)
        index += 1


async def rollout(client, model, scenario):
    completion = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say yes."}], max_tokens=2)
    reward = 0.0 if scenario.data >= 12 else float(random.random() < 0.5)
    return Trajectory.from_choices(completion.choices, reward=reward)


TASK = Task(name="collapsing", scenarios=scenarios, rollout=rollout)
"""


def test_the_command_line_names_the_collapse_again_after_a_resume(tmp_path, capsys):
    """`run --no-ui`, stopped by its collapse (exit 3), then `--resume`: the resumed run's
    step lines still say it has collapsed, and its summary names the collapse."""
    from tinker_tui.app.cli import main

    task = tmp_path / "collapsing.py"
    task.write_text(TASK_FILE)
    db = tmp_path / "runs.db"
    common = ["--db", str(db), "--no-ui", "--seed", "3"]
    assert (
        main(
            [
                "run",
                str(task),
                *common,
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
                "--checkpoint-every",
                "2",
                "--collapse-groups",
                str(SHORT),
            ]
        )
        == 3
    )  # the resume reads it back
    first = capsys.readouterr().out
    run_id = re.search(r"^run (\S+):", first, re.M)[1]  # type: ignore[index]
    # a health stop says its words once, in the summary's headline
    (health,) = re.findall(
        r"^run \S+ stopped at step .*\(health check: (collapsed at step .*)\)$", first, re.M
    )
    assert main(["run", str(task), "--resume", run_id, *common]) == 0
    again = capsys.readouterr().out
    steps = [line for line in again.splitlines() if line.startswith("step ")]
    assert steps and all(
        re.search(r"  collapsed \(best [0-9.]+ at step \d+\)$", line) for line in steps
    ), steps
    assert f"warning: resumed after a collapse: {health}" in again
    assert f"  health: {health}" in again.splitlines()


def test_a_collapse_with_nothing_to_roll_back_to_suggests_no_rollback():
    """The best step was the first: no checkpoint holds the weights that sampled it (the one
    of step 1 holds step 1's update), so resuming with `--on-collapse rollback` could not
    roll back, and the summary does not offer it."""
    from tinker_tui.app.run_summary import RunSummary, next_commands

    collapsed = RunSummary(
        run_id="r",
        task="example",
        status="stopped",
        step=6,
        max_steps=40,
        collapse="collapsed at step 3 (best 0.781 at step 1)",
    )
    assert [what for what, _ in next_commands(collapsed)] == ["look again", "continue"]
    can = dataclasses.replace(collapsed, rollback_to="step-000001")
    assert [what for what, _ in next_commands(can)] == ["look again", "continue", "roll back"]
