"""The rollout loop thread: rollouts run apart from the engine loop, the BackendSession and the event
bus are only used on the engine loop's thread, and every way of ending ends the thread."""

import asyncio
import random
import sys
import threading
import traceback

import pytest

from bench.simulated import SimulatedClient, SimulatedPolicy, simulated_task
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import EventBus, GroupSampled, LogEmitted, StepTrained
from tinker_tui.engine.rollouts.task import Scenario, Task
from tinker_tui.engine.rollouts.trajectory import Trajectory
from tinker_tui.engine.training.pipeline import Pipeline
from tinker_tui.engine.training.rollout_loop import (
    DeadlinePassed,
    EngineLoopPolicy,
    RolloutLoopClosed,
    RolloutThread,
    _Mailbox,
    run_together,
)


async def wait_until(predicate, timeout=10.0):
    """Poll on the engine loop (which must keep running for this to return)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def value(x, delay):
    """A rollout that returns `x` after `delay` seconds."""
    await asyncio.sleep(delay)
    return x


async def test_run_together_gives_each_result_or_error_in_order():
    async def fails():
        raise ValueError("bad rollout")

    async def cancelled_alone():
        asyncio.current_task().cancel()
        await asyncio.sleep(1)

    results = await run_together([value(1, 0.02), fails(), value(3, 0), cancelled_alone()])
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], ValueError)
    assert isinstance(results[3], asyncio.CancelledError)
    assert await run_together([]) == []


async def test_run_together_cancels_what_still_runs_at_its_deadline_and_says_where():
    async def own_timeout():
        raise TimeoutError("the rollout's own")

    results = await run_together([value(1, 0), value(2, 3600), own_timeout()], timeout=0.05)
    assert results[0] == 1
    assert isinstance(results[1], DeadlinePassed)
    waited_in = [f.name for f in traceback.extract_tb(results[1].__context__.__traceback__)]
    assert "value" in waited_in
    assert type(results[2]) is TimeoutError  # not the deadline's


async def test_cancelling_run_together_cancels_every_coroutine_and_waits_for_them():
    ended = []

    async def holds(i):
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.01)  # letting go takes a moment
            ended.append(i)

    caller = asyncio.create_task(run_together([holds(i) for i in range(3)]))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert sorted(ended) == [0, 1, 2]


async def test_runs_a_coroutine_on_its_own_thread_and_loop():
    rollouts = RolloutThread()
    await rollouts.start()
    try:

        async def where():
            return threading.get_ident(), asyncio.get_running_loop()

        ident, loop = await rollouts.run(where())
        assert ident != threading.get_ident()
        assert loop is rollouts.loop and loop is not asyncio.get_running_loop()
        assert rollouts.engine_loop is asyncio.get_running_loop()
    finally:
        assert await rollouts.close()
    assert not rollouts.alive


@pytest.mark.parametrize("after_turn", [False, True])
async def test_a_mailbox_after_turn_wakes_the_receiver_once_the_posting_turn_is_done(after_turn):
    """Posted from the rollout loop, results reach the engine loop after that loop's turn:
    the engine thread is not woken (to take the GIL) while the rest of a burst still runs."""
    engine_loop = asyncio.get_running_loop()
    box = _Mailbox(engine_loop, after_turn=after_turn)
    rollouts = RolloutThread()
    await rollouts.start()
    wake_ups = 0
    original = engine_loop.call_soon_threadsafe

    def counted(*args):  # type: ignore[no-untyped-def]
        nonlocal wake_ups
        wake_ups += 1
        return original(*args)

    delivered: list[int] = []
    woken_during_turn: list[int] = []
    all_in = asyncio.Event()

    def burst() -> None:  # one turn of the rollout loop
        for i in range(5):
            box.post(delivered.append, i)
        woken_during_turn.append(wake_ups)
        box.post(all_in.set)

    engine_loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        assert rollouts.loop is not None
        rollouts.loop.call_soon_threadsafe(burst)
        await asyncio.wait_for(all_in.wait(), 5.0)
    finally:
        engine_loop.call_soon_threadsafe = original  # type: ignore[method-assign]
        assert await rollouts.close()
    assert delivered == [0, 1, 2, 3, 4]
    if after_turn:
        assert woken_during_turn == [0] and wake_ups == 1  # once, after the burst
    else:  # at once, and again if the engine thread delivered part of the burst meanwhile
        assert woken_during_turn[0] >= 1


async def test_a_result_handed_over_as_the_rollout_loop_stops_still_arrives():
    """Its hand-over is deferred to a turn of the rollout loop after the one that stops it:
    the thread's way out still delivers it."""
    rollouts = RolloutThread()
    await rollouts.start()

    async def last() -> int:
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.stop)  # the turn that ends this task is the loop's last
        return 42

    assert await asyncio.wait_for(rollouts.run(last()), 5.0) == 42
    await rollouts.close()
    assert not rollouts.alive


async def test_the_switch_interval_is_lowered_while_any_rollout_thread_runs():
    before = sys.getswitchinterval()
    first, second = RolloutThread(switch_interval=0.001), RolloutThread(switch_interval=0.002)
    await first.start()
    assert sys.getswitchinterval() == pytest.approx(min(before, 0.001))
    await second.start()
    assert sys.getswitchinterval() == pytest.approx(min(before, 0.001))
    await first.close()
    assert sys.getswitchinterval() == pytest.approx(min(before, 0.001))  # second still runs
    await second.close()
    assert sys.getswitchinterval() == before
    await second.close()  # closing twice puts nothing back twice
    assert sys.getswitchinterval() == before


async def test_errors_come_back_to_the_caller():
    rollouts = RolloutThread()
    await rollouts.start()
    try:

        async def fails():
            raise ValueError("bad rollout")

        with pytest.raises(ValueError, match="bad rollout"):
            await rollouts.run(fails())
    finally:
        await rollouts.close()


async def test_cancelling_the_caller_cancels_the_coroutine_there_and_waits_for_it():
    rollouts = RolloutThread()
    await rollouts.start()
    entered, cleaned_up = threading.Event(), threading.Event()

    async def forever():
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # letting go of what it holds takes a while
            cleaned_up.set()
            raise

    caller = asyncio.create_task(rollouts.run(forever()))
    await wait_until(entered.is_set)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    # As if awaited on this loop: the caller goes on only once the coroutine has ended.
    assert cleaned_up.is_set()
    assert await rollouts.close()


async def test_close_cancels_what_still_runs_and_refuses_new_work():
    rollouts = RolloutThread()
    await rollouts.start()
    cancelled = threading.Event()

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    rollouts.submit(forever())
    assert await rollouts.close()
    assert cancelled.is_set() and not rollouts.alive

    async def anything():
        return 1

    with pytest.raises(RolloutLoopClosed):
        await rollouts.run(anything())


async def test_close_leaves_a_thread_blocked_in_synchronous_code_behind():
    rollouts = RolloutThread()
    await rollouts.start()
    gate, entered = threading.Event(), threading.Event()

    async def blocks():
        entered.set()
        gate.wait(30)  # blocking code in a rollout: nothing can interrupt it

    rollouts.submit(blocks())
    await wait_until(entered.is_set)
    # The engine loop keeps running while the rollout loop is blocked.
    await asyncio.sleep(0.02)
    assert await rollouts.close(timeout=0.2) is False
    assert rollouts._thread.daemon  # never keeps the process alive
    gate.set()
    await asyncio.to_thread(rollouts._thread.join, 10)
    assert not rollouts.alive


async def test_a_thread_that_dies_fails_what_was_waiting_for_it():
    rollouts = RolloutThread()
    await rollouts.start()

    async def waits():
        await asyncio.sleep(3600)

    async def exits():
        raise SystemExit(3)  # escapes the loop: the thread ends

    waiting = asyncio.ensure_future(rollouts.run(waits()))
    rollouts.submit(exits())
    with pytest.raises(RolloutLoopClosed, match="SystemExit"):
        await asyncio.wait_for(waiting, 10)
    assert isinstance(rollouts.died, SystemExit)
    with pytest.raises(RolloutLoopClosed):
        rollouts.submit(waits())
    assert await rollouts.close()


class ThreadRecordingPolicy:
    """Records the thread each call runs on."""

    renderer = object()
    version = 7
    end_tokens = [151643, 151645]  # the model's own, besides its renderer's stops

    def __init__(self):
        self.threads = []

    async def sample(
        self,
        prompt,
        num_samples,
        sampling_params,
        *,
        version=None,
        top_logprobs=0,
        constraint=None,
        constraint_prefix="",
    ):
        self.threads.append(threading.get_ident())
        await asyncio.sleep(0)
        return ("response", prompt, num_samples, top_logprobs), version or self.version

    def available_versions(self):
        self.threads.append(threading.get_ident())
        return [5, 6, 7]


async def test_the_server_reaches_the_policy_only_on_the_engine_loop():
    session = ThreadRecordingPolicy()
    rollouts = RolloutThread()
    await rollouts.start()
    try:
        view = rollouts.policy_for_server(session)
        assert isinstance(view, EngineLoopPolicy)

        async def as_the_server():
            sampled = await view.sample("prompt", 3, None, top_logprobs=2)
            versions = view.available_versions()  # waits one hop for the engine loop
            return sampled, versions, view.version, view.renderer, view.end_tokens

        sampled, versions, version, renderer, ends = await rollouts.run(as_the_server())
    finally:
        await rollouts.close()
    assert sampled == (("response", "prompt", 3, 2), 7)
    assert versions == [5, 6, 7] and version == 7 and renderer is session.renderer
    assert list(ends) == session.end_tokens
    assert session.threads == [threading.get_ident()] * 2


def make_pipeline(rollouts, task=None, **overrides):
    session = SimulatedPolicy()
    client = SimulatedClient(session)
    config = RunConfig(
        max_steps=10, group_size=4, groups_per_step=2, rollout_workers=4, checkpoint_every=0
    ).with_overrides(overrides)
    bus = EventBus()
    events = []
    bus.subscribe(lambda e: events.append((threading.get_ident(), e)))
    pipeline = Pipeline(
        config=config,
        task=task or simulated_task(),
        session=session,
        client_factory=lambda: client,
        model_name="m",
        bus=bus,
        clock=FakeClock(),
        rng=random.Random(0),
        rollouts=rollouts,
    )
    return pipeline, session, events


async def test_pipeline_rolls_out_on_the_thread_and_publishes_on_the_engine_loop():
    rollout_threads = set()
    base = simulated_task()

    async def rollout(client, model, scenario):
        rollout_threads.add(threading.get_ident())
        return await base.rollout(client, model, scenario)

    task = Task(name="t", scenarios=base.scenarios, rollout=rollout)
    rollouts = RolloutThread()
    await rollouts.start()
    try:
        pipeline, session, events = make_pipeline(rollouts, task=task)
        assert await pipeline.run() == "completed"
    finally:
        assert await rollouts.close()
    assert rollout_threads and threading.get_ident() not in rollout_threads
    assert {ident for ident, _ in events} == {threading.get_ident()}
    steps = [e for _, e in events if isinstance(e, StepTrained)]
    assert [e.step for e in steps] == list(range(1, 11))
    sampled = [e for _, e in events if isinstance(e, GroupSampled)]
    assert sampled and all(len(e.trajectories) == 4 for e in sampled)


async def test_a_rollout_blocking_its_loop_does_not_block_the_engine_or_a_stop():
    gate, entered = threading.Event(), threading.Event()
    base = simulated_task()

    async def rollout(client, model, scenario):
        if scenario.id == "s3":
            entered.set()
            gate.wait(30)  # synchronous: blocks the rollout loop, not the engine's
        return await base.rollout(client, model, scenario)

    task = Task(name="t", scenarios=base.scenarios, rollout=rollout)
    rollouts = RolloutThread()
    await rollouts.start()
    pipeline, _, events = make_pipeline(rollouts, task=task, max_steps=10_000)
    running = asyncio.create_task(pipeline.run())
    try:
        await wait_until(entered.is_set)  # the engine loop runs while the rollouts block
        pipeline.pause()
        pipeline.stop("test")
        assert await asyncio.wait_for(running, 10) == "stopped"
        assert await rollouts.close(timeout=0.2) is False  # still blocked: left behind
    finally:
        gate.set()
        await asyncio.to_thread(rollouts._thread.join, 10)
    assert not rollouts.alive
    states = [e.state for _, e in events if type(e).__name__ == "RunStateChanged"]
    assert states[-2:] == ["paused", "stopping"]


async def test_pipeline_stops_when_the_rollout_thread_dies():
    base = simulated_task()
    calls = {"n": 0}

    async def rollout(client, model, scenario):
        calls["n"] += 1
        if calls["n"] == 20:
            raise SystemExit("a rollout called sys.exit")
        return await base.rollout(client, model, scenario)

    task = Task(name="t", scenarios=base.scenarios, rollout=rollout)
    rollouts = RolloutThread()
    await rollouts.start()
    pipeline, _, events = make_pipeline(rollouts, task=task, max_steps=10_000)
    assert await asyncio.wait_for(pipeline.run(), 10) == "stopped"
    assert await rollouts.close()
    errors = [e.message for _, e in events if isinstance(e, LogEmitted) and e.level == "error"]
    assert any("rollouts cannot run any more" in m and "SystemExit" in m for m in errors)


async def test_evaluation_runs_on_the_rollout_thread():
    threads = set()
    base = simulated_task(eval_size=3)

    async def rollout(client, model, scenario):
        threads.add(threading.get_ident())
        return Trajectory.from_choices(
            [await client.chat.completions.create(model=model, messages=[])], reward=1.0
        )

    task = Task(
        name="t",
        scenarios=base.scenarios,
        rollout=rollout,
        eval_scenarios=lambda: [Scenario(id=f"e{i}", data=i) for i in range(3)],
    )
    rollouts = RolloutThread()
    await rollouts.start()
    try:
        pipeline, _, events = make_pipeline(rollouts, task=task, max_steps=4, eval_at_start=True)
        await pipeline.run()
    finally:
        await rollouts.close()
    evals = [e for _, e in events if type(e).__name__ == "EvalCompleted"]
    assert evals and evals[0].metrics["eval/num_scenarios"] == 3.0
    assert threads and threading.get_ident() not in threads


async def test_close_runs_before_on_the_loop_then_cancels_the_rest():
    rollouts = RolloutThread()
    await rollouts.start()
    order = []

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            order.append("cancelled")
            raise

    async def before():
        order.append(("before", threading.get_ident()))

    rollouts.submit(forever())
    assert await rollouts.close(before=before)
    assert order == [("before", rollouts._thread.ident), "cancelled"]


# ---------------------------------------------------------------- whole runs, local backend
def example_task(rollout):
    from tinker_tui.examples.yes_no_maybe import TASK

    return Task(name=TASK.name, scenarios=TASK.scenarios, rollout=rollout)


def example_config(**overrides):
    return RunConfig(
        max_steps=2, warmup_steps=0, checkpoint_every=0, group_size=4, groups_per_step=2
    ).with_overrides(overrides)


async def test_a_run_rolls_out_and_serves_on_its_thread_and_ends_it(tmp_path):
    from tinker_tui.engine.run import Run
    from tinker_tui.examples.yes_no_maybe import rollout as example_rollout

    threads = set()

    async def rollout(client, model, scenario):
        threads.add(threading.get_ident())
        return await example_rollout(client, model, scenario)

    switch_interval = sys.getswitchinterval()
    run = Run(
        task=example_task(rollout),
        config=example_config(),
        backend="local",
        db_path=tmp_path / "runs.db",
    )
    published_on = set()
    run.events.subscribe(lambda e: published_on.add(threading.get_ident()))
    assert await asyncio.wait_for(run.run(), 300) == "completed"
    assert threads and threading.get_ident() not in threads
    assert published_on == {threading.get_ident()}
    assert not run.rollouts.alive
    assert sys.getswitchinterval() == switch_interval


async def test_a_run_stops_and_ends_while_a_rollout_blocks_its_loop(tmp_path, monkeypatch):
    from tinker_tui.engine import run as run_module
    from tinker_tui.engine.run import Run
    from tinker_tui.examples.yes_no_maybe import rollout as example_rollout

    # The run waits this long for the blocked loop before it leaves it behind (5 s in use)
    monkeypatch.setattr(run_module, "CLOSE_TIMEOUT", 0.5)

    gate, entered = threading.Event(), threading.Event()

    async def rollout(client, model, scenario):
        if not entered.is_set():
            entered.set()
            gate.wait(60)  # synchronous code in a rollout: its whole loop waits
        return await example_rollout(client, model, scenario)

    run = Run(
        task=example_task(rollout),
        config=example_config(max_steps=100),
        backend="local",
        db_path=tmp_path / "runs.db",
    )
    logs = []
    run.events.subscribe(lambda e: logs.append(e) if isinstance(e, LogEmitted) else None)
    running = asyncio.create_task(run.run())
    try:
        await wait_until(entered.is_set, timeout=120)
        run.control.stop("test")  # the engine loop still answers
        assert await asyncio.wait_for(running, 60) == "stopped"
    finally:
        gate.set()
    assert any(
        e.level == "warning"
        and "did not end within 0.5 s" in e.message
        and "left behind" in e.message
        for e in logs
    )
    await asyncio.to_thread(run.rollouts._thread.join, 30)
    assert not run.rollouts.alive


async def test_calls_posted_before_the_loop_gets_to_them_arrive_in_order_with_one_wake_up():
    loop = asyncio.get_running_loop()
    box = _Mailbox(loop)
    wake_ups = []
    real = loop.call_soon_threadsafe

    def counted(callback, *args):
        wake_ups.append(callback)
        return real(callback, *args)

    loop.call_soon_threadsafe = counted
    got = []
    try:
        # Posted from another thread while this loop is busy (blocked in join): one wake-up.
        poster = threading.Thread(target=lambda: [box.post(got.append, i) for i in range(50)])
        poster.start()
        poster.join()
        await asyncio.sleep(0.05)
        assert got == list(range(50)) and len(wake_ups) == 1
        box.post(got.append, 50)  # the next one wakes it again
        await asyncio.sleep(0.05)
        assert got[-1] == 50 and len(wake_ups) == 2
    finally:
        del loop.call_soon_threadsafe
