"""A live knob change survives `--resume`: the resumed run continues with the knobs as they
were at its checkpoint (it went back to the settings the run started with, silently); a flag
on the resume command line still wins, and the run's log says which came from where."""

import asyncio

from tinker_tui.app.cli import build_parser
from tinker_tui.app.commands.run import build_session, plan_run
from tinker_tui.engine.events import LogEmitted, StepTrained


def _args(db, *extra):
    return build_parser().parse_args(["run", "example", "--no-ui", "--db", str(db), *extra])


async def _train(session, *, change_at=None, stop_at=None):
    steps, logs = [], []

    def watch(event):
        if isinstance(event, StepTrained):
            steps.append(event)
            if event.step == change_at:
                session.control.set_knob("learning_rate", 0.0007)  # as the control endpoint does
            if event.step == stop_at:
                session.control.stop("test")
        elif isinstance(event, LogEmitted):
            logs.append(event)

    session.events.subscribe(watch)
    status = await asyncio.wait_for(session.run(), 300)
    return status, steps, logs


async def test_a_knob_changed_live_survives_a_resume_and_a_flag_still_wins(tmp_path):
    db = tmp_path / "runs.db"
    first = build_session(
        plan_run(
            _args(
                db,
                "--steps",
                "6",
                "--warmup-steps",
                "0",
                "--learning-rate",
                "0.003",
                "--eval-every",
                "0",
            )
        )
    )
    status, steps, _ = await _train(first, change_at=2, stop_at=4)
    assert status == "stopped"
    assert steps[0].metrics["optim/lr"] == 0.003 and steps[-1].metrics["optim/lr"] == 0.0007
    stopped_at = steps[-1].step

    # plan_run reads the store with asyncio.run, as the command does before its loop runs
    plan = await asyncio.to_thread(plan_run, _args(db, "--resume", first.run_id, "--steps", "8"))
    assert plan.config.learning_rate == 0.0007
    (note,) = plan.resume_notes
    assert note == (
        f"knobs as they were at checkpoint step-{stopped_at:06d}: learning_rate "
        "0.0007 (was 0.003); a flag on the command line overrides one"
    )
    status, steps, logs = await _train(build_session(plan))
    assert status == "completed"
    assert {e.metrics["optim/lr"] for e in steps} == {0.0007}  # not 0.003 again
    assert any(e.level == "warning" and e.message == note for e in logs)

    # a flag given on the resume command line wins, and says so
    plan = await asyncio.to_thread(
        plan_run, _args(db, "--resume", first.run_id, "--steps", "9", "--learning-rate", "0.002")
    )
    assert plan.config.learning_rate == 0.002
    assert plan.resume_notes == (
        "--learning-rate 0.002 on the command line wins over "
        "learning_rate 0.0007 at the checkpoint",
    )
