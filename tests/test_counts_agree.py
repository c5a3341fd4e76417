"""Counts that the dashboard, `show` and the headless line must agree on: converged groups
(equal rewards at the best seen) are not discards; equal rewards below it are "no signal"
(headless counted every zero-variance group as discarded: `0/11966/0` where the dashboard
said "0.0% of 12,000 groups discarded")."""

import io

from waiting import wait_until

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.headless import HeadlessReporter
from tinker_tui.app.widgets.discarded import discarded_subtitle
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import (
    GroupDiscarded,
    GroupSampled,
    RunStarted,
    StepTrained,
    TrajectorySummary,
)


def _events():
    """Step 1: a group with different rewards (0.5, 1.0); step 2: two groups all 1.0
    (converged); step 3: one group all 0.5 (below the best: no signal)."""
    events = [
        RunStarted(
            time=0.0,
            run_id="r",
            name="t",
            backend="local",
            base_model="m",
            max_steps=3,
            start_step=0,
        )
    ]
    plan = [(1, [(0, (0.5, 1.0))]), (2, [(1, (1.0, 1.0)), (2, (1.0, 1.0))]), (3, [(3, (0.5, 0.5))])]
    t = 0.0
    for step, groups in plan:
        for group_id, rewards in groups:
            t += 1
            events.append(
                GroupSampled(
                    time=t,
                    group_id=group_id,
                    scenario_id="s",
                    policy_version=step - 1,
                    num_trajectories=2,
                    num_tokens=4,
                    reward_mean=sum(rewards) / 2,
                    trajectories=tuple(
                        TrajectorySummary(reward=r, policy_version=step - 1, num_tokens=2)
                        for r in rewards
                    ),
                )
            )
        for group_id, rewards in groups:
            if len(set(rewards)) == 1:
                t += 1
                events.append(
                    GroupDiscarded(
                        time=t,
                        group_id=group_id,
                        scenario_id="s",
                        reason="zero_variance",
                        policy_version=step - 1,
                        trainer_version=step - 1,
                        num_tokens=4,
                        step=step,
                    )
                )
        t += 1
        events.append(
            StepTrained(
                time=t,
                step=step,
                policy_version=step,
                metrics={
                    "reward/mean": 1.0,
                    "discarded/zero_variance": float(sum(len(set(r)) == 1 for _, r in groups)),
                },
                group_ids=tuple(g for g, _ in groups),
            )
        )
    return events


def test_headless_and_the_dashboard_count_converged_and_no_signal_groups_alike():
    out = io.StringIO()
    reporter = HeadlessReporter(out)
    model = DashboardState(FakeClock())
    for event in _events():
        reporter.handle(event)
        model.apply(event)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("step ")]
    assert "discarded stale/no-signal/error 0/0/0  converged 2  " in lines[1]
    assert "discarded stale/no-signal/error 0/1/0  converged 2  " in lines[2]
    assert (model.converged_groups, model.no_signal_groups) == (2, 1)
    assert discarded_subtitle(model) == "25.0% of 4 groups discarded"  # the no-signal one


def test_the_eta_holds_steady_over_an_async_runs_bursts():
    """Batches trained back to back, then a wait for rollouts: an ETA from ten steps of one
    burst jumped (14:15, then 06:08)."""
    from tinker_tui.app.dashboard_state import ETA_SPAN
    from tinker_tui.app.view_maths import eta_seconds

    times, t = [], 0.0
    for _ in range(40):  # bursts of 8 steps 0.05 s apart, then 10 s of sampling
        for _ in range(8):
            t += 0.05
            times.append(t)
        t += 10.0
    true_pace = (times[-1] - times[0]) / (len(times) - 1)
    etas = [
        eta_seconds(times[:n], n, 1000, min_span=ETA_SPAN) / (1000 - n)
        for n in range(160, len(times))
    ]
    assert max(etas) / min(etas) < 1.5 and abs(etas[-1] / true_pace - 1) < 0.25
    jumpy = [eta_seconds(times[:n], n, 1000) / (1000 - n) for n in range(160, len(times))]
    assert max(jumpy) / min(jumpy) > 1.8  # what the ten-step window gave: 2x jumps


async def test_a_run_paused_during_its_start_up_starts_paused():
    """It said "running" when training began, so the pause counted as working time and the
    run-average rollouts/s read a fraction of the live rate."""
    import asyncio
    import random

    from bench.simulated import SimulatedClient, SimulatedPolicy, simulated_task
    from tinker_tui.engine.config import RunConfig
    from tinker_tui.engine.events import EventBus, RunStateChanged
    from tinker_tui.engine.training.pipeline import Pipeline

    session = SimulatedPolicy()
    bus, events = EventBus(), []
    bus.subscribe(events.append)
    pipeline = Pipeline(
        config=RunConfig(max_steps=3, group_size=2, groups_per_step=1),
        task=simulated_task(),
        session=session,
        client_factory=lambda: SimulatedClient(session),
        model_name="m",
        bus=bus,
        clock=FakeClock(),
        rng=random.Random(0),
    )
    pipeline.pause("before training")
    running = asyncio.ensure_future(pipeline.run())
    await wait_until(
        lambda: len([e for e in events if isinstance(e, RunStateChanged)]) >= 2,
        "the paused run's two states",
    )
    states = [e.state for e in events if isinstance(e, RunStateChanged)]
    assert states == ["paused", "paused"] and pipeline.step == 0
    pipeline.resume()
    assert await asyncio.wait_for(running, 10) == "completed"
