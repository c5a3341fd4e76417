"""`run --notify` / `--notify-command`: which typed events are alerts, what reaches the
terminal, the command's environment, and a real headless run that runs the command."""

import json
import os
import subprocess
import sys
import textwrap

from tinker_tui.app.notify import Alert, Notifier, alert_for, terminal_escapes
from tinker_tui.engine.events import (
    CommandReceived,
    GroupSampled,
    RunFinished,
    RunStarted,
    RunStateChanged,
)


def cmd(command, source, reason="why", t=1.0):
    return CommandReceived(time=t, command=command, args={"reason": reason}, source=source)


def test_alerts_come_from_sources_and_statuses_not_text():
    assert alert_for(cmd("pause", "user", reason="collapse budget failed")) is None
    assert alert_for(cmd("stop", "user")) is None
    assert alert_for(cmd("checkpoint", "engine")) is None
    assert alert_for(cmd("pause", "on_health_pause")).kind == "pause"
    assert alert_for(cmd("pause", "on_collapse")).kind == "collapse"
    assert alert_for(cmd("stop", "on_collapse")).kind == "collapse"
    assert alert_for(cmd("rollback", "on_collapse")).kind == "collapse"
    assert alert_for(cmd("stop", "engine", reason="budget reached")).kind == "stop"
    assert alert_for(cmd("stop", "on_health_pause")).kind == "stop"
    assert alert_for(RunFinished(time=1, status="failed", final_step=3)).kind == "failure"
    for status in ("completed", "stopped", "interrupted"):
        alert = alert_for(RunFinished(time=1, status=status, final_step=3))
        assert alert.kind == "finish" and status in alert.title
    # a run that stopped itself says why from its typed cause, whatever its reason's text
    for cause, words in (
        ("budget", "budget"),
        ("no_signal", "trained nothing"),
        ("health", "health"),
    ):
        alert = alert_for(
            RunFinished(time=1, status="completed", final_step=3, cause=cause, reason="completed")
        )
        assert alert.kind == "stop" and words in alert.title
    assert (
        alert_for(
            RunFinished(
                time=1, status="completed", final_step=3, cause="max_steps", reason="budget"
            )
        ).kind
        == "finish"
    )
    assert alert_for(RunStateChanged(time=1, state="paused", reason="x")) is None
    assert (
        alert_for(
            GroupSampled(
                time=1,
                group_id=0,
                scenario_id="s",
                policy_version=0,
                num_trajectories=1,
                num_tokens=1,
                reward_mean=0.0,
            )
        )
        is None
    )


def test_the_terminal_gets_a_bell_and_both_desktop_escapes():
    text = terminal_escapes(Alert("finish", "run completed", "step 5; all\x1b[31m good"), run="r1")
    assert text.startswith("\a")
    assert "\x1b]9;tinker-tui r1: run completed: step 5; all [31m good\x07" in text
    assert "\x1b]777;notify;tinker-tui r1: run completed;step 5, all [31m good\x07" in text
    assert text.count("\x1b") == 2  # the message's own escape is gone
    wrapped = terminal_escapes(Alert("pause", "run paused", "x"), tmux=True)
    assert wrapped.startswith("\a\x1bPtmux;\x1b\x1b]9;") and wrapped.endswith("\x07\x1b\\")


def test_the_notifier_writes_runs_the_command_and_skips_replayed_events():
    written, spawned = [], []

    def spawn(command, **kwargs):
        spawned.append((command, kwargs["env"]))

        class Done:
            def poll(self):
                return 0

        return Done()

    n = Notifier(
        write=written.append, command="notify-me", since=10.0, spawn=spawn, environ={"PATH": "/bin"}
    )
    n.handle(
        RunStarted(
            time=0,
            run_id="r1",
            name="t",
            backend="local",
            base_model="m",
            max_steps=5,
            start_step=0,
        )
    )
    n.handle(RunFinished(time=5.0, status="completed", final_step=2))  # an earlier process's
    n.handle(cmd("pause", "on_health_pause", reason="half the groups failed", t=11.0))
    n.handle(cmd("pause", "user", t=12.0))
    assert [a.kind for a in n.sent] == ["pause"]
    assert len(written) == 1 and "tinker-tui r1: run paused" in written[0]
    [(command, env)] = spawned
    assert command == "notify-me" and env["PATH"] == "/bin"
    assert env["TINKER_TUI_ALERT"] == "pause" and env["TINKER_TUI_RUN"] == "r1"
    assert env["TINKER_TUI_MESSAGE"] == "half the groups failed"


def test_a_command_that_cannot_start_warns_once():
    warnings = []

    def spawn(command, **kwargs):
        raise FileNotFoundError(2, "No such file or directory")

    n = Notifier(command="x", spawn=spawn, warn=warnings.append)
    n.send(Alert("finish", "run completed", ""))
    n.send(Alert("finish", "run completed", ""))
    assert warnings == ["--notify-command could not start: No such file or directory"]


def test_a_headless_run_runs_the_notify_command_at_its_finish(tmp_path):
    out = tmp_path / "alerts.jsonl"
    script = tmp_path / "record.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, os
        with open({str(out)!r}, "a") as f:
            f.write(json.dumps({{k: os.environ[k] for k in ("TINKER_TUI_ALERT",
                                 "TINKER_TUI_TITLE", "TINKER_TUI_RUN")}}) + "\\n")
    """)
    )
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TINKER_API_KEY", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--no-ui",
            "--steps",
            "2",
            "--db",
            str(tmp_path / "runs.db"),
            "--notify",
            "--notify-command",
            f"{sys.executable} {script}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "\x1b]9;" not in done.stdout  # not a terminal: no escapes in the output
    for _ in range(100):  # the command runs on its own; give it a moment
        if out.exists() and out.read_text().strip():
            break
        subprocess.run(["sleep", "0.1"])
    [alert] = [json.loads(line) for line in out.read_text().splitlines()]
    assert alert["TINKER_TUI_ALERT"] == "finish"
    assert alert["TINKER_TUI_TITLE"] == "run completed" and alert["TINKER_TUI_RUN"]


async def test_the_dashboard_sends_the_runs_alerts_through_its_own_output():
    import asyncio

    from fake_session import FakeSession, finished_events

    from tinker_tui.app.tui import TinkerTuiApp

    session = FakeSession(script=finished_events)
    notifier = Notifier(terminal=True)
    app = TinkerTuiApp(session, clock=session.clock, refresh_interval=0.05, notifier=notifier)
    async with app.run_test(size=(80, 24)) as pilot:
        await asyncio.wait_for(session.script_done.wait(), timeout=10)
        await pilot.pause()
        assert [a.kind for a in notifier.sent] == ["finish"]
        assert notifier.write is not None  # the app's terminal (nothing written headless)
        notifier.send(Alert("pause", "run paused", "x"))  # headless: not written anywhere
