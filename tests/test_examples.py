"""Each example runs two steps on the local backend as shipped (fast), the tool example also
runs its native tool-call path against a scripted client, and a task file runs from the
command line with a TOML config. The learning runs are in test_examples_learning.py."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tinker_tui import Scenario
from tinker_tui.app.task_loader import layered_config, load_task
from tinker_tui.engine.events import EvalCompleted, GroupDiscarded, GroupSampled, StepTrained
from tinker_tui.engine.run import Run
from tinker_tui.examples import binary_prefix_tool as bp
from tinker_tui.examples import next_number

ROOT = Path(__file__).resolve().parent.parent


async def run_two_steps(name, tmp_path, **overrides):
    task = load_task(name)
    config = layered_config(task, "local").with_overrides(
        {"max_steps": 2, "checkpoint_every": 0, **overrides}
    )
    run = Run(task=task, config=config, backend="local", db_path=tmp_path / "runs.db")
    events = []
    run.events.subscribe(events.append)
    assert await run.run() == "completed"
    of = lambda kind: [e for e in events if isinstance(e, kind)]  # noqa: E731
    assert [e.step for e in of(StepTrained)] == [1, 2]
    assert not [e for e in of(GroupDiscarded) if e.reason == "error"], [
        e.detail for e in of(GroupDiscarded)
    ]
    return task, config, of


async def test_yes_no_maybe_runs_two_steps(tmp_path):
    _, config, of = await run_two_steps("example", tmp_path, warmup_steps=5, eval_at_start=True)
    rewards = [t.reward for g in of(GroupSampled) for t in g.trajectories]
    assert rewards and set(rewards) <= {0.0, 0.5, 0.75, 1.0}
    evals = of(EvalCompleted)
    assert evals and evals[0].metrics["eval/num_scenarios"] == 8


async def test_binary_prefix_tool_runs_two_steps_multi_turn(tmp_path):
    _, config, of = await run_two_steps("binary_prefix_tool", tmp_path, warmup_steps=3)
    groups = of(GroupSampled)
    assert all(g.num_trajectories == config.group_size for g in groups)
    trajectory = groups[0].trajectories[0]
    assert 0 <= trajectory.reward <= 30
    answers = [m["content"] for m in trajectory.messages if m["role"] == "user"][1:]
    assert answers and all(a.startswith("make_guess: ") for a in answers), trajectory.messages


async def test_next_number_runs_two_steps_with_one_request_per_group(tmp_path):
    _, config, of = await run_two_steps("next_number", tmp_path, eval_at_start=True)
    groups = of(GroupSampled)
    assert groups and all(g.num_trajectories == config.group_size for g in groups)
    assert {t.reward for g in groups for t in g.trajectories} <= {0.0, 1.0}
    evals = of(EvalCompleted)
    assert evals and evals[0].metrics["eval/num_scenarios"] == 4 * len(next_number.EVAL_NUMBERS)
    assert evals[0].metrics["eval/errors"] == 0


@pytest.mark.e2e  # its rollouts start the agent program
async def test_subprocess_agent_trains_on_what_the_server_captured(tmp_path):
    """The agent program speaks the Messages API and returns no choices: each trajectory is
    its two captured turns, and the second extends the first (one sequence, no mismatch)."""
    _, config, of = await run_two_steps(
        "subprocess_agent", tmp_path, group_size=2, groups_per_step=2
    )
    groups = of(GroupSampled)
    assert groups and all(g.num_trajectories == config.group_size for g in groups)
    assert {t.reward for g in groups for t in g.trajectories} <= {0.0, 0.5, 1.0}
    assert [m["role"] for m in groups[0].trajectories[0].messages] == ["user", "assistant"] * 2
    assert all(t.num_tokens > 0 for g in groups for t in g.trajectories)
    for step in of(StepTrained):
        if "train/turns" in step.metrics:  # a step with a group to train (rewards differ)
            assert step.metrics["train/prefix_mismatch"] == 0, step.metrics
            turns = step.metrics["train/turns"]
            assert turns > 0 and turns % 2 == 0  # both turns of every trajectory


def test_examples_keep_their_splits_apart():
    assert not set(next_number.TRAIN_NUMBERS) & set(next_number.EVAL_NUMBERS)
    from tinker_tui.examples import yes_no_maybe

    assert not set(yes_no_maybe.TRAIN_QUESTIONS) & set(yes_no_maybe.EVAL_QUESTIONS)
    warm = {m["content"] for c in yes_no_maybe.WARMUP for m in c}
    assert not any(q in w for q in yes_no_maybe.EVAL_QUESTIONS for w in warm)


def test_binary_prefix_warmup_never_shows_the_secret():
    secret = next(bp.TASK.scenarios(__import__("random").Random(0))).data[1]
    assert len(secret) == 30
    for conversation in bp.TASK.warmup:
        for message in conversation:
            assert secret not in message["content"]
    assert bp.make_guess("1" * 30, secret)[0] == bp.common_prefix("1" * 30, secret)
    assert bp.make_guess("01x", secret) == (0, "invalid guess: use only 0 and 1 (30 bits)")
    assert bp.text_guess(" make_guess('0101') ") == "0101"


# ---------------------------------------------------------------------- native tool calls
class NativeToolClient:
    """Stands in for the policy server with a renderer that has native tool calls (Qwen3):
    its model entry says so, as the server's does, and it answers with tool calls."""

    base_url = "http://scripted-native/v1"

    def __init__(self, guesses):
        self.guesses = list(guesses)
        self.requests = []
        self.retrieved = 0
        self.chat = SimpleNamespace(completions=self)
        self.models = SimpleNamespace(retrieve=self.retrieve)

    async def retrieve(self, model):
        self.retrieved += 1
        return SimpleNamespace(id=model, model_extra={"tool_calls": "native"})

    async def create(self, **request):
        self.requests.append(request)
        guess = self.guesses.pop(0)
        calls = (
            []
            if guess is None
            else [
                SimpleNamespace(
                    id=f"call-{len(self.requests)}",
                    function=SimpleNamespace(
                        name="make_guess", arguments=json.dumps({"guess": guess})
                    ),
                    model_dump=lambda **_: {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "make_guess", "arguments": "{}"},
                    },
                )
            ]
        )
        message = SimpleNamespace(content="", tool_calls=calls)
        choice = SimpleNamespace(
            message=message,
            model_extra={
                "prompt_token_ids": [1, 2],
                "token_ids": [3],
                "token_logprobs": [-0.5],
                "policy_version": 0,
            },
        )
        return SimpleNamespace(choices=[choice])


async def test_binary_prefix_uses_native_tool_calls_when_the_renderer_has_them():
    secret = "0110" + "1" * 26
    client = NativeToolClient(["0000", None, "0111"])
    scenario = Scenario(id="s", data=(None, secret))
    trajectory = await bp.TASK.rollout(client, "m", scenario)
    assert trajectory.reward == 3.0  # best of: 1 ("0000"), no call, 3 ("0111")
    assert len(trajectory.turns) == 3 and trajectory.metrics["tool_calls"] == 2.0
    assert client.retrieved == 1 and len(client.requests) == 3
    assert all(r["tools"][0]["function"]["name"] == "make_guess" for r in client.requests)
    roles = [m["role"] for m in trajectory.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool"]
    assert trajectory.messages[-1]["content"] == "3 leading bits right"
    # The capability is asked once per server and model.
    again = NativeToolClient(["0", "0", "0"])
    bp._native[f"{again.base_url}|m"] = bp._native[f"{client.base_url}|m"]
    await bp.TASK.rollout(again, "m", scenario)
    assert again.retrieved == 0


# ---------------------------------------------------------------------- the command line
def test_a_task_file_runs_from_the_command_line_with_a_toml_config(tmp_path):
    task_file = tmp_path / "my_task.py"
    task_file.write_text((ROOT / "examples" / "yes_no_maybe.py").read_text())
    config = tmp_path / "run.toml"
    config.write_text("max_steps = 50\nwarmup_steps = 2\ncheckpoint_every = 0\neval_every = 0\n")
    env = {
        k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD")
    }
    env["HOME"] = str(tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            str(task_file),
            "--no-ui",
            "--config",
            str(config),
            "--steps",
            "2",
            "--db",
            str(tmp_path / "runs.db"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "step    2/2" in result.stdout, result.stdout  # the flag beat the file's 50


@pytest.mark.parametrize(
    "body, expected",
    [
        ("def oops(:\n", "syntax error at line 1"),
        ("x = 1\n", "defines no TASK"),
    ],
)
def test_a_broken_task_file_is_a_usage_error_naming_it(tmp_path, body, expected):
    task_file = tmp_path / "broken_task.py"
    task_file.write_text(body)
    result = subprocess.run(
        [sys.executable, "-m", "tinker_tui.app.cli", "run", str(task_file), "--no-ui"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "broken_task.py" in result.stderr and expected in result.stderr
    assert "Traceback" not in result.stderr
