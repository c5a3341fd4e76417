"""tinker-cookbook RL environments as tasks (`Task.from_cookbook`): the cookbook's own Env /
EnvGroupBuilder / RLDataset classes driven by the engine, sampling tokens straight from the
backend (no policy server request), on the local backend and through the real tinker SDK
against the service double."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import sqlite3
from collections.abc import Sequence

import chz
import pytest
import tinker
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, RLDataset, RLDatasetBuilder, StepResult
from tinker_double import TinkerDouble

from tinker_tui import Task
from tinker_tui.app.cli import main
from tinker_tui.app.task_loader import layered_config, load_task
from tinker_tui.engine.events import EvalCompleted, GroupSampled, StepTrained
from tinker_tui.engine.local import DEFAULT_BASE_MODEL
from tinker_tui.engine.rollouts.task import TaskError, check_task
from tinker_tui.engine.rollouts.trajectory import TrajectoryError, trajectory_to_datum_arrays
from tinker_tui.engine.run import Run
from tinker_tui.examples.cookbook_yes_no_maybe import embedded_renderer

RENDERER = embedded_renderer()


class TwoTurnEnv(Env):
    """Asks twice; the second prompt extends the first turn's tokens (a multi-turn env).
    Reward per step: 0.25 for a non-empty answer; logs what was said."""

    def __init__(self) -> None:
        self.messages = [{"role": "user", "content": "Say a word."}]
        self.turn = 0
        self.seen: list[list[int]] = []

    async def initial_observation(self):
        prompt = RENDERER.build_generation_prompt(self.messages)
        self.seen.append(prompt.to_ints())
        return prompt, RENDERER.get_stop_sequences()

    async def step(self, action, *, extra=None):
        message, _ = RENDERER.parse_response(action)
        self.turn += 1
        self.messages += [message, {"role": "user", "content": "Again."}]
        done = self.turn == 2
        prompt = RENDERER.build_generation_prompt(self.messages)
        if not done:
            self.seen.append(prompt.to_ints())
        return StepResult(
            reward=0.25 if str(message["content"]).strip() else 0.0,
            episode_done=done,
            next_observation=tinker.ModelInput.empty() if done else prompt,
            next_stop_condition=RENDERER.get_stop_sequences(),
            metrics={"turn": self.turn, "stop/x": 1},
            logs={f"said{self.turn}": str(message["content"]).strip()},
        )


@dataclasses.dataclass
class RankedGroup(EnvGroupBuilder):
    """Makes `size` envs per call; the group reward ranks members by order (0, 1, 2...)."""

    size: int
    made: list[list[TwoTurnEnv]] = dataclasses.field(default_factory=list)
    cleaned: int = 0

    async def make_envs(self) -> Sequence[Env]:
        envs = [TwoTurnEnv() for _ in range(self.size)]
        self.made.append(envs)
        return envs

    async def compute_group_rewards(self, trajectory_group, env_group):
        return [(float(i), {"rank": i}) for i in range(len(trajectory_group))]

    async def cleanup(self) -> None:
        self.cleaned += 1


class Groups(RLDataset):
    def __init__(self, builders: list[RankedGroup], per_batch: int) -> None:
        self.builders, self.per_batch = builders, per_batch

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return self.builders[index * self.per_batch : (index + 1) * self.per_batch]

    def __len__(self) -> int:
        return len(self.builders) // self.per_batch


@chz.chz
class RankedBuilder(RLDatasetBuilder):
    group_size: int = 3

    async def __call__(self):
        return Groups([RankedGroup(2) for _ in range(4)], 2), Groups([RankedGroup(1)], 1)


def test_from_cookbook_reads_the_builder_train_and_test_sets_and_its_group_size():
    task = check_task(Task.from_cookbook(RankedBuilder(), settings={"max_steps": 3}))
    assert task.samples_tokens and task.name == "Ranked"
    assert task.settings == {"group_size": 3, "max_steps": 3}
    assert [s.id for s in task.scenarios(None)] == ["0.0", "0.1", "1.0", "1.1"]
    assert [s.id for s in task.eval_scenarios()] == ["eval-0.0"]


@pytest.mark.parametrize("bad", [42, "gsm8k"])
def test_from_cookbook_refuses_what_is_not_a_dataset_builder(bad):
    with pytest.raises(TaskError, match="takes a tinker_cookbook RLDatasetBuilder"):
        Task.from_cookbook(bad)


async def run_local(task, tmp_path, **overrides):
    config = layered_config(task, "local").with_overrides(
        {"checkpoint_every": 0, "warmup_steps": 0, **overrides}
    )
    run = Run(task=task, config=config, backend="local", db_path=tmp_path / "runs.db")
    events = []
    run.events.subscribe(events.append)
    status = await run.run()
    return run, status, events


async def test_a_multi_turn_cookbook_env_trains_on_its_exact_tokens_on_the_local_backend(tmp_path):
    builder = RankedBuilder()
    task = Task.from_cookbook(builder)
    builders = [s.data for s in task.scenarios(None)]
    run, status, events = await run_local(
        task, tmp_path, max_steps=2, groups_per_step=2, eval_every=1, max_tokens=4
    )
    assert status == "completed"
    groups = [e for e in events if isinstance(e, GroupSampled)]
    assert len(groups) >= 4 and all(g.num_trajectories == 3 for g in groups)
    # group_size 3 from builders of 2 envs: made twice, the first 3 kept, scored per made
    # group (ranks 0, 1 then 0), cleaned up once per group rollout.
    used = [b for b in builders if b.made]
    assert used and all(len(b.made) == 2 and b.cleaned == 1 for b in used)
    for group in groups:
        ranks = sorted(t.metrics["rank"] for t in group.trajectories)
        assert ranks == [0.0, 0.0, 1.0]
        for summary in group.trajectories:
            # two steps of 0 or 0.25 each, plus the group reward (the rank)
            steps = summary.reward - summary.metrics["rank"]
            assert min(abs(steps - r) for r in (0.0, 0.25, 0.5)) < 1e-9, summary
            assert summary.metrics["turn"] == 2.0 and summary.metrics["stop.x"] == 1.0
            assert summary.messages[0]["role"] == "transcript"
            assert summary.messages[-1]["role"] == "log"
            assert "said1: " in summary.messages[-1]["content"]
    # The trained tokens are the env's own prompts and the sampled tokens, both turns in one
    # sequence (the second prompt extends the first turn).
    env = next(e for b in used for envs in b.made for e in envs if len(e.seen) == 2)
    assert env.seen[1][: len(env.seen[0])] == env.seen[0]
    evals = [e for e in events if isinstance(e, EvalCompleted)]
    assert evals and evals[-1].metrics["eval/num_scenarios"] == 1.0


async def test_the_token_sampler_turns_carry_prompt_sample_and_version(tmp_path):
    seen = []

    async def capture(client, model, scenario, n):
        turn = await client.sample(
            RENDERER.build_generation_prompt([{"role": "user", "content": "hi"}]),
            stop=RENDERER.get_stop_sequences(),
            max_tokens=3,
        )
        seen.append(turn)
        from tinker_tui import Trajectory

        return [Trajectory((turn,), 0.0 + i) for i in range(n)]

    task = Task(
        name="tokens",
        scenarios=lambda rng: iter([__import__("tinker_tui").Scenario("a", None)] * 2),
        group_rollout=capture,
        samples_tokens=True,
    )
    run, status, _ = await run_local(task, tmp_path, max_steps=1, groups_per_step=1, group_size=2)
    assert status == "completed" and seen
    turn = seen[0]
    prompt = RENDERER.build_generation_prompt([{"role": "user", "content": "hi"}]).to_ints()
    assert list(turn.prompt_tokens) == prompt
    assert 1 <= len(turn.tokens) <= 3 and len(turn.logprobs) == len(turn.tokens)
    assert turn.policy_version == 0 and turn.finish_reason in ("stop", "length")
    arrays = trajectory_to_datum_arrays([turn], 1.0)
    assert arrays.examples[0]["target_tokens"][-len(turn.tokens) :] == list(turn.tokens)


def test_a_cookbook_task_outside_the_engine_says_it_needs_a_token_sampler():
    task = Task.from_cookbook(RankedBuilder())
    scenario = next(iter(task.scenarios(None)))
    from tinker_tui.engine.rollouts.task import group_rollout_of

    with pytest.raises(TrajectoryError, match="hands its rollout a TokenSampler"):
        asyncio.run(group_rollout_of(task)(object(), "m", scenario, 2))


async def test_the_cookbook_example_learns_its_preference_in_seconds(tmp_path):
    task = load_task("cookbook_yes_no_maybe")
    run, status, events = await run_local(
        task, tmp_path, max_steps=25, warmup_steps=60, eval_every=0
    )
    rewards = [e.metrics["reward/mean"] for e in events if isinstance(e, StepTrained)]
    assert status == "completed" and len(rewards) == 25
    assert sum(rewards[-5:]) / 5 >= 0.95 > sum(rewards[:3]) / 3, rewards
    sampled = [t for e in events if isinstance(e, GroupSampled) for t in e.trajectories]
    assert {"maybe", "answered"} <= set(sampled[0].metrics)
    assert sampled[0].messages[-1]["content"].startswith("answer: ")


def test_the_cookbook_example_runs_through_the_tinker_sdk_against_the_double(tmp_path):
    """The same env, the real SDK: sampling through the SDK's sampling client."""
    db = tmp_path / "runs.db"
    out, err = io.StringIO(), io.StringIO()
    with TinkerDouble(tmp_path / "service") as double, pytest.MonkeyPatch.context() as patch:
        for name, value in double.env().items():
            patch.setenv(name, value)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(
                [
                    "run",
                    "cookbook_yes_no_maybe",
                    "--backend",
                    "tinker",
                    "--no-ui",
                    "--db",
                    str(db),
                    "--base-model",
                    DEFAULT_BASE_MODEL,
                    "--steps",
                    "3",
                    "--warmup-steps",
                    "0",
                    "--eval-every",
                    "0",
                    "--group-size",
                    "4",
                ]
            )
    assert code == 0, err.getvalue()[-3000:]
    assert "completed at step 3/" in out.getvalue(), out.getvalue()[-2000:]
    with sqlite3.connect(db) as conn:
        steps = [json.loads(m) for (m,) in conn.execute("SELECT metrics FROM steps ORDER BY step")]
    assert len(steps) == 3 and all(0.0 <= s["reward/mean"] <= 1.0 for s in steps)


def test_a_cookbook_recipe_naming_the_embedded_model_loads_offline(tmp_path, monkeypatch):
    """The cookbook's own arithmetic recipe, unchanged: its builder asks the cookbook for the
    tokenizer of `tinker-tui/tiny-chat`, which the task loader registered beforehand."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "arith.py"
    path.write_text(
        "from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticDatasetBuilder\n"
        "from tinker_tui import Task\n"
        "TASK = Task.from_cookbook(ArithmeticDatasetBuilder(batch_size=2, group_size=4,\n"
        f"    model_name_for_tokenizer={DEFAULT_BASE_MODEL!r}, renderer_name='role_colon',\n"
        "    n_batches=3))\n"
    )
    task = load_task(str(path))
    assert task.settings == {"group_size": 4} and len(list(task.scenarios(None))) == 6
