"""The evaluator (engine.training.evaluator): one evaluation at a time, a request made during one
runs after it, and the final evaluation reuses one of its step or finishes an older one first.
The rollouts are held by a gate (pipeline timing only); the pipeline tests run it whole."""

from __future__ import annotations

import asyncio

import pytest

from bench.simulated import simulated_task
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import EvalCompleted, EventBus
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.rollouts.trajectory import SampledTurn, Trajectory
from tinker_tui.engine.training.eval_protocol import EvalProtocol
from tinker_tui.engine.training.evaluator import Evaluator
from tinker_tui.engine.training.rollout_loop import SameLoop


class Gated:
    """An evaluator whose rollouts wait for `gate` and then fail (no model here)."""

    def __init__(self, eval_size: int = 3) -> None:
        self.gate = asyncio.Event()
        self.started: list[tuple[int, int]] = []  # (step, version) of each evaluation
        self.at = (0, 0)
        self.events: list[object] = []
        bus = EventBus()
        bus.subscribe(self.events.append)
        self.evaluator = Evaluator(
            task=simulated_task(eval_size=eval_size),
            client_factory=lambda: None,
            rollouts=SameLoop(),
            roll_out=self.roll_out,
            bus=bus,
            clock=FakeClock(),
            now_at=lambda: self.at,
            stopping=lambda: False,
        )

    async def roll_out(self, client, scenarios, defaults):
        self.started.append(self.at)
        await self.gate.wait()
        return [RuntimeError("no model")] * len(scenarios), ()

    def evals(self) -> list[EvalCompleted]:
        return [e for e in self.events if isinstance(e, EvalCompleted)]

    async def until(self, done, seconds: float = 5.0) -> None:
        async with asyncio.timeout(seconds):
            while not done():
                await asyncio.sleep(0.005)


async def test_one_evaluation_at_a_time_and_a_request_during_one_runs_after_it():
    gated = Gated()
    evaluator = gated.evaluator
    evaluator.ask()
    evaluator.start_if_due()
    await gated.until(lambda: gated.started)
    gated.at = (4, 5)
    evaluator.ask()
    evaluator.start_if_due()  # one is running: this request waits for it
    await asyncio.sleep(0.05)
    assert gated.started == [(0, 0)] and evaluator.requested
    gated.gate.set()
    await gated.until(lambda: len(gated.evals()) == 2)
    assert [(e.step, e.policy_version) for e in gated.evals()] == [(0, 0), (4, 5)]
    assert gated.evals()[0].metrics[keys.EVAL_ERRORS] == 3.0
    assert not evaluator.requested


async def test_the_final_evaluation_waits_for_one_of_its_step_and_finishes_an_older_one():
    gated = Gated()
    evaluator = gated.evaluator
    gated.at = (6, 6)
    evaluator.ask()
    evaluator.start_if_due()
    await gated.until(lambda: gated.started)
    final = asyncio.create_task(evaluator.final())
    await asyncio.sleep(0.05)
    gated.gate.set()
    await final
    assert [e.step for e in gated.evals()] == [6]  # the one running was of this step

    older = Gated()
    older.at = (3, 3)
    older.evaluator.ask()
    older.evaluator.start_if_due()
    await older.until(lambda: older.started)
    older.at = (8, 9)
    final = asyncio.create_task(older.evaluator.final())
    await asyncio.sleep(0.05)
    assert older.started == [(3, 3)]  # the final one waits for step 3's to finish
    older.gate.set()
    await final
    # step 3's (a short run's eval_at_start baseline, say) is kept, then the final step's
    assert [(e.step, e.policy_version) for e in older.evals()] == [(3, 3), (8, 9)]


async def test_a_task_without_eval_scenarios_is_never_due():
    gated = Gated(eval_size=0)
    gated.evaluator.ask()
    gated.evaluator.start_if_due()
    assert not gated.evaluator.requested and gated.evaluator.running() is None


async def test_k_samples_of_each_scenario_give_pass_at_k_under_the_protocols_settings():
    """With `eval_samples` k each scenario is rolled out k times, with the protocol's
    sampling settings; pass@k is counted per scenario, and the protocol says k."""
    asked = []

    async def roll_out(client, scenarios, defaults):
        asked.append((scenarios, defaults))
        # e0 always succeeds, e1 once in three
        rewards = {"e0": [1.0] * 3, "e1": [0.0, 1.0, 0.0]}
        taken = {"e0": 0, "e1": 0}
        results = []
        for s in scenarios:
            turn = SampledTurn((0,), (1,), (0.0,), 2)
            results.append(Trajectory((turn,), reward=rewards[s.id][taken[s.id]]))
            taken[s.id] += 1
        return results, ()

    events = []
    bus = EventBus()
    bus.subscribe(events.append)
    protocol = EvalProtocol.build("role_colon", temperature=0.0, max_tokens=5, k=3)
    evaluator = Evaluator(
        task=simulated_task(eval_size=2),
        client_factory=lambda: None,
        rollouts=SameLoop(),
        roll_out=roll_out,
        bus=bus,
        clock=FakeClock(),
        now_at=lambda: (2, 2),
        stopping=lambda: False,
        protocol=lambda: protocol,
    )
    await evaluator.evaluate(2, 2)
    ((scenarios, defaults),) = asked
    assert [s.id for s in scenarios] == ["e0"] * 3 + ["e1"] * 3
    assert (defaults.temperature, defaults.pin_temperature) == (0.0, True)
    assert (defaults.max_tokens, defaults.cap_max_tokens) == (5, True)
    (done,) = [e for e in events if isinstance(e, EvalCompleted)]
    assert done.protocol == protocol.as_dict() and done.protocol["k"] == 3
    assert done.metrics[keys.EVAL_NUM_SCENARIOS] == 2
    assert done.metrics[keys.EVAL_REWARD_MEAN] == pytest.approx(4 / 6)
    assert done.metrics[keys.EVAL_PASS_AT_1] == pytest.approx(4 / 6)
    assert done.metrics[keys.EVAL_PASS_AT_K] == 1.0  # both solved within 3 samples
