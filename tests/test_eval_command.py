"""`tinker-tui eval`: pass@k and mean@k with their intervals under a stored protocol, on the
example task and on a task written here; resumable (only missing or failed rollouts run
again); protocols compared in `compare`; a base model evaluated through the real SDK and
the Tinker double."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import textwrap
from pathlib import Path

import pytest
from tinker_runs import one_step_tinker_run

from tinker_tui.app.cli import main
from tinker_tui.engine.errors import EXIT_USAGE
from tinker_tui.engine.events import EvalCompleted, RunFinished, RunStarted, StepTrained
from tinker_tui.engine.local import DEFAULT_BASE_MODEL
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.eval_stats import (
    bootstrap_mean,
    pass_at_k,
    summarize,
    wilson,
)
from tinker_tui.engine.store import RunStore
from tinker_tui.engine.training.eval_protocol import EvalProtocol, differences

# ---------------------------------------------------------------------- the statistics


def test_pass_at_k_is_the_unbiased_estimator():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = 1.0 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_wilson_and_bootstrap_intervals():
    w = wilson(8, 10)  # textbook value: 0.490 to 0.943
    assert (round(w.low, 3), round(w.high, 3)) == (0.490, 0.943) and w.method == "wilson95"
    assert wilson(0, 8).low == 0.0 and wilson(8, 8).high == 1.0
    groups = [[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.5, 1.0]]
    a, b = bootstrap_mean(groups), bootstrap_mean(groups)
    assert a == b  # fixed seed: the same rewards give the same interval
    assert a.value == pytest.approx(4.5 / 8) and a.method == "bootstrap95"
    assert a.low < a.value < a.high
    s = summarize({"x": [1.0, 0.0, 0.0], "y": [0.0, 0.0, 0.0]}, k=3, threshold=1.0)
    assert s.pass_at_k.value == 0.5 and s.pass_at_k.method == "wilson95"
    assert s.pass_at_1.value == pytest.approx(1 / 6) and s.mean.value == pytest.approx(1 / 6)


def test_protocols_differ_in_what_moves_the_numbers_not_in_k():
    a = EvalProtocol(k=8, temperature=1.0, renderer="role_colon")
    assert a.key() == EvalProtocol(k=4, temperature=1.0, renderer="role_colon").key()
    b = EvalProtocol(k=8, temperature=0.7, renderer="role_colon")
    assert differences(a, b) == ["temperature"] and a.key() != b.key()
    assert differences(a, None) == ["protocol"]
    assert EvalProtocol.from_dict(a.as_dict()) == a and EvalProtocol.from_dict({}) is None


# ---------------------------------------------------------------------- the command

#: A task written fresh: name a word with N letters; scenario count-3 fails while the flag
#: file exists (a flaky grader), so a second invocation has failed rollouts to redo.
WORD_TASK = """
from pathlib import Path

from tinker_tui import Scenario, Task, Trajectory

FLAG = Path(__file__).with_name("fail-count-3")


def scenarios(rng):
    i = 0
    while True:
        yield Scenario(id=f"train-{i}", data=1 + i % 5)
        i += 1


def eval_scenarios():
    return [Scenario(id=f"count-{n}", data=n) for n in range(1, 6)]


async def rollout(client, model, scenario):
    if scenario.id == "count-3" and FLAG.exists():
        raise RuntimeError("flaky grader")
    completion = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": f"Say a word of {scenario.data} letters."}],
        max_tokens=4,
        temperature=0.0,
    )
    choice = completion.choices[0]
    words = (choice.message.content or "").split()
    length = len(words[0]) if words else 0
    reward = 1.0 if length == scenario.data else max(0.0, 1 - abs(length - scenario.data) / 5)
    return Trajectory.from_choices([choice], reward=reward)


TASK = Task(name="word_length", scenarios=scenarios, rollout=rollout, eval_scenarios=eval_scenarios)
"""


def _eval(capsys, *args: str) -> tuple[int, dict]:
    code = main(["eval", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else {}


def test_eval_of_the_example_on_the_base_model_has_intervals_and_protocol(tmp_path, capsys):
    db = tmp_path / "runs.db"
    code = main(
        ["eval", "example", "--model", DEFAULT_BASE_MODEL, "--backend", "local", "-k", "8"]
        + ["--db", str(db), "--no-progress"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "protocol " in out and "temperature 1, max_tokens 1024" in out
    assert "renderer role_colon" in out and "success: reward >= 1" in out
    assert "8 scenarios x 8 samples: 64 rollouts ran now, 0 kept from before" in out
    for metric, method in (("pass@1", "bootstrap95"), ("pass@8", "wilson95")):
        line = next(x for x in out.splitlines() if x.startswith(metric))
        assert method in line and "[" in line  # value, 95% interval, its method
    assert next(x for x in out.splitlines() if x.startswith("mean@8"))
    rows = sqlite3.connect(db).execute("SELECT count(*) FROM eval_rollouts").fetchone()
    assert rows == (64,)


def test_an_eval_whose_every_rollout_failed_exits_1_and_says_why(tmp_path, capsys):
    """A planted mistake (the grader always raises): the table has nothing measured, so
    the command says so on stderr and exits 1; a script must not read zeros as a score."""
    task = tmp_path / "word_task.py"
    task.write_text(textwrap.dedent(WORD_TASK).replace('scenario.id == "count-3" and ', ""))
    (tmp_path / "fail-count-3").touch()
    db = tmp_path / "runs.db"
    argv = ["eval", str(task), "--model", DEFAULT_BASE_MODEL, "--backend", "local"]
    code = main([*argv, "--db", str(db), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 1, captured.out
    assert "40 failed" in captured.out and "first failure: " in captured.out  # 5 x k=8
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("tinker-tui: eval failed: all 40 rollouts failed; the first: ")
    assert "flaky grader" in line and "Traceback" not in captured.err


def test_a_fresh_task_resumes_only_missing_or_failed_rollouts(tmp_path, capsys):
    task = tmp_path / "word_task.py"
    task.write_text(textwrap.dedent(WORD_TASK))
    flag = tmp_path / "fail-count-3"
    flag.touch()
    db = tmp_path / "runs.db"
    base = [str(task), "--model", DEFAULT_BASE_MODEL, "--backend", "local", "--db", str(db)]

    code, first = _eval(capsys, *base, "-k", "8", "--eval-temperature", "0.9")
    assert code == 0
    assert first["schema"] == "tinker-tui.eval/1"
    assert first["protocol"]["temperature"] == 0.9 and first["protocol"]["temperature_pinned"]
    assert first["protocol"]["k"] == 8 and first["protocol"]["split"] == "eval_scenarios"
    assert first["rollouts"] == {"ran": 40, "reused": 0, "failed": 8}
    assert "flaky grader" in first["first_error"]
    result = first["result"]
    assert result["scenarios"] == 4 and result["samples"] == 32  # count-3 had none
    for name in ("pass@1", "pass@8", "mean@8"):
        interval = result[name]
        assert interval["low"] <= interval["value"] <= interval["high"]
        assert interval["method"] in ("wilson95", "bootstrap95")

    flag.unlink()  # the grader works now: only count-3's 8 rollouts run again
    code, second = _eval(capsys, *base, "-k", "8", "--eval-temperature", "0.9")
    assert second["eval_id"] == first["eval_id"]
    assert second["rollouts"] == {"ran": 8, "reused": 32, "failed": 0}
    assert second["result"]["scenarios"] == 5 and second["result"]["samples"] == 40

    code, third = _eval(capsys, *base, "-k", "10", "--eval-temperature", "0.9")
    assert third["rollouts"] == {"ran": 10, "reused": 40, "failed": 0}  # 2 more each
    assert "pass@10" in third["result"] and "mean@10" in third["result"]

    code, other = _eval(capsys, *base, "-k", "8", "--eval-temperature", "0.5")
    assert other["eval_id"] != first["eval_id"]  # another protocol: its own rollouts
    assert other["rollouts"]["ran"] == 40 and other["protocol_key"] != first["protocol_key"]


def test_with_one_sample_per_scenario_pass_at_1_is_shown_once():
    from tinker_tui.app.commands.eval import format_result
    from tinker_tui.engine.store.eval_records import EvalTarget
    from tinker_tui.engine.training.standalone_eval import EvalResult

    summary = summarize({"a": [1.0], "b": [0.0], "c": [1.0]}, k=1, threshold=1.0)
    target = EvalTarget(task="t", task_spec="t", model="m", backend="local", base_model="m")
    result = EvalResult("eval-x", target, EvalProtocol(), summary, ran=3, reused=0)
    rows = [line for line in format_result(result).splitlines() if line.startswith("pass@")]
    assert len(rows) == 1 and "wilson95" in rows[0]  # as --json's pass@1
    assert summary.as_dict()["pass@1"]["method"] == "wilson95"


def test_a_rollout_that_returns_only_its_reward_is_evaluated_on_its_captured_turns(
    tmp_path, capsys
):
    """As in a run, each rollout's client files its requests under a key of its own."""
    task = tmp_path / "word_task.py"
    task.write_text(
        textwrap.dedent(WORD_TASK).replace(
            "return Trajectory.from_choices([choice], reward=reward)", "return reward"
        )
    )
    code, result = _eval(
        capsys,
        str(task),
        "--model",
        DEFAULT_BASE_MODEL,
        "--backend",
        "local",
        "-k",
        "2",
        "--db",
        str(tmp_path / "runs.db"),
    )
    assert code == 0 and result["rollouts"] == {"ran": 10, "reused": 0, "failed": 0}, result


def test_a_runs_checkpoint_defaults_to_its_evaluations_protocol_and_says_so():
    """Flags left out take the run's eval settings when it set any, its evaluations'
    protocol whole (the max_tokens it left unpinned is its default, unpinned), so the key
    is theirs; a run that set none, or a base model, gets the command's defaults."""
    from argparse import Namespace
    from dataclasses import replace

    from tinker_tui.app.commands.eval import choose_settings
    from tinker_tui.engine.sampling_defaults import SamplingDefaults
    from tinker_tui.engine.store.eval_records import EvalTarget
    from tinker_tui.engine.training.eval_protocol import RunEvalSettings

    def protocol(choice):
        return EvalProtocol.build(
            "role_colon",
            temperature=choice.temperature,
            max_tokens=choice.max_tokens,
            defaults=choice.defaults,
            k=choice.k,
            success_threshold=choice.success_threshold,
        )

    flags = dict(eval_temperature=None, eval_max_tokens=None, k=None, success_threshold=None)
    run = EvalTarget("t", "t", "r@2", "local", "m", model_path="m/ckpt", run_id="r", step=2)
    trained = {"temperature": 0.7, "max_tokens": 32}
    pinned = {**trained, "eval_temperature": 0.2, "eval_success_threshold": 0.5}
    theirs = RunEvalSettings.of(pinned).protocol("role_colon", SamplingDefaults(0.7, 32))

    choice = choose_settings(Namespace(**flags), run, pinned)
    assert protocol(choice).key() == theirs.key() and protocol(choice).k == 1
    assert not protocol(choice).max_tokens_pinned and protocol(choice).max_tokens == 32
    assert choice.origin() == "protocol from run r's eval settings"
    choice = choose_settings(Namespace(**{**flags, "k": 4}), run, pinned)
    assert protocol(choice) == replace(theirs, k=4)
    assert choice.origin() == "protocol from run r's eval settings, -k given"

    choice = choose_settings(Namespace(**flags), run, trained)
    assert protocol(choice) == EvalProtocol.build(
        "role_colon", temperature=1.0, max_tokens=1024, k=8
    )
    assert choice.origin() == "protocol from the command's defaults (run r set no eval settings)"
    base = replace(run, run_id="", step=None)
    choice = choose_settings(Namespace(**{**flags, "eval_temperature": 0.3}), base, {})
    assert choice.origin() == "protocol from the command's defaults, --eval-temperature given"
    all_flags = dict(eval_temperature=0.0, eval_max_tokens=9, k=2, success_threshold=0.5)
    assert choose_settings(Namespace(**all_flags), run, pinned).origin() == (
        "protocol from the flags given"
    )


def test_bad_eval_input_is_one_line_and_exit_2(tmp_path, capsys):
    db = tmp_path / "runs.db"
    cases = [
        (["example", "--model", "nosuchrun@3", "--db", str(db)], "no run store"),
        (["example", "--model", DEFAULT_BASE_MODEL, "--split", "train"], "scenarios:N"),
        (["example", "--model", DEFAULT_BASE_MODEL, "-k", "0"], "at least 1"),
    ]
    for args, words in cases:
        assert _exit_code(["eval", *args]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err


def _exit_code(argv: list[str]) -> int:
    """The command's exit code, argparse's usage errors (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


# ---------------------------------------------------------------------- compare and runs


async def _store_runs(db: Path) -> None:
    """Two runs whose evaluations sampled at different temperatures, a third like the
    first."""
    store = await RunStore.open(db)
    for index, (run_id, temperature) in enumerate((("run-a", 1.0), ("run-b", 0.7), ("run-c", 1.0))):
        t = 1000.0 + 100 * index
        config = {"temperature": temperature, "max_steps": 2}
        store.handle(
            RunStarted(
                time=t,
                run_id=run_id,
                name="yes_no_maybe",
                backend="local",
                base_model=DEFAULT_BASE_MODEL,
                max_steps=2,
                start_step=0,
                config=config,
            )
        )
        for step in (1, 2):
            store.handle(
                StepTrained(
                    time=t + step,
                    step=step,
                    policy_version=step,
                    metrics={keys.REWARD_MEAN: 0.5 + 0.1 * step},
                )
            )
        protocol = EvalProtocol(temperature=temperature, max_tokens=64, renderer="role_colon")
        store.handle(
            EvalCompleted(
                time=t + 3,
                step=2,
                policy_version=2,
                metrics={keys.EVAL_REWARD_MEAN: 0.6 + 0.1 * index},
                protocol=protocol.as_dict(),
            )
        )
        store.handle(RunFinished(time=t + 4, status="completed", final_step=2, reason="done"))
    await store.close()


def test_compare_and_runs_mark_or_refuse_evaluations_of_different_protocols(tmp_path, capsys):
    db = tmp_path / "runs.db"
    asyncio.run(_store_runs(db))

    assert main(["compare", "run-a", "run-b", "--db", str(db), "--no-ui"]) == 0
    out = capsys.readouterr().out
    assert "EVAL" in out and "0.600 eval mean P1" in out and "0.700 eval mean P2" in out
    assert "NOT comparable (they differ in temperature)" in out
    assert main(["compare", "run-a", "run-b", "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["eval_protocol_differs"] == ["temperature"]
    assert doc["runs"][1]["eval"]["protocol"]["temperature"] == 0.7

    args = ["compare", "run-a", "run-b", "--db", str(db), "--no-ui", "--same-eval-protocol"]
    assert main(args) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "different protocols" in err and "temperature" in err and "Traceback" not in err
    args = ["compare", "run-a", "run-c", "--db", str(db), "--no-ui", "--same-eval-protocol"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "0.600 eval mean" in out and "P1" not in out and "NOT comparable" not in out

    assert main(["runs", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "EVAL" in out and "P1" in out and "P2" in out
    assert "NOT comparable (they differ in temperature)" in out
    assert main(["runs", "--db", str(db), "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["run-b"]["eval"]["protocol"]["temperature"] == 0.7
    assert runs["run-a"]["eval"]["source"] == "run"


# ---------------------------------------------------------------------- evaluations during a run


def test_a_runs_evaluations_sample_with_its_eval_settings_under_the_commands_protocol(
    tmp_path, capsys
):
    """`eval_temperature`, `eval_max_tokens` and `eval_samples` on the real local backend:
    every evaluation of the run samples greedily (each question's samples all alike) and at
    most 2 tokens (the task asks 6, as its training rollouts get), k = 3 times per scenario;
    the stored protocol is the one `tinker-tui eval` builds from the same settings, whose
    numbers on the run's final checkpoint are the final evaluation's."""
    from tinker_tui.app.task_loader import layered_config, load_task
    from tinker_tui.engine.events import GroupSampled
    from tinker_tui.engine.run import Run

    db = tmp_path / "runs.db"
    task = load_task("example")
    config = layered_config(task, "local").with_overrides(
        {
            "max_steps": 1,
            "group_size": 4,
            "groups_per_step": 1,
            "eval_at_start": True,
            "eval_temperature": 0.0,
            "eval_max_tokens": 2,
            "eval_samples": 3,
        }
    )
    run = Run(task=task, config=config, backend="local", db_path=db)
    events = []
    run.events.subscribe(events.append)
    assert asyncio.run(run.run()) == "completed"

    evals = [e for e in events if isinstance(e, EvalCompleted)]
    assert [e.step for e in evals] == [0, 1]
    expected = EvalProtocol.build("role_colon", temperature=0.0, max_tokens=2, k=3)
    for done in evals:
        assert done.protocol == expected.as_dict()
        assert len(done.trajectories) == 8 * 3 and done.metrics[keys.EVAL_ERRORS] == 0
        assert max(t.num_tokens for t in done.trajectories) <= 2
        answers: dict[str, set[str]] = {}
        for scenario_id, t in zip(done.scenario_ids, done.trajectories, strict=True):
            question = scenario_id.rsplit("-", 1)[0]  # its two scenarios ask the same
            answers.setdefault(question, set()).add(t.messages[-1]["content"])
        assert len(answers) == 4 and all(len(a) == 1 for a in answers.values()), answers
    trained = [t for e in events if isinstance(e, GroupSampled) for t in e.trajectories]
    assert max(t.num_tokens for t in trained) > 2  # training kept the task's own max_tokens

    # `runs` shows the in-run evaluation under that protocol's key; `tinker-tui eval` with
    # the same settings on the final checkpoint gets the same key, and the same numbers
    assert main(["runs", "--db", str(db), "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["runs"]
    assert shown["eval"]["source"] == "run" and shown["eval"]["protocol_key"] == expected.key()
    args = ["example", "--model", f"{run.run_id}@1", "-k", "3", "--db", str(db)]
    code, doc = _eval(capsys, *args, "--eval-temperature", "0", "--eval-max-tokens", "2")
    assert code == 0 and doc["protocol_key"] == expected.key()
    assert doc["result"]["mean@3"]["value"] == pytest.approx(
        evals[-1].metrics[keys.EVAL_REWARD_MEAN]
    )
    assert [k for k, v in doc["protocol_source"].items() if v == "run"] == ["success_threshold"]

    # without the flags, the run's eval settings are the defaults: the same protocol, k
    # included (the rollouts of the call above are all kept); the output says so
    bare = ["example", "--model", f"{run.run_id}@1", "--db", str(db), "--no-progress"]
    assert main(["eval", *bare]) == 0
    out = capsys.readouterr().out
    assert f"protocol {expected.key()}: eval_scenarios, k=3" in out
    assert f"protocol from run {run.run_id}'s eval settings\n" in out
    assert "24 rollouts ran now" not in out and "0 rollouts ran now, 24 kept" in out
    # a flag given wins over the run's setting; the others stay the run's
    code, doc = _eval(capsys, *bare, "--eval-temperature", "0.5", "-k", "1")
    assert doc["protocol"] == {**expected.as_dict(), "temperature": 0.5, "k": 1}
    assert doc["protocol_source"] == {
        "temperature": "flag",
        "max_tokens": "run",
        "k": "flag",
        "success_threshold": "run",
    }


def test_a_runs_eval_settings_refuse_bad_values_in_one_line(tmp_path, capsys):
    db = tmp_path / "runs.db"
    for flag, value, words in (
        ("--eval-temperature", "-0.5", "eval_temperature must be -1"),
        ("--eval-temperature", "3", "eval_temperature must be between -1 and 2"),
        ("--eval-samples", "0", "eval_samples must be at least 1"),
    ):
        argv = ["run", "example", "--backend", "local", "--no-ui", "--db", str(db), flag, value]
        assert _exit_code(argv) == EXIT_USAGE
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not db.exists()  # refused before anything started


def test_a_model_folders_protocol_names_the_renderer_its_session_renders_with(
    qwen3_folder, tmp_path, capsys
):
    """A folder's renderer is chosen at the session's start from its chat template (Qwen3's
    cookbook renderer, which agrees with it), as a run's is: the protocol, named before the
    session starts, names that one, not the fallback for a name the cookbook does not know."""
    from transformers import AutoTokenizer

    from tinker_tui.engine.backend.choice import make_renderer

    _, at_start = make_renderer(str(qwen3_folder), AutoTokenizer.from_pretrained(qwen3_folder))
    assert at_start == "qwen3_instruct"
    args = ["example", "--model", str(qwen3_folder), "--backend", "local", "-k", "1"]
    args += ["--split", "scenarios:2", "--eval-max-tokens", "2", "--db", str(tmp_path / "r.db")]
    code, doc = _eval(capsys, *args)
    assert code == 0 and doc["rollouts"]["failed"] == 0, doc
    assert doc["protocol"]["renderer"] == at_start
    expected = EvalProtocol.build(at_start, temperature=1.0, max_tokens=2, split="scenarios:2")
    assert doc["protocol"] == expected.as_dict()


# ---------------------------------------------------------------------- token-level tasks


def _stored_answers(db: Path, eval_id: str) -> tuple[dict[str, set[str]], int]:
    """Each scenario's answers in the store, and the most tokens a rollout sampled."""
    rows = sqlite3.connect(db).execute(
        "SELECT scenario_id, num_tokens, messages FROM eval_rollouts WHERE eval_id = ? "
        "AND status = 'ok'",
        (eval_id,),
    )
    answers: dict[str, set[str]] = {}
    most = 0
    for scenario_id, num_tokens, messages in rows:
        log = [m["content"] for m in json.loads(messages) if m["role"] == "log"]
        answers.setdefault(scenario_id, set()).add(log[-1])
        most = max(most, num_tokens)
    return answers, most


def test_a_cookbook_env_task_is_evaluated_on_tokens_under_the_pinned_protocol(tmp_path, capsys):
    """A tinker-cookbook env (`Task.from_cookbook`) samples tokens, as in a run, never a chat
    client; its sampler honours the protocol: greedy (each question's samples alike) and
    at most 2 tokens, where its training asks the run's max_tokens."""
    db = tmp_path / "runs.db"
    args = ["cookbook_yes_no_maybe", "--model", DEFAULT_BASE_MODEL, "--backend", "local"]
    args += ["-k", "3", "--eval-temperature", "0", "--eval-max-tokens", "2", "--db", str(db)]
    code, doc = _eval(capsys, *args)
    assert code == 0
    assert doc["rollouts"] == {"ran": 12, "reused": 0, "failed": 0}, doc["first_error"]
    answers, most = _stored_answers(db, doc["eval_id"])
    assert len(answers) == 4 and all(len(a) == 1 for a in answers.values()), answers
    assert most == 2


# ---------------------------------------------------------------------- Tinker side


def test_a_tinker_runs_checkpoint_and_a_base_model_through_the_sdk_and_the_double(
    tmp_path, capsys, monkeypatch
):
    """A one-step run on the Tinker backend (the real SDK, the service double) keeps a
    checkpoint; `eval --model RUN@STEP` samples those weights through the SDK, on the run's
    backend and renderer, and stores its result with its protocol; a base model too. The
    double, as the service, samples sampler weights only: the run's full checkpoint must be
    loaded, not handed to a sampler."""
    with one_step_tinker_run(tmp_path, monkeypatch) as (double, db, run_id):
        capsys.readouterr()
        with sqlite3.connect(db) as conn:
            (path,) = conn.execute("SELECT path FROM checkpoints WHERE step = 1").fetchone()
        assert path.startswith("tinker://")

        args = ["example", "--model", f"{run_id}@1", "-k", "2", "--eval-temperature", "0.5"]
        code, doc = _eval(capsys, *args, "--db", str(db))
        assert code == 0
        assert doc["model"] == {
            "task": "yes_no_maybe",
            "task_spec": "example",
            "model": f"{run_id}@1",
            "backend": "tinker",
            "base_model": DEFAULT_BASE_MODEL,
            "model_path": path,
            "run_id": run_id,
            "step": 1,
        }
        assert doc["protocol"]["temperature"] == 0.5 and doc["protocol"]["renderer"] == "role_colon"
        # the run set no eval settings: the command's defaults for what no flag gave
        assert doc["protocol"]["max_tokens"] == 1024 and doc["protocol"]["max_tokens_pinned"]
        assert doc["protocol_source"]["max_tokens"] == "default"
        assert doc["rollouts"] == {"ran": 16, "reused": 0, "failed": 0}
        assert doc["result"]["samples"] == 16 and doc["result"]["mean@2"]["method"]
        # the checkpoint (a full state: the service samples sampler weights only) was
        # loaded in a training client of its own, as a resumed run loads it
        loads = [c for c in double.service.calls if c[:2] == ("POST", "load_weights")]
        assert len(loads) == 1 and loads[0][-1] == 200, double.service.calls
        assert main(["runs", "--db", str(db), "--json"]) == 0
        (shown,) = json.loads(capsys.readouterr().out)["runs"]
        assert shown["eval"]["source"] == "eval" and shown["eval"]["step"] == 1
        assert shown["eval"]["protocol_key"] == doc["protocol_key"]

        args = ["example", "--model", DEFAULT_BASE_MODEL, "--backend", "tinker", "-k", "2"]
        code, doc = _eval(capsys, *args, "--db", str(db))
        assert code == 0
        assert doc["model"]["backend"] == "tinker" and doc["model"]["model_path"] == ""
        assert doc["rollouts"] == {"ran": 16, "reused": 0, "failed": 0}
        # sampled by a sampler the SDK made on the base model itself, not a trained one
        sampler = list(double.service.samplers.values())[-1]
        assert sampler.model_path is None and sampler.base_model == DEFAULT_BASE_MODEL
        code, again = _eval(capsys, *args, "--db", str(db))
        assert again["rollouts"] == {"ran": 0, "reused": 16, "failed": 0}
        # every session the evaluations opened was closed
        finished = [s.finished for s in double.service.sessions.values()]
        assert len(finished) == 3 and None not in finished


def test_a_cookbook_env_task_is_evaluated_through_the_sdk_and_the_double(
    tmp_path, capsys, monkeypatch
):
    """The token sampler through the real SDK: a one-step cookbook run on the double, then
    `eval RUN@STEP` (its full checkpoint loaded) and the base model, each greedy and capped
    as its protocol says."""
    with one_step_tinker_run(tmp_path, monkeypatch, "cookbook_yes_no_maybe") as (
        double,
        db,
        run_id,
    ):
        capsys.readouterr()
        pins = ["-k", "2", "--eval-temperature", "0", "--eval-max-tokens", "2", "--db", str(db)]
        for model in (f"{run_id}@1", DEFAULT_BASE_MODEL):
            args = ["cookbook_yes_no_maybe", "--model", model, *pins]
            code, doc = _eval(capsys, *args, *(["--backend", "tinker"] if "@" not in model else []))
            assert code == 0 and doc["model"]["backend"] == "tinker"
            assert doc["rollouts"] == {"ran": 8, "reused": 0, "failed": 0}, doc["first_error"]
            answers, most = _stored_answers(db, doc["eval_id"])
            assert len(answers) == 4 and all(len(a) == 1 for a in answers.values()), answers
            assert most == 2
        loads = [c for c in double.service.calls if c[:2] == ("POST", "load_weights")]
        assert len(loads) == 1 and loads[0][-1] == 200


def test_a_backend_failure_says_the_evaluation_failed_in_one_line(tmp_path, capsys, monkeypatch):
    """The service refuses the evaluation's sampler: `eval failed: ...` (not "run failed"),
    one line besides the session's warning, no traceback, exit 1."""
    from tinker_double import Burst, Faults, TinkerDouble

    faults = Faults(fail={"create_sampling_session": Burst(400)})
    with TinkerDouble(tmp_path / "service", faults=faults) as double:
        for name, value in double.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("TINKER_TUI_DEBUG", raising=False)
        args = ["eval", "example", "--model", DEFAULT_BASE_MODEL, "--backend", "tinker"]
        assert main([*args, "--db", str(tmp_path / "runs.db"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("tinker-tui: eval failed: BadRequestError: "), err
    assert "run failed" not in err and "Traceback" not in err


async def test_the_protocol_is_pinned_on_every_request_the_tasks_own_values_included(tmp_path):
    """The policy server of an evaluation samples at the protocol's temperature whatever a
    request asks, and caps its max_tokens; a run's server keeps the request's own."""
    from tinker_tui.engine.backend.session import BackendSession
    from tinker_tui.engine.local import LocalServiceClient
    from tinker_tui.engine.sampling_defaults import SamplingDefaults
    from tinker_tui.engine.server import PolicyServer

    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    await session.start()
    asked = []
    sample = session.sample

    async def spy(prompt, num_samples, sampling_params, **kwargs):
        asked.append((sampling_params.temperature, sampling_params.max_tokens))
        return await sample(prompt, num_samples, sampling_params, **kwargs)

    session.sample = spy  # type: ignore[method-assign]
    question = [{"role": "user", "content": "Is it? Answer yes or no."}]
    for pinned in (True, False):
        defaults = SamplingDefaults(
            temperature=0.3, max_tokens=3, pin_temperature=pinned, cap_max_tokens=pinned
        )
        server = PolicyServer(session, model_name="policy", defaults=defaults)
        await server.start()
        try:
            client = server.client()
            await client.chat.completions.create(
                model="policy", messages=question, temperature=1.5, max_tokens=20
            )
        finally:
            await server.stop()
    assert asked == [(0.3, 3), (1.5, 20)]


async def test_a_token_level_rollouts_sampler_keeps_the_same_pins():
    """A token-level task's sampler (cookbook envs: no policy server) applies an
    evaluation's pinned temperature and max_tokens cap as the server does."""
    from types import SimpleNamespace

    from tinker_tui.engine.backend.direct_sampler import DirectSampler
    from tinker_tui.engine.sampling_defaults import SamplingDefaults

    asked = []

    class Policy:
        end_tokens = (0,)

        async def sample(self, prompt, num_samples, params, **kwargs):
            asked.append((params.temperature, params.max_tokens))
            sequence = SimpleNamespace(stop_reason="stop", tokens=[5, 0], logprobs=[0.0, 0.0])
            return SimpleNamespace(sequences=[sequence]), 3

    for pinned in (True, False):
        defaults = SamplingDefaults(
            temperature=0.3, max_tokens=3, pin_temperature=pinned, cap_max_tokens=pinned
        )
        sampler = DirectSampler(Policy(), defaults, tokenizer=None)
        await sampler.sample([1, 2], temperature=1.5, max_tokens=20)
    assert asked == [(0.3, 3), (1.5, 20)]
