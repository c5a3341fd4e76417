"""verifiers environments as tasks (`Task.from_verifiers`, `tinker-tui run vf:ID`): an
environment's own episodes (its taskset, harness and `@vf.reward` rubric) played against the
policy being trained, in whichever API the harness speaks (chat completions, Responses,
Messages), on the local backend and through the real tinker SDK against the double.
verifiers is an optional extra (`tinker-tui[verifiers]`): without it these tests skip,
except the one that checks what the command says when it is missing."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import io
import json
import sqlite3
from types import SimpleNamespace

import pytest

from tinker_tui.app.cli import main
from tinker_tui.app.task_loader import layered_config, load_task
from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.events import EvalCompleted, GroupSampled, StepTrained
from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient
from tinker_tui.engine.rollouts.task import Scenario, captured_rollout
from tinker_tui.engine.rollouts.trajectory import TrajectoryError, trajectory_to_datum_arrays
from tinker_tui.engine.run import Run
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import PolicyServer
from tinker_tui.engine.training import pipeline

HAVE_VERIFIERS = importlib.util.find_spec("verifiers") is not None
needs_verifiers = pytest.mark.skipif(
    not HAVE_VERIFIERS,
    reason='verifiers is not installed (pip install "tinker-tui[verifiers]"; it pins openai<3, '
    "so it is kept out of the main test environment)",
)
EXAMPLE = "tinker_tui.examples.verifiers_yes_no_maybe"


def run_cli(args, env=None):
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
    return code, out.getvalue(), err.getvalue()


def test_vf_names_an_installed_environment_or_says_what_is_missing(tmp_path):
    code, _, err = run_cli(
        ["run", "vf:no_such_env_here", "--no-ui", "--db", str(tmp_path / "r.db")]
    )
    assert code == 2 and "Traceback" not in err, err
    if HAVE_VERIFIERS:
        assert "no verifiers environment 'no_such_env_here' is installed" in err, err
    else:
        assert 'pip install "tinker-tui[verifiers]"' in err, err
    code, _, err = run_cli(["run", "vf:", "--no-ui", "--db", str(tmp_path / "r.db")])
    assert code == 2 and "vf: needs an environment id" in err, err


async def run_local(task, tmp_path, **overrides):
    config = layered_config(task, "local").with_overrides(
        {"checkpoint_every": 0, "warmup_steps": 0, **overrides}
    )
    run = Run(task=task, config=config, backend="local", db_path=tmp_path / "runs.db")
    events = []
    run.events.subscribe(events.append)
    status = await run.run()
    return status, events


def keep_trajectories(monkeypatch) -> list:
    """The trajectories the run makes of its rollouts (a verifiers rollout returns only its
    reward: its turns are what the policy server captured under its key)."""
    made = []

    async def keeping(*args):
        trajectory = await captured_rollout(*args)
        made.append(trajectory)
        return trajectory

    monkeypatch.setattr(pipeline, "captured_rollout", keeping)
    return made


@needs_verifiers
@pytest.mark.e2e  # verifiers asks git for its own version when an episode starts
async def test_the_verifiers_example_trains_on_its_rubric_with_named_components(tmp_path):
    task = load_task(EXAMPLE)
    assert task.reward_components == ("answered", "preference")
    status, events = await run_local(
        task, tmp_path, max_steps=2, group_size=4, groups_per_step=2, eval_every=2
    )
    assert status == "completed"
    steps = [e for e in events if isinstance(e, StepTrained)]
    assert len(steps) == 2
    assert {"reward/component/answered", "reward/component/preference"} <= set(steps[-1].metrics), (
        sorted(steps[-1].metrics)
    )
    sampled = [t for e in events if isinstance(e, GroupSampled) for t in e.trajectories]
    for summary in sampled:
        # the rubric: half `answered`, half `preference`
        answered, preference = summary.metrics["answered"], summary.metrics["preference"]
        assert summary.reward == pytest.approx(0.5 * answered + 0.5 * preference)
        assert [m["role"] for m in summary.messages] == ["user", "assistant"]
        assert summary.num_tokens >= 1
    evals = [e for e in events if isinstance(e, EvalCompleted)]
    assert evals and evals[-1].metrics["eval/num_scenarios"] == 4.0


@needs_verifiers
@pytest.mark.e2e  # verifiers asks git for its own version when an episode starts
async def test_a_multi_turn_tool_environment_trains_every_turn_in_one_sequence(
    tmp_path, monkeypatch
):
    import vf_toy_tools

    from tinker_tui import Task

    task = Task.from_verifiers(vf_toy_tools.environment(), name="notes")
    assert task.reward_components == ("answer", "called")
    made = keep_trajectories(monkeypatch)
    status, events = await run_local(task, tmp_path, max_steps=2, group_size=2, groups_per_step=2)
    assert status == "completed" and made
    for trajectory in made:
        # Two sampled turns (the forced call, then the answer), both trained on their exact
        # sampled tokens. (The embedded model's renderer re-renders an echoed tool call in
        # other tokens, so its second prompt may start a second sequence: nothing dropped.)
        arrays = trajectory_to_datum_arrays(trajectory.turns, 1.0)
        assert len(trajectory.turns) == 2 and arrays.turns == 2
        trained = [
            [t for t, m in zip(e["target_tokens"], e["mask"], strict=True) if m]
            for e in arrays.examples
        ]
        assert sum(trained, []) == list(trajectory.turns[0].tokens + trajectory.turns[1].tokens)
    sampled = [t for e in events if isinstance(e, GroupSampled) for t in e.trajectories]
    assert all(t.metrics["called"] == 1.0 for t in sampled), [t.metrics for t in sampled]
    assert any(m.get("tool_calls") for t in sampled for m in t.messages)


@needs_verifiers
@pytest.mark.e2e  # verifiers asks git for its own version when an episode starts
@pytest.mark.parametrize("harness", ["vf_toy_apis", "vf_toy_responses"])
async def test_harnesses_speaking_messages_or_responses_train_on_their_exact_tokens(
    harness, tmp_path, monkeypatch
):
    """A Claude-Code-style harness (Anthropic Messages) and a Codex-style one (OpenAI
    Responses), each sending its first reply back as history and streaming the second: every
    call reaches the policy server in its own API under the rollout's capture address."""
    import vf_toy_apis

    from tinker_tui import Task

    task = Task.from_verifiers(vf_toy_apis.environment(harness), name="ask")
    made = keep_trajectories(monkeypatch)
    vf_toy_apis.SEEN.clear()
    status, events = await run_local(task, tmp_path, max_steps=2, group_size=2, groups_per_step=2)
    assert status == "completed" and made
    for trajectory in made:
        # the two replies the harness got, token for token, trained as one sequence
        assert tuple(t.tokens for t in trajectory.turns) in vf_toy_apis.SEEN
        arrays = trajectory_to_datum_arrays(trajectory.turns, 1.0)
        assert (arrays.turns, arrays.prefix_mismatches) == (2, 0)
        roles = [m["role"] for m in trajectory.messages]
        assert roles == ["user", "assistant", "user", "assistant"], trajectory.messages
    sampled = [t for e in events if isinstance(e, GroupSampled) for t in e.trajectories]
    assert sampled and all(t.reward == t.metrics["answer"] for t in sampled)
    # a client that is not a rollout's own (no capture address) is refused in one line
    plain = SimpleNamespace(base_url="http://127.0.0.1:9/v1", api_key="token")
    with pytest.raises(TrajectoryError, match=r"needs the client the run hands it"):
        await task.rollout(plain, "ask", Scenario(id="q", data=None))


def verifiers_clients(env) -> int:
    """The model clients verifiers' interception server(s) keep for the serving env, one per
    distinct endpoint config (verifiers 0.4: `Env._interception`, a server or a pool of them,
    each with its `clients`)."""
    interception = env._interception
    servers = getattr(interception, "servers", None) or [interception]
    return sum(len(server.clients) for server in servers)


@needs_verifiers
@pytest.mark.e2e  # verifiers asks git for its own version when an episode starts
async def test_episodes_reuse_as_many_endpoints_as_ran_at_once(tmp_path):
    """verifiers keeps an HTTP client per distinct endpoint until the env stops serving, so
    the episodes' capture addresses are reused: 24 episodes, 4 at a time, as a run starts
    them, hold at most 4 addresses and 4 clients (a fresh address each held 24)."""
    import vf_toy_apis

    from tinker_tui import Task

    env = vf_toy_apis.environment()
    task = Task.from_verifiers(env, name="ask")
    scenarios = list(task.scenarios(None))
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    await session.start()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults())
    await server.start()
    keys: set[str] = set()
    opening = server.captures.open

    def open_keeping(key=None, **kwargs):
        opened = opening(key, **kwargs)
        keys.add(opened)
        return opened

    gate = asyncio.Semaphore(4)

    async def episode(number):
        async with gate:
            scenario = scenarios[number % len(scenarios)]
            return await captured_rollout(task, client, "policy", scenario, server.captures)

    try:
        server.captures.open = open_keeping
        client = server.client()
        made = await asyncio.gather(*(episode(n) for n in range(24)))
        assert all(len(t.turns) == 2 for t in made)  # each on its own two turns
        assert 1 <= len(keys) <= 4, keys
        assert verifiers_clients(env) == len(keys)
        assert len(server.captures) == 0
    finally:
        await server.stop()
        await session.close("success")


@needs_verifiers
@pytest.mark.e2e  # verifiers asks git for its own version when an episode starts
def test_the_verifiers_example_runs_through_the_tinker_sdk_against_the_double(tmp_path):
    from tinker_double import TinkerDouble

    db = tmp_path / "runs.db"
    with TinkerDouble(tmp_path / "service") as double:
        code, out, err = run_cli(
            [
                "run",
                EXAMPLE,
                "--backend",
                "tinker",
                "--no-ui",
                "--db",
                str(db),
                "--base-model",
                DEFAULT_BASE_MODEL,
                "--steps",
                "2",
                "--warmup-steps",
                "0",
                "--eval-every",
                "0",
                "--group-size",
                "4",
            ],
            double.env(),
        )
    assert code == 0, err[-3000:]
    assert "completed at step 2/" in out, out[-2000:]
    with sqlite3.connect(db) as conn:
        steps = [json.loads(m) for (m,) in conn.execute("SELECT metrics FROM steps ORDER BY step")]
    assert len(steps) == 2 and all("reward/component/preference" in s for s in steps)


@needs_verifiers
def test_an_env_left_in_a_prime_sandbox_without_credentials_is_refused_at_once(
    tmp_path, monkeypatch
):
    import verifiers.v1 as vf

    from tinker_tui import Task
    from tinker_tui.engine.rollouts.task import TaskError

    monkeypatch.delenv("PRIME_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.prime/config.json
    env = vf.load_environment(vf.resolve_env_config({"taskset": {"id": "vf_toy_tools"}}))
    with pytest.raises(TaskError, match="Prime sandbox .* runtime set to subprocess"):
        Task.from_verifiers(env)
