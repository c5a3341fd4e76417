"""Pipeline behaviour with a simulated policy and client (no torch, no HTTP), so pacing,
staleness, pause/resume, checkpoints, errors and stop can be checked quickly and exactly."""

import asyncio
import random

import pytest
from waiting import wait_until

from bench.simulated import SimulatedClient, SimulatedPolicy, simulated_task
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import (
    CheckpointSaved,
    EventBus,
    GroupDiscarded,
    GroupSampled,
    StepTrained,
)
from tinker_tui.engine.rollouts.trajectory import Trajectory
from tinker_tui.engine.training.pipeline import Pipeline


def make_pipeline(session=None, client=None, task=None, clock=None, **overrides):
    session = session or SimulatedPolicy()
    client = client or SimulatedClient(session)
    config = RunConfig(
        max_steps=20, group_size=4, groups_per_step=2, rollout_workers=4, checkpoint_every=0
    ).with_overrides(overrides)
    bus = EventBus()
    events = []
    bus.subscribe(events.append)
    pipeline = Pipeline(
        config=config,
        task=task or simulated_task(),
        session=session,
        client_factory=lambda: client,
        model_name="m",
        bus=bus,
        clock=clock or FakeClock(),
        rng=random.Random(0),
    )
    return pipeline, session, client, events


@pytest.mark.parametrize("max_off", [0, 1, 2])
async def test_pacing_keeps_every_trained_group_within_the_bound(max_off):
    pipeline, session, _, events = make_pipeline(max_steps_off_policy=max_off)
    assert await pipeline.run() == "completed"
    trained_at = 0
    for batch in session.trained_batches:
        assert all(trained_at - v <= max_off for v in batch), (trained_at, batch)
        trained_at += 1
    assert not [e for e in events if isinstance(e, GroupDiscarded) and e.reason == "stale"]
    staleness = [e.metrics["async/staleness_max"] for e in events if isinstance(e, StepTrained)]
    assert max(staleness) <= max_off
    if max_off:
        assert max(staleness) >= 1, "sampling should overlap training"


async def test_group_still_stale_at_dequeue_is_discarded_and_counted():
    session = SimulatedPolicy()
    pipeline, _, _, events = make_pipeline(session=session, max_steps_off_policy=1)
    from tinker_tui.engine.rollouts.trajectory import TrajectoryGroup

    old = TrajectoryGroup(
        group_id=99,
        scenario_id="old",
        started_at=0,
        finished_at=0,
        trajectories=(
            Trajectory.from_choices(
                [
                    {
                        "prompt_token_ids": [1],
                        "token_ids": [2],
                        "token_logprobs": [-0.1],
                        "policy_version": 0,
                    }
                ],
                reward=1.0,
            ),
        ),
    )
    session.version = 5
    pipeline._queue.put_nowait(old)
    await pipeline.run()
    stale = [e for e in events if isinstance(e, GroupDiscarded) and e.reason == "stale"]
    assert [e.group_id for e in stale] == [99]
    assert stale[0].trainer_version == 5 and stale[0].policy_version == 0


async def test_pause_stops_new_rollouts_and_resume_restarts_them():
    session = SimulatedPolicy()
    client = SimulatedClient(session)
    pipeline, _, _, events = make_pipeline(session=session, client=client, max_steps=10_000)
    task = asyncio.create_task(pipeline.run())
    await wait_until(lambda: client.started, "a rollout to start")
    pipeline.pause()
    await asyncio.sleep(0.05)  # in-flight rollouts finish
    started_while_paused = client.started
    await asyncio.sleep(0.2)
    assert client.started == started_while_paused
    pipeline.resume()
    await wait_until(lambda: client.started > started_while_paused, "a rollout after resume")
    pipeline.stop()
    assert await task == "stopped"


async def test_checkpoint_now_is_written_after_the_current_step():
    pipeline, session, _, events = make_pipeline(max_steps=10_000)
    task = asyncio.create_task(pipeline.run())
    await wait_until(lambda: any(isinstance(e, StepTrained) for e in events), "a step")
    pipeline.request_checkpoint()
    await wait_until(lambda: any(isinstance(e, CheckpointSaved) for e in events), "a checkpoint")
    saved = next(e for e in events if isinstance(e, CheckpointSaved))
    trained = [e.step for e in events if isinstance(e, StepTrained)]
    assert saved.step in trained and saved.kind == "state"
    pipeline.stop()
    await task


async def test_stop_finishes_with_a_final_checkpoint():
    pipeline, session, _, events = make_pipeline(max_steps=10_000)
    task = asyncio.create_task(pipeline.run())
    await wait_until(lambda: any(isinstance(e, StepTrained) for e in events), "a step")
    pipeline.stop("test")
    assert await asyncio.wait_for(task, 5) == "stopped"
    assert session.saved[-1] == f"step-{pipeline.step:06d}"


async def test_rollout_errors_are_counted_and_the_run_goes_on():
    # every member must succeed: a failure discards its group
    pipeline, _, _, events = make_pipeline(
        task=simulated_task(fail_every=7), max_steps=5, min_group_size=4
    )
    assert await pipeline.run() == "completed"
    errors = [e for e in events if isinstance(e, GroupDiscarded) and e.reason == "error"]
    assert errors and "tool crashed" in errors[0].detail
    assert any(isinstance(e, GroupSampled) for e in events)
    steps = [e for e in events if isinstance(e, StepTrained)]
    assert sum(e.metrics["discarded/error"] for e in steps) == len(
        [e for e in errors if e.step <= 5]
    )


async def test_live_knobs_take_effect_and_are_recorded_as_commands():
    from tinker_tui.engine.events import CommandReceived

    pipeline, session, client, events = make_pipeline(max_steps=10_000)
    task = asyncio.create_task(pipeline.run())
    await wait_until(lambda: any(isinstance(e, StepTrained) for e in events), "a step")
    pipeline.set_knob("learning_rate", 1e-4)
    pipeline.set_knob("temperature", 0.5)
    pipeline.set_knob("rollout_workers", 1)
    pipeline.set_knob("max_steps_off_policy", 0)
    with pytest.raises(ValueError, match="between 0 and 2"):
        pipeline.set_knob("temperature", 5)
    with pytest.raises(ValueError, match="cannot be changed live"):
        pipeline.set_knob("group_size", 3)
    step_after = pipeline.step + 1
    await wait_until(lambda: pipeline.step >= step_after + 3, "three more steps")
    pipeline.stop()
    await task
    assert pipeline.sampling_defaults.temperature == 0.5
    later = [e for e in events if isinstance(e, StepTrained) and e.step > step_after]
    assert later and all(e.metrics["optim/lr"] == 1e-4 for e in later)
    assert all(e.metrics["async/staleness_max"] == 0 for e in later[1:])
    assert sum(not w.done() for w in pipeline._workers.values()) == 0
    sets = [e.args["name"] for e in events if isinstance(e, CommandReceived) and e.command == "set"]
    assert sets == ["learning_rate", "temperature", "rollout_workers", "max_steps_off_policy"]


async def test_eval_every_and_eval_now_publish_eval_results():
    from tinker_tui.engine.events import EvalCompleted

    task = simulated_task(eval_size=5)
    pipeline, _, _, events = make_pipeline(task=task, max_steps=6, eval_every=3, eval_at_start=True)
    assert await pipeline.run() == "completed"
    evals = [e for e in events if isinstance(e, EvalCompleted)]
    assert [e.step for e in evals][:1] == [0]
    assert {3} <= {e.step for e in evals}
    assert all(e.metrics["eval/num_scenarios"] == 5 for e in evals)


async def test_an_eval_is_stamped_with_the_step_it_was_due_at():
    """The evaluator's task starts a loop turn after the step that asked for it; steps with
    nothing to train (every reward equal, as once a run has converged) do not wait on the
    backend, so the next ones came first: `eval_every` 3 read 4, 7, 10."""
    from tinker_tui.engine.events import EvalCompleted

    pipeline, _, _, events = make_pipeline(
        task=simulated_task(eval_size=2, reward=lambda s: 1.0),
        max_steps=12,
        eval_every=3,
        eval_at_start=False,
    )
    assert await pipeline.run() == "completed"
    evals = [e for e in events if isinstance(e, EvalCompleted)]
    trained = {e.step: e.policy_version for e in events if isinstance(e, StepTrained)}
    assert [e.step for e in evals] == [3, 6, 9, 12]
    assert all(e.policy_version == trained[e.step] for e in evals)


async def test_error_rate_pauses_the_run_with_a_reason():
    from tinker_tui.engine.events import RunStateChanged

    pipeline, _, _, events = make_pipeline(
        task=simulated_task(fail_every=1), max_steps=5, health_window=8
    )
    task = asyncio.create_task(pipeline.run())
    await wait_until(lambda: pipeline.paused, "the pause")
    reason = [e.reason for e in events if isinstance(e, RunStateChanged) and e.state == "paused"]
    assert reason and "rollout errors: 100% of the last 32 rollouts (8 groups) failed" in reason[0]
    assert reason[0].endswith("; the last: RuntimeError: tool crashed")  # why, at once
    pipeline.stop()
    assert await task == "stopped"


async def test_collapse_pauses_but_convergence_does_not():
    from tinker_tui.engine.events import RunStateChanged

    # Every group earns the same reward from the start: nothing tells a reward that is always
    # 1 from one always 0 (engine.metrics.health), so neither pauses.
    for reward in (1.0, 0.0):
        uniform, _, _, _ = make_pipeline(
            task=simulated_task(reward=lambda s, r=reward: r), max_steps=12, health_window=8
        )
        assert await asyncio.wait_for(uniform.run(), 30) == "completed"
    # Rewards vary at first, then every group earns the best: converged, keep going.
    converged, _, _, _ = make_pipeline(
        task=simulated_task(reward=lambda s: (s.data % 2) if s.data < 16 else 1.0),
        max_steps=12,
        health_window=8,
    )
    assert await asyncio.wait_for(converged.run(), 30) == "completed"
    # Rewards vary at first, then every group gets the same lower reward: no learning
    # signal, pause; the same fall to far below the best: a collapse, pause (engine.metrics.health).
    # (The collapse is read from three steps, six groups here (collapse_groups); the
    # no-signal pause from a window of sixteen groups, which sampling fills ahead of
    # training.)
    for low, words in (
        (
            0.4,
            "no learning signal: 94% of the last 16 groups had equal "
            "rewards below the best seen (1)",
        ),
        (0.0, "collapsed at step 9 (best 0.500 at step 1)"),
    ):
        task_ = simulated_task(reward=lambda s, low=low: (s.data % 2) if s.data < 16 else low)
        pipeline, _, _, events = make_pipeline(
            task=task_, max_steps=10_000, health_window=16, collapse_groups=6, checkpoint_every=0
        )
        task = asyncio.create_task(pipeline.run())
        await wait_until(lambda pipeline=pipeline: pipeline.paused, "the pause")
        reason = [
            e.reason for e in events if isinstance(e, RunStateChanged) and e.state == "paused"
        ]
        assert reason[0].startswith(words), reason
        pipeline.stop()
        await task


async def test_throughput_is_reported_with_a_verdict():
    from tinker_tui.engine.events import ThroughputMeasured

    session = SimulatedPolicy(train_seconds=0.05)
    from tinker_tui.engine.clock import SystemClock

    pipeline, _, _, events = make_pipeline(session=session, max_steps=10_000, clock=SystemClock())
    pipeline.report_interval = 0.05
    task = asyncio.create_task(pipeline.run())
    await wait_until(
        lambda: len([e for e in events if isinstance(e, ThroughputMeasured)]) >= 4,
        "four throughput reports",
    )
    pipeline.stop()
    await task
    last = [e for e in events if isinstance(e, ThroughputMeasured)][-1]
    assert last.verdict.startswith("trainer-bound")
    assert last.trainer_busy > 0.5
    assert last.loop_lag_p99 >= 0.0


async def test_min_batch_trains_on_what_is_queued_and_keeps_the_bound():
    session = SimulatedPolicy(train_seconds=0.01)
    client = SimulatedClient(session, sample_seconds=0.004)
    pipeline, _, _, events = make_pipeline(
        session=session, client=client, groups_per_step=4, min_groups_per_step=1, max_steps=30
    )
    assert await pipeline.run() == "completed"
    sizes = [len(b) for b in session.trained_batches]
    assert min(sizes) >= 1 and max(sizes) <= 4
    assert not [e for e in events if isinstance(e, GroupDiscarded) and e.reason == "stale"]
    for trained_at, batch in enumerate(session.trained_batches):
        assert all(trained_at - v <= 1 for v in batch)


async def test_every_metric_key_the_pipeline_writes_is_named_in_metric_keys():
    from tinker_tui.engine.events import DISCARD_REASONS, EvalCompleted
    from tinker_tui.engine.metrics import metric_keys

    named = {v for k, v in vars(metric_keys).items() if k.isupper() and isinstance(v, str)}
    named |= {metric_keys.discarded(reason) for reason in DISCARD_REASONS}
    pipeline, _, _, events = make_pipeline(
        task=simulated_task(eval_size=3), max_steps=4, eval_every=2
    )
    assert await pipeline.run() == "completed"
    written = {k for e in events if isinstance(e, StepTrained | EvalCompleted) for k in e.metrics}
    assert written and written <= named
    # what the clients read is written
    assert {
        metric_keys.REWARD_MEAN,
        metric_keys.EVAL_REWARD_MEAN,
        metric_keys.STEP_TIME,
        metric_keys.STALENESS_MEAN,
        metric_keys.ROLLOUTS_PER_S,
    } <= written
