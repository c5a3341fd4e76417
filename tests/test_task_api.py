"""The task API: loading a task from a file or a module, checking it, layering settings, and
what a user's mistakes turn into (a clear message naming the file, or an error group)."""

import asyncio
import math
import random
import re
import textwrap

import pytest

from bench.simulated import SimulatedClient, SimulatedPolicy
from tinker_tui.app.task_loader import TaskLoadError, layered_config, load_config_file, load_task
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import EventBus, GroupDiscarded, GroupSampled
from tinker_tui.engine.rollouts.task import (
    Scenario,
    Task,
    TaskError,
    Trajectory,
    TrajectoryError,
    check_task,
)
from tinker_tui.engine.run_id import new_run_id
from tinker_tui.engine.training.pipeline import Pipeline

MINIMAL = """
from tinker_tui import Scenario, Task, Trajectory

def scenarios(rng):
    while True:
        yield Scenario(id="s", data=rng.random())

async def rollout(client, model, scenario):
    completion = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}])
    return Trajectory.from_choices([completion], reward=REWARD)

REWARD = 1.0
TASK = Task(name="mine", scenarios=scenarios, rollout=rollout, settings={SETTINGS})
OTHER = Task(name="other", scenarios=scenarios, rollout=rollout)
"""


def write_task(tmp_path, body=None, *, name="my_task.py", reward="1.0", settings=""):
    path = tmp_path / name
    text = body if body is not None else MINIMAL.replace("REWARD = 1.0", f"REWARD = {reward}")
    path.write_text(textwrap.dedent(text).replace("{SETTINGS}", "{" + settings + "}"))
    return path


def load_error(spec) -> str:
    with pytest.raises(TaskLoadError) as info:
        load_task(str(spec))
    return str(info.value)


def test_a_misnamed_keyword_of_task_gets_did_you_mean_as_a_misnamed_setting_does(tmp_path):
    """`Task(setting=...)` was a bare TypeError where `settings={"max_step": ...}` gets
    "did you mean"."""
    path = write_task(tmp_path, MINIMAL.replace("settings={SETTINGS}", "setting={}"))
    message = load_error(path)
    assert (
        "TypeError: Task.__init__() got an unexpected keyword argument 'setting' "
        "(did you mean 'settings'?); Task takes name, scenarios, rollout" in message
    )
    # a Scenario built as the file loads, with a wrong keyword
    body = MINIMAL + 'HELD_OUT = [Scenario(id="e", datum=1)]\n'
    assert "'datum' (did you mean 'data'?); Scenario takes id, data" in load_error(
        write_task(tmp_path, body, name="held_out.py")
    )


# ---------------------------------------------------------------------- finding a task
@pytest.mark.parametrize(
    "name, task_name",
    [
        ("example", "yes_no_maybe"),
        ("yes_no_maybe", "yes_no_maybe"),
        ("binary_prefix_tool", "binary_prefix_tool"),
        ("next_number", "next_number"),
        ("tinker_tui.examples.yes_no_maybe", "yes_no_maybe"),
        ("tinker_tui.examples.yes_no_maybe:TASK", "yes_no_maybe"),
        ("tinker_tui.examples.binary_prefix_tool:TASK_RANDOM_SECRETS", "binary_prefix_tool_random"),
    ],
)
def test_built_in_names_and_modules_load(name, task_name):
    assert load_task(name).name == task_name


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("yes_no_maybe", "yes_no_maybe-"),
        ("../../evil", "evil-"),
        ("my task/1", "my-task-1-"),
        ("-v", "v-"),
        ("?!", "run-"),
    ],
)
def test_a_run_id_names_files_only_beside_the_store_whatever_the_task_is_called(name, prefix):
    """The run id names the metrics file, the engine log and exports, and is pasted into
    commands: "../../evil" wrote files two folders up."""
    run_id = new_run_id(name, FakeClock(0.0))
    assert run_id.startswith(prefix + "19700101-000000-")
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", run_id) and not run_id.startswith((".", "-"))


def test_a_task_file_loads_by_path_and_by_name_after_a_colon(tmp_path):
    path = write_task(tmp_path)
    assert load_task(str(path)).name == "mine"
    assert load_task(f"{path}:OTHER").name == "other"


def test_a_task_file_may_import_a_helper_next_to_it(tmp_path):
    (tmp_path / "my_helpers.py").write_text("WORD = 'helped'\n")
    body = MINIMAL.replace(
        "from tinker_tui import", "from my_helpers import WORD\nfrom tinker_tui import"
    )
    body = body.replace('name="mine"', "name=WORD")
    assert load_task(str(write_task(tmp_path, body))).name == "helped"


# ---------------------------------------------------------------------- bad input
def test_missing_file_names_the_file(tmp_path):
    message = load_error(tmp_path / "nope.py")
    assert "nope.py" in message and "not found" in message


def test_syntax_error_names_the_file_and_line(tmp_path):
    path = write_task(tmp_path, "x = 1\ndef broken(:\n    pass\n")
    message = load_error(path)
    assert "my_task.py" in message and "syntax error at line 2" in message


def test_an_exception_while_importing_names_the_file_and_line(tmp_path):
    path = write_task(tmp_path, "import math\n\nvalue = 1 / 0\n")
    message = load_error(path)
    assert "my_task.py" in message and "line 3" in message and "ZeroDivisionError" in message


def test_a_file_without_task_says_what_is_expected(tmp_path):
    message = load_error(write_task(tmp_path, "x = 1\n"))
    assert "my_task.py" in message and "defines no TASK" in message
    assert "TASK = Task(" in message
    assert "defines no NOPE" in load_error(f"{write_task(tmp_path)}:NOPE")


def test_task_of_the_wrong_type(tmp_path):
    message = load_error(write_task(tmp_path, "TASK = {'name': 'x'}\n"))
    assert "my_task.py" in message and "expected a Task" in message and "dict" in message


def test_a_rollout_that_is_not_async_is_refused_before_the_engine_starts(tmp_path):
    body = MINIMAL.replace("async def rollout", "def rollout").replace(
        "    completion = await", "    completion ="
    )
    message = load_error(write_task(tmp_path, body))
    assert "my_task.py" in message and "rollout must be a coroutine function" in message
    assert "async def rollout(client, model, scenario)" in message


@pytest.mark.parametrize("params", ["client, model", "client, model, scenario, extra"])
def test_a_rollout_with_the_wrong_parameters_is_refused(tmp_path, params):
    body = MINIMAL.replace(
        "async def rollout(client, model, scenario)", f"async def rollout({params})"
    )
    message = load_error(write_task(tmp_path, body))
    assert "my_task.py" in message and "must take 3 positional arguments" in message


def test_a_task_without_rollout_is_refused(tmp_path):
    body = MINIMAL.replace("rollout=rollout, settings", "settings")
    message = load_error(write_task(tmp_path, body))
    assert "my_task.py" in message and "no rollout" in message


def test_scenarios_must_be_a_function_of_the_rng(tmp_path):
    body = MINIMAL.replace(
        "scenarios=scenarios, rollout=rollout, settings",
        "scenarios=[1, 2], rollout=rollout, settings",
    )
    message = load_error(write_task(tmp_path, body))
    assert "my_task.py" in message and "scenarios must be a function" in message


def test_async_scenarios_are_refused(tmp_path):
    body = MINIMAL.replace("def scenarios(rng):", "async def scenarios(rng):")
    message = load_error(write_task(tmp_path, body))
    assert "my_task.py" in message and "scenarios must be a plain function" in message


def test_unknown_task_setting_names_the_key_and_the_file(tmp_path):
    message = load_error(write_task(tmp_path, settings="'max_stepz': 3"))
    assert "my_task.py" in message and "'max_stepz'" in message


def test_a_bad_task_setting_value_names_the_file(tmp_path):
    task = load_task(str(write_task(tmp_path, settings="'max_steps': 0")))
    with pytest.raises(TaskLoadError) as info:
        layered_config(task, "local", where="my_task.py")
    assert "my_task.py" in str(info.value) and "max_steps must be at least 1" in str(info.value)


def test_bad_warmup_and_backend_settings_are_explained():
    def scenarios(rng):
        yield Scenario(id="s", data=None)

    async def rollout(client, model, scenario):
        raise AssertionError

    with pytest.raises(TaskError, match="must end with an assistant message"):
        check_task(
            Task(
                name="t",
                scenarios=scenarios,
                rollout=rollout,
                warmup=[[{"role": "user", "content": "hi"}]],
            )
        )
    with pytest.raises(TaskError, match="unknown backend 'gpu'"):
        check_task(
            Task(name="t", scenarios=scenarios, rollout=rollout, backend_settings={"gpu": {}})
        )
    with pytest.raises(TaskError, match="both rollout and group_rollout"):
        Task(name="t", scenarios=scenarios, rollout=rollout, group_rollout=rollout)


def test_unknown_name_is_an_unknown_task():
    assert "unknown task 'no-such-task'" in load_error("no-such-task")
    assert "unknown task 'no_such_module'" in load_error("no_such_module")


# ---------------------------------------------------------------------- settings layers
def test_settings_layers_task_then_backend_then_toml_then_flags(tmp_path):
    task = load_task(
        str(write_task(tmp_path, settings="'max_steps': 7, 'group_size': 3, 'seed': 5"))
    )
    task = Task(
        **{
            **{f: getattr(task, f) for f in task.__slots__},
            "backend_settings": {"local": {"group_size": 5, "learning_rate": 0.01}},
        }
    )
    toml = tmp_path / "run.toml"
    toml.write_text("max_steps = 9\ntemperature = 1\nlearning_rate = 0.02\n")
    file_settings = load_config_file(toml)
    config = layered_config(task, "local", file_settings, {"max_steps": 11}, config_path=toml)
    assert (config.max_steps, config.group_size, config.seed) == (11, 5, 5)
    assert config.temperature == 1.0 and isinstance(config.temperature, float)
    assert config.learning_rate == 0.02
    assert layered_config(task, "tinker").group_size == 3
    assert RunConfig().group_size == 8


@pytest.mark.parametrize(
    "text, expected",
    [
        ("max_stepz = 3\n", "unknown setting 'max_stepz'"),
        ("max_steps = 'ten'\n", "setting 'max_steps' must be an integer"),
        ("eval_at_start = 1\n", "setting 'eval_at_start' must be true or false"),
        ("[run]\nmax_steps = 3\n", "unknown setting 'run'"),
        ("max_steps = \n", "not valid TOML"),
    ],
)
def test_toml_mistakes_name_the_key_and_the_file(tmp_path, text, expected):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(TaskLoadError) as info:
        load_config_file(path)
    assert "bad.toml" in str(info.value) and expected in str(info.value)


def test_toml_missing_file_and_bad_value(tmp_path):
    with pytest.raises(TaskLoadError, match="missing.toml' not found"):
        load_config_file(tmp_path / "missing.toml")
    path = tmp_path / "zero.toml"
    path.write_text("group_size = 0\n")
    task = load_task("example")
    with pytest.raises(TaskLoadError, match="zero.toml.*group_size must be at least 1"):
        layered_config(task, "local", load_config_file(path), config_path=path)


# ---------------------------------------------------------------------- rollout mistakes at run time
def run_pipeline(task, **overrides):
    session = SimulatedPolicy()
    client = SimulatedClient(session)
    config = RunConfig(
        max_steps=3,
        group_size=4,
        groups_per_step=2,
        rollout_workers=2,
        checkpoint_every=0,
        error_pause_rate=1.0,
    ).with_overrides(overrides)
    bus = EventBus()
    events = []
    bus.subscribe(events.append)
    pipeline = Pipeline(
        config=config,
        task=task,
        session=session,
        client_factory=lambda: client,
        model_name="m",
        bus=bus,
        clock=FakeClock(),
        rng=random.Random(0),
    )
    return pipeline, events


@pytest.mark.parametrize("reward", ["float('nan')", "float('inf')", "'high'"])
async def test_a_non_finite_reward_is_an_error_group_naming_the_file(tmp_path, reward):
    task = load_task(str(write_task(tmp_path, reward=reward)))
    pipeline, events = run_pipeline(task, max_steps=1)
    run = asyncio.create_task(pipeline.run())
    for _ in range(200):
        await asyncio.sleep(0.001)
        if any(isinstance(e, GroupDiscarded) for e in events):
            break
    pipeline.stop("test")
    await run
    errors = [e for e in events if isinstance(e, GroupDiscarded) and e.reason == "error"]
    assert errors, "a bad reward must be counted as an error group"
    assert "TrajectoryError" in errors[0].detail and "my_task.py" in errors[0].detail
    expected = "must be a number" if reward == "'high'" else "must be a finite number"
    assert expected in errors[0].detail


async def test_a_rollout_that_raises_or_returns_the_wrong_thing_is_an_error_not_a_crash(tmp_path):
    body = MINIMAL.replace(
        "    return Trajectory.from_choices([completion], reward=REWARD)",
        "    if scenario.data < 0.5:\n        raise KeyError('tool broke')\n"
        "    return {'reward': 1}",
    )
    task = load_task(str(write_task(tmp_path, body)))
    pipeline, events = run_pipeline(task, max_steps=1)
    run = asyncio.create_task(pipeline.run())
    for _ in range(200):
        await asyncio.sleep(0.001)
        if len([e for e in events if isinstance(e, GroupDiscarded)]) >= 6:
            break
    pipeline.stop("test")
    await run
    details = [e.detail for e in events if isinstance(e, GroupDiscarded) and e.reason == "error"]
    assert any("tool broke" in d for d in details)
    assert any("returned a dict; expected a Trajectory" in d and "my_task.py" in d for d in details)


# ---------------------------------------------------------------------- group rollouts
def choice(version=0):
    return {
        "prompt_token_ids": [1],
        "token_ids": [2],
        "token_logprobs": [-0.1],
        "policy_version": version,
    }


async def test_group_rollout_runs_once_per_group_with_n_members():
    calls = []

    def scenarios(rng):
        i = 0
        while True:
            yield Scenario(id=f"s{i}", data=i)
            i += 1

    async def group_rollout(client, model, scenario, n):
        calls.append((scenario.id, n))
        await asyncio.sleep(0)
        completions = [await client.chat.completions.create(model=model) for _ in range(n)]
        # A reward that compares the members: rank within the group.
        return [Trajectory.from_choices([c], reward=float(i)) for i, c in enumerate(completions)]

    task = check_task(
        Task(
            name="g",
            scenarios=scenarios,
            group_rollout=group_rollout,
            eval_scenarios=lambda: [Scenario(id="e", data=0)],
        )
    )
    pipeline, events = run_pipeline(task, max_steps=3)
    assert await pipeline.run() == "completed"
    sampled = [e for e in events if isinstance(e, GroupSampled)]
    assert sampled and all(e.num_trajectories == 4 for e in sampled)
    # the final evaluation is a group of one
    assert calls[-1] == ("e", 1) and all(n == 4 for _, n in calls[:-1])
    assert len(calls) == len({sid for sid, _ in calls}), "one call per group"
    assert sorted(t.reward for t in sampled[0].trajectories) == [0.0, 1.0, 2.0, 3.0]


async def test_group_rollout_mistakes_fail_the_whole_group():
    async def short(client, model, scenario, n):
        return [Trajectory.from_choices([choice()], reward=1.0)]

    task = Task(
        name="g", scenarios=lambda rng: iter([Scenario(id="s", data=0)] * 99), group_rollout=short
    )
    scenario = Scenario(id="s", data=0)
    results = await asyncio.gather(
        *(task.rollout(None, "m", scenario) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, TrajectoryError) for r in results)
    assert "returned 1 results for n=3; return exactly n" in str(results[0])
    # where the function is: what it returned has no line in the traceback
    line = short.__code__.co_firstlineno
    assert f"group_rollout (test_task_api.py:{line}) returned" in str(results[0]), results[0]
    # A single call (an evaluation) is a group of one.
    assert (await task.rollout(None, "m", scenario)).reward == 1.0


def test_group_rollout_signature_is_checked():
    async def wrong(client, model, scenario):
        return []

    with pytest.raises(TaskError, match="group_rollout must take 4 positional arguments"):
        check_task(Task(name="g", scenarios=lambda rng: iter(()), group_rollout=wrong))


def test_the_public_surface_is_importable_from_engine_task():
    import tinker_tui.engine.rollouts.task as api

    for name in ("Task", "Scenario", "Trajectory", "TrajectoryError", "TaskError", "check_task"):
        assert hasattr(api, name)
    assert math.isfinite(Trajectory.from_choices([choice()], reward=0.5).reward)


def test_the_rollout_form_is_public_and_loading_keeps_it(tmp_path):
    from tinker_tui.app.task_loader import task_source
    from tinker_tui.engine.rollouts.task import group_rollout_of
    from tinker_tui.examples import next_number, yes_no_maybe

    assert group_rollout_of(next_number.TASK) is next_number.group_rollout
    assert group_rollout_of(yes_no_maybe.TASK) is None
    grouped, single = load_task("next_number"), load_task(str(write_task(tmp_path)))
    assert group_rollout_of(grouped) is not None and group_rollout_of(single) is None
    assert task_source(grouped) == "module tinker_tui.examples.next_number"
    assert task_source(single) == str(tmp_path / "my_task.py")
    assert task_source(yes_no_maybe.TASK) is None  # not loaded: no file to name
