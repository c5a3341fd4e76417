"""`tinker-tui mcp`, driven by the official MCP client over stdio on a live local run
(`run example --no-ui`, the local backend): it lists the run and reads its metrics, health,
rollouts, log, scenario board and a step's signals; without `--allow-control` its acting tools refuse and the run goes on;
with it, it pauses and resumes the run, which the store then records. Also `agent-skill`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from tinker_tui.app.commands.agent_skill import skill_text  # noqa: E402
from tinker_tui.app.mcp_server import build_server  # noqa: E402
from tinker_tui.app.run_reading import metrics_window, read_run  # noqa: E402
from tinker_tui.engine.control.client import find_control_files  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ACTING = {
    "pause_run",
    "resume_run",
    "checkpoint_run",
    "evaluate_run",
    "set_knob",
    "rollback_run",
    "stop_run",
}
READING = {
    "list_runs",
    "run_metrics",
    "run_health",
    "run_rollouts",
    "run_log",
    "run_status",
    "scenario_board",
    "step_signals",
}


def environment() -> dict[str, str]:
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    env.pop("TINKER_API_KEY", None)
    return env


@asynccontextmanager
async def mcp_session(db: Path, *extra: str):
    """An initialized MCP client session on `tinker-tui mcp --db DB EXTRA` in a child."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tinker_tui.app.cli", "mcp", "--db", str(db), *extra],
        env=environment(),
        cwd=str(ROOT),
    )
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content}"
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert isinstance(data, dict)
    return data


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, f"{tool} was not refused: {result}"
    return result.content[0].text  # type: ignore[union-attr]


async def until(predicate, what: str, proc: subprocess.Popen, timeout: float) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not await predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_mcp_reads_a_live_local_run_and_steers_it_only_when_allowed(tmp_path):
    db = tmp_path / "runs.db"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--no-ui",
            "--steps",
            "2000",
            "--warmup-steps",
            "0",
            "--checkpoint-every",
            "0",
            "--db",
            str(db),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
        cwd=ROOT,
    )
    try:

        async def has_endpoint() -> bool:
            return bool(find_control_files(db))

        await until(has_endpoint, "the run's control endpoint", proc, 150)

        async with mcp_session(db) as session:
            tools = {t.name for t in (await session.list_tools()).tools}
            assert READING | ACTING <= tools
            (skill,) = (await session.read_resource("tinker-tui://agent-skill")).contents
            assert skill.text == skill_text()  # type: ignore[union-attr]

            async def two_steps() -> bool:
                runs = (await call(session, "list_runs"))["runs"]
                return bool(runs) and runs[0]["step"] >= 2

            await until(two_steps, "two steps in the store", proc, 120)
            (run,) = (await call(session, "list_runs"))["runs"]
            assert run["task"] == "yes_no_maybe" and run["controllable"] is True
            assert run["status"] == "running"
            run_id = run["run_id"]

            metrics = await call(session, "run_metrics", run=run_id[:12], last=5)
            assert metrics["run_id"] == run_id and 1 <= len(metrics["steps"]) <= 5
            assert all(isinstance(s["reward/mean"], float) for s in metrics["steps"])
            assert "reward/mean" in metrics["available"]
            health = await call(session, "run_health")
            assert health["run_id"] == run_id and health["live"] is True
            assert health["health"] in ("learning", "converged", "no_signal", "none")
            assert health["words"]
            worst = await call(session, "run_rollouts", which="worst", count=2)
            best = await call(session, "run_rollouts", step=worst["step"], which="best", count=2)
            assert worst["rollouts"] and best["rollouts"]
            assert worst["rollouts"][0]["reward"] <= best["rollouts"][0]["reward"]
            assert worst["rollouts"][0]["messages"]
            log = await call(session, "run_log", lines=5)
            assert 1 <= len(log["lines"]) <= 5
            assert "no rollouts of step 99999" in await refused(session, "run_rollouts", step=99999)
            assert "no run 'nosuchrun'" in await refused(session, "run_health", run="nosuchrun")

            # without --allow-control: every acting tool refuses, the run goes on
            for tool, arguments in (
                ("pause_run", {}),
                ("stop_run", {}),
                ("set_knob", {"name": "temperature", "value": 0.5}),
            ):
                assert "--allow-control" in await refused(session, tool, **arguments)
            status = await call(session, "run_status")
            assert status["state"]["paused"] is False and status["state"]["stopping"] is False
            assert status["state"]["knobs"]["temperature"] == 1.0

        async with mcp_session(db, "--allow-control") as session:
            paused = await call(session, "pause_run", reason="an agent looks")
            assert paused["run_id"] == run_id and paused["state"]["paused"] is True

            async def recorded_paused() -> bool:
                return (await call(session, "run_health"))["state"] == "paused"

            await until(recorded_paused, "the pause in the store", proc, 30)
            assert (await call(session, "run_health"))["reason"] == "an agent looks"
            # the server's fold, read a little at a time, is the fold of the whole record
            cached = (await call(session, "run_metrics", metrics=["all"], last=500))["steps"]
            fresh = metrics_window(await read_run(db, run_id), ["all"], last=500)["steps"]
            # (the last step's row may still gain its eval's metrics)
            assert len(cached) >= 3 and fresh[: len(cached) - 1] == cached[:-1]
            assert (await call(session, "list_runs"))["runs"][0]["status"] == "paused"
            changed = await call(session, "set_knob", name="temperature", value=0.8)
            assert changed["state"]["knobs"]["temperature"] == 0.8
            assert "learning_rate must be between 0 and 1" in await refused(
                session, "set_knob", name="learning_rate", value=5.0
            )
            # no checkpoint (--checkpoint-every 0): the run would only log a warning
            assert "nothing to roll back to" in await refused(session, "rollback_run")
            resumed = await call(session, "resume_run", run=run_id)
            assert resumed["state"]["paused"] is False

            async def recorded_running() -> bool:
                return (await call(session, "run_health"))["state"] == "running"

            await until(recorded_running, "the resume in the store", proc, 30)
            stopped = await call(session, "stop_run", reason="test over")
            assert stopped["state"]["stopping"] is True
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "paused: an agent looks" in out and "stopped at step" in out
        async with mcp_session(db) as session:  # the stopped run, checked against the store
            await check_board_and_signals(session, db, run_id)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


async def check_board_and_signals(session: ClientSession, db: Path, run_id: str) -> None:
    """scenario_board and step_signals of a finished run agree with the store's rows."""
    import sqlite3

    from tinker_tui.app.signal_maths import classify

    with sqlite3.connect(db) as con:
        drawn = dict(
            con.execute(
                "SELECT scenario_id, COUNT(*) FROM sampled_groups "
                "WHERE run_id = ? GROUP BY scenario_id",
                (run_id,),
            )
        )
        rewards: dict[str, list[float]] = {}
        for scenario, reward in con.execute(
            "SELECT g.scenario_id, t.reward FROM trajectories t JOIN sampled_groups g "
            "ON g.run_id = t.run_id AND g.group_id = t.group_id WHERE t.run_id = ?",
            (run_id,),
        ):
            rewards.setdefault(scenario, []).append(reward)
        no_signal = dict(
            con.execute(
                "SELECT scenario_id, COUNT(*) FROM discarded_groups WHERE run_id = ? AND "
                "reason = 'zero_variance' GROUP BY scenario_id",
                (run_id,),
            )
        )
    best = max(r for rs in rewards.values() for r in rs)
    board = await call(session, "scenario_board", order="drawn", count=200)
    assert board["scenarios_total"] == len(drawn) and board["pass_reward"] == best
    rows = board["scenarios"]
    assert {r["scenario_id"]: r["drawn"] for r in rows} == drawn
    assert [r["drawn"] for r in rows] == sorted(drawn.values(), reverse=True)
    for row in rows:
        got = rewards[row["scenario_id"]]
        assert row["rollouts"] == len(got)
        assert row["mean_reward"] == pytest.approx(sum(got) / len(got))
        passed = sum(r >= best - 1e-9 for r in got) / len(got)
        assert row["pass_rate"] == pytest.approx(passed)
        assert row["class"] == classify(passed)
        assert row["no_signal_groups"] == no_signal.get(row["scenario_id"], 0)
    assert sum(board["classes"].values()) == len(drawn)
    by_rate = await call(session, "scenario_board", order="pass rate", count=3)
    rates = [r["pass_rate"] for r in by_rate["scenarios"]]
    assert len(rates) == min(3, len(drawn)) and rates == sorted(rates, reverse=True)
    some = rows[0]["class"]
    only = await call(session, "scenario_board", kind=some)
    assert only["matching"] == board["classes"][some]
    assert {r["class"] for r in only["scenarios"]} == {some}

    signals = await call(session, "step_signals")
    step = signals["step"]
    funnel = signals["funnel"]
    assert funnel["step"] == step and funnel["groups"] >= 1
    assert funnel["groups"] == (
        funnel["trained"] + funnel["no_signal"] + funnel["stale"] + funnel["failed"]
    )
    stored = (await call(session, "run_metrics", metrics=["all"], since_step=step))["steps"][0]
    assert stored["step"] == step
    for key in ("env/zero_variance_frac", "tokens/response_len_p50"):
        assert signals["metrics"][key] == stored[key]
    if "reward" in signals["histograms"]:
        assert sum(signals["histograms"]["reward"]["counts"]) > 0
    assert "has not trained step 99999" in await refused(session, "step_signals", step=99999)


async def test_the_mcp_tools_and_the_skill_file_agree():
    """The skill file ships in the package, `agent-skill` prints it, and it names every tool
    the server has (an agent reads the one to use the other)."""
    from tinker_tui.app.cli import main

    server = build_server(Path("runs.db"))
    names = {t.name for t in await server.list_tools()}
    assert names == READING | ACTING
    text = skill_text()
    assert text.startswith("---\nname: ")
    assert [n for n in sorted(names) if f"`{n}`" not in text] == []
    out = subprocess.run(
        [sys.executable, "-m", "tinker_tui.app.cli", "agent-skill"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment(),
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout == text
    assert main(["agent-skill"]) == 0


def test_without_the_sdk_mcp_says_which_extra_to_install():
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "from tinker_tui.app.cli import main\n"
        "sys.exit(main(['mcp']))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment(),
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr == (
        'tinker-tui: error: `tinker-tui mcp` needs the MCP SDK: pip install "tinker-tui[mcp]"\n'
    )
