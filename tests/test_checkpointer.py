"""When a run writes a full checkpoint and which one a rollback goes back to
(engine.training.checkpointer), decided on a real health window; writing one is the
pipeline tests'."""

from __future__ import annotations

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import EventBus
from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient
from tinker_tui.engine.metrics.health import HealthWindow
from tinker_tui.engine.training.checkpointer import Checkpointer
from tinker_tui.engine.training.resume import ResumeState


def make(tmp_path, **settings) -> Checkpointer:
    config = RunConfig(**settings)
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    return Checkpointer(
        config=config, session=session, health=HealthWindow(8), bus=EventBus(), clock=FakeClock()
    )


def step(checkpointer: Checkpointer, at: int, reward: float) -> str | None:
    """Count a trained step on the health window; what `due` says after it."""
    best_before = checkpointer.health.best_step
    checkpointer.health.stepped(at, reward, 0.0)
    return checkpointer.due(at, best_before)


def state(at: int) -> ResumeState:
    return ResumeState(
        step=at,
        policy_version=at,
        next_position=0,
        pending=(),
        next_group_id=0,
        rng_state=None,
        warmup_done=True,
        knobs={},
    )


def test_periodic_and_requested_checkpoints_but_none_at_the_last_step(tmp_path):
    checkpointer = make(tmp_path, checkpoint_every=5, max_steps=10)
    assert [step(checkpointer, s, 0.0) for s in range(1, 11)] == [None] * 4 + ["periodic"] + [
        None
    ] * 4 + [None]  # step 10 is the final checkpoint's
    checkpointer.requested = True
    assert checkpointer.due(3, checkpointer.health.best_step) == "requested"


def test_a_new_best_step_is_checkpointed_from_checkpoint_every_on_a_third_apart(tmp_path):
    checkpointer = make(tmp_path, checkpoint_every=12, max_steps=100)
    rising = [step(checkpointer, s, s / 100) for s in range(1, 12)]
    assert rising == [None] * 11  # the first steps beat the best all the time
    assert step(checkpointer, 12, 0.12) == "periodic"
    checkpointer.last_step = 12
    # A third of checkpoint_every (4 steps) after the last full checkpoint, at a new best.
    assert [step(checkpointer, s, s / 100) for s in range(13, 17)] == [
        None,
        None,
        None,
        "best step so far",
    ]
    checkpointer.last_step = 16
    assert step(checkpointer, 17, 0.05) is None  # no new best
    assert step(checkpointer, 18, 0.01) is None
    assert step(checkpointer, 20, 0.50) == "best step so far"


def test_a_short_checkpoint_every_needs_no_best_step_checkpoints(tmp_path):
    checkpointer = make(tmp_path, checkpoint_every=3, max_steps=100)
    assert [step(checkpointer, s, s / 10) for s in range(1, 8)] == [
        None,
        None,
        "periodic",
        None,
        None,
        "periodic",
        None,
    ]


def test_the_rollback_target_is_the_last_checkpoint_at_or_before_the_best_step(tmp_path):
    checkpointer = make(tmp_path, checkpoint_every=5, max_steps=100)
    assert checkpointer.rollback_target() is None
    for s, reward in enumerate([0.1, 0.2, 0.3, 0.6, 0.5, 0.4, 0.2], start=1):
        checkpointer.health.stepped(s, reward, 0.0)
    checkpointer.adopt(2, "step-000002", "tinker://run/weights/step-000002", state(2))
    checkpointer.adopt(3, "step-000003", "tinker://run/weights/step-000003", state(3))
    checkpointer.adopt(6, "step-000006", "tinker://run/weights/step-000006", state(6))
    assert checkpointer.rollback_target() == (3, "step-000003")  # best is step 4
    checkpointer.keep_rollback_point()
    assert checkpointer.session.retention.keep_state_step == 3  # the retention policy keeps it
    checkpointer.rewound(2)
    assert sorted(checkpointer.table) == [2]
    assert checkpointer.rollback_target() is None  # the health window still names step 3
    checkpointer.health.rewind(2)
    assert checkpointer.rollback_target() == (2, "step-000002")


def test_a_restored_start_state_has_no_checkpoint_of_its_step(tmp_path):
    checkpointer = make(tmp_path)
    checkpointer.restored(state(7))
    assert checkpointer.last_step == 7
    checkpointer.restored(
        ResumeState(
            step=0,
            policy_version=0,
            next_position=0,
            pending=(),
            next_group_id=0,
            rng_state=None,
            warmup_done=False,
            knobs={},
        )
    )
    assert checkpointer.last_step is None


def test_the_rollback_target_is_not_the_checkpoint_holding_the_best_steps_update(tmp_path):
    checkpointer = make(tmp_path, checkpoint_every=1, max_steps=100)
    for s, reward in enumerate([0.1, 0.2, 0.9, 0.0], start=1):
        checkpointer.health.stepped(s, reward, 0.0, sampled_by=s - 1)
        checkpointer.adopt(s, f"step-{s:06d}", f"tinker://run/weights/step-{s:06d}", state(s))
    assert checkpointer.rollback_target() == (2, "step-000002")  # sampled step 3
    checkpointer.keep_rollback_point()
    assert checkpointer.session.retention.keep_state_step == 2


async def test_a_requested_checkpoint_survives_retention_and_says_it_was_asked_for(tmp_path):
    """`c` (or the control endpoint) asks for a checkpoint: retention
    (`keep_last_checkpoints`) keeps it however many follow; `c` on a step checkpointed
    already marks that one."""
    from tinker_tui.engine.events import CheckpointSaved

    checkpointer = make(tmp_path, checkpoint_every=1, max_steps=100)
    checkpointer.session.retention.keep_last = 2
    saved: list[CheckpointSaved] = []
    checkpointer.bus.subscribe(
        lambda e: saved.append(e) if isinstance(e, CheckpointSaved) else None
    )
    session = checkpointer.session
    await session.start()

    async def write(at: int, why: str) -> None:
        checkpointer.requested = why == "requested"
        await checkpointer.write(at, why, lambda: state(at), warmup_done=True)

    await write(1, "periodic")
    await write(2, "requested")
    for at in range(3, 7):
        await write(at, "periodic")
    assert [(e.step, e.requested) for e in saved] == [
        (1, False),
        (2, True),
        (3, False),
        (4, False),
        (5, False),
        (6, False),
    ]
    kept = [c.step for c in session.checkpoints if c.kind == "state"]
    assert kept == [2, 5, 6]  # the asked-for one, and the last two
    assert {p.name for p in tmp_path.glob("*/weights/*")} == {
        "step-000002",
        "step-000005",
        "step-000006",
    }

    await write(6, "requested")  # asked for at a step checkpointed already: that one
    assert (saved[-1].step, saved[-1].requested, saved[-1].path) == (6, True, saved[-2].path)
    for at in range(7, 10):
        await write(at, "periodic")
    assert [c.step for c in session.checkpoints if c.kind == "state"] == [2, 6, 8, 9]


async def test_a_checkpoint_being_written_is_not_called_written(tmp_path):
    """A stop while the checkpoint of step 180 was written said "step 180 is checkpointed
    already", and the checkpoint's line came after it."""
    import asyncio

    checkpointer = make(tmp_path)
    release = asyncio.Event()

    async def slow_save(name, *, step):
        await release.wait()
        return f"/x/{name}"

    checkpointer.session.save_state = slow_save
    writing = asyncio.ensure_future(
        checkpointer.write(7, "periodic", lambda: state(7), warmup_done=True)
    )
    await asyncio.sleep(0)
    assert checkpointer.writing == 7 and checkpointer.last_step == 7
    release.set()
    await writing
    assert checkpointer.writing is None and checkpointer.last_step == 7
