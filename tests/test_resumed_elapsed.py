"""A resumed run's elapsed time is the time it ran: the hours it was down between its
processes are not counted, on the step lines printed live and by `show` alike (the store
keeps one `RunStarted` a run: a later process is known by its `SessionStarted`)."""

from __future__ import annotations

import io

from tinker_tui.app.headless import HeadlessReporter
from tinker_tui.engine.events import (
    Event,
    LogEmitted,
    RunFinished,
    RunResumed,
    RunStarted,
    SessionStarted,
    StepTrained,
)


def begins(time: float) -> SessionStarted:
    return SessionStarted(time=time, backend="local", base_model="m")


def started(time: float, start_step: int) -> RunStarted:
    return RunStarted(
        time=time,
        run_id="r",
        name="t",
        backend="local",
        base_model="m",
        max_steps=4,
        start_step=start_step,
    )


FIRST: list[Event] = [
    begins(-0.5),
    started(0.0, 0),
    StepTrained(time=10.0, step=1, policy_version=1, metrics={}),
    RunFinished(time=11.0, status="stopped", final_step=1),
]
#: An hour later: the resume's first log line, its start, a step.
SECOND: list[Event] = [
    begins(3599.5),
    started(3600.0, 1),
    StepTrained(time=3605.0, step=2, policy_version=2, metrics={}),
]


def elapsed(reporter: HeadlessReporter) -> list[str]:
    return [
        line.rsplit("elapsed ", 1)[1]
        for line in reporter.out.getvalue().splitlines()
        if line.startswith("step ")
    ]


def test_live_and_shown_step_lines_leave_the_down_time_out():
    shown = HeadlessReporter(out=io.StringIO())
    for event in FIRST + [e for e in SECOND if not isinstance(e, RunStarted)]:
        shown.handle(event)
    live = HeadlessReporter(out=io.StringIO())
    live.remember([e for e in FIRST if not isinstance(e, LogEmitted)])  # as read_earlier
    for event in SECOND:
        live.handle(event)
    # 10 s to the first process's last step, then 5.5 s since the resume's first line
    assert elapsed(shown) == ["10.0s", "15.5s"]
    assert elapsed(live) == ["15.5s"]


def test_a_headless_resume_says_what_it_does_again():
    """The resume's event existed; a headless `--resume` did not print it. A log line
    that only reads like one is not it."""
    resumed = RunResumed(
        time=1.0,
        run_id="r",
        step=10,
        checkpoint="step-000010",
        steps_undone=2,
        groups_requeued=3,
        scenarios_pending=1,
    )
    reporter = HeadlessReporter(out=io.StringIO())
    reporter.handle(resumed)
    reporter.handle(LogEmitted(time=2.0, level="info", message="resuming run r: nothing"))
    assert reporter.out.getvalue().splitlines() == [resumed.message]
    assert "2" in resumed.message and "step-000010" in resumed.message


def test_the_dashboard_leaves_the_down_time_out_of_elapsed():
    """`show` and `attach` read a resumed run's events back: its first start, its steps,
    then the resume's start an hour later (RunResumed says how long it was down)."""
    from tinker_tui.app.dashboard_state import DashboardState
    from tinker_tui.engine.clock import FakeClock

    model = DashboardState(FakeClock())
    for event in [
        *FIRST[:-1],
        begins(3599.5),
        RunResumed(time=3599.8, run_id="r", step=1, down_seconds=3599.5 - 10.0),
        StepTrained(time=3605.0, step=2, policy_version=2, metrics={}),
        RunFinished(time=3606.0, status="completed", final_step=2),
    ]:
        model.apply(event)
    # 10 s to the first process's last step, then 6.5 s since the resume began
    assert model.elapsed() == 16.5
    assert model.step_elapsed == {1: 10.0, 2: 15.5}
    assert model.since_start(3605.0) == "00:15"
