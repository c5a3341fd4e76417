"""W&B and TensorBoard trackers: what they write is what the store holds, they never slow or
stop a run, and a missing package stops a run before anything starts.

The W&B tests run W&B offline (no network, no login) and read its run folder back with
W&B's own record format (its protobuf `Record`s in the `.wandb` file); the TensorBoard ones
read the event files with TensorBoard's own event accumulator. Both need the optional
packages (`pip install -e ".[wandb,tensorboard]" tensorboard`; CI installs them) and are
skipped without them; the rest of this file needs neither.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from waiting import wait_until_sync

from tinker_tui.app.cli import main
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import (
    CommandReceived,
    EvalCompleted,
    EventBus,
    GroupDiscarded,
    GroupSampled,
    LogEmitted,
    RunFinished,
    RunStarted,
    StepTrained,
    TrackerReported,
    TrajectorySummary,
)
from tinker_tui.engine.store import EventCursor, StoredRun, StoreReader
from tinker_tui.engine.trackers import TrackerFeeds, wandb_run_id_for
from tinker_tui.engine.trackers.feed import TrackerFeed
from tinker_tui.engine.trackers.tensorboard_tracker import tensorboard_tag
from tinker_tui.engine.trackers.tracker import SAMPLE_COLUMNS, RunInfo

HAVE_WANDB = importlib.util.find_spec("wandb") is not None
HAVE_TB_WRITER = importlib.util.find_spec("tensorboardX") is not None
HAVE_TB_READER = importlib.util.find_spec("tensorboard") is not None
needs_wandb = pytest.mark.skipif(not HAVE_WANDB, reason='needs pip install "tinker-tui[wandb]"')
needs_tensorboard = pytest.mark.skipif(
    not (HAVE_TB_WRITER and HAVE_TB_READER),
    reason='needs pip install "tinker-tui[tensorboard]" tensorboard',
)

RUN_ARGS = ["--no-ui", "--warmup-steps", "0", "--group-size", "4", "--groups-per-step", "2"]


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """W&B offline, its settings and caches in the test's folder, never the user's."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    for name in ("CONFIG", "CACHE", "DATA", "ARTIFACT"):
        monkeypatch.setenv(f"WANDB_{name}_DIR", str(tmp_path / f"wandb-{name.lower()}"))
    for name in ("WANDB_API_KEY", "WANDB_DIR", "WANDB_RUN_ID", "WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


# ---------------------------------------------------------------- reading W&B's files back
def wandb_records(path: Path):
    """The protobuf records of a `.wandb` file, decoded with W&B's own `Record` message.
    The file is W&B's 7-byte header, then LevelDB-log framing in 32 KiB blocks: each chunk
    is crc (4), length (2, little-endian), type (1: whole, 2/3/4: first/middle/last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, block, pending = 7, 32 * 1024, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length = int.from_bytes(data[pos + 4 : pos + 6], "little")
        kind = data[pos + 6]
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending + chunk)
            pending = b""
            yield record
        elif kind in (2, 3):
            pending += chunk


def wandb_segments(folder: Path, wandb_id: str) -> list[dict]:
    """Each offline run folder of W&B run `wandb_id` under `folder`, oldest first:
    {"run_id", "project", "rows": [history rows, values decoded]}."""
    segments = []
    for run_dir in sorted(folder.glob(f"wandb/offline-run-*-{wandb_id}")):
        (log,) = run_dir.glob("run-*.wandb")
        segment = {"dir": run_dir, "rows": []}
        for record in wandb_records(log):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                segment["run_id"] = record.run.run_id
                segment["project"] = record.run.project
            elif kind == "history":
                segment["rows"].append(
                    {
                        item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.history.item
                    }
                )
        segments.append(segment)
    return segments


def settled_wandb_segments(folder: Path, wandb_id: str, wait: float = 20.0) -> list[dict]:
    """`wandb_segments` once each folder's log holds its run record. W&B's service writes the
    transaction log in a process of its own; on a busy machine (load 7) one export's log read
    right after it returned had no run record (1 run in 5), so wait for it instead."""
    deadline = time.monotonic() + wait
    while True:
        segments = wandb_segments(folder, wandb_id)
        if all("run_id" in s for s in segments) or time.monotonic() > deadline:
            return segments
        time.sleep(0.2)


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


async def store_records(db: Path, run_id: str) -> tuple[StoredRun, list, list]:
    """(the stored run, [(step, metrics)], [(step, metrics)] of its evals) from the store."""
    async with await StoreReader.open_readonly(db) as store:
        run = await store.find_run(run_id)
        events = await store.events(run, kinds={StepTrained, EvalCompleted})
    steps = sorted(
        ((e.step, dict(e.metrics)) for e in events if isinstance(e, StepTrained)),
        key=lambda s: s[0],
    )
    return run, steps, [(e.step, dict(e.metrics)) for e in events if isinstance(e, EvalCompleted)]


def tensorboard_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} as TensorBoard's event accumulator reads `run_dir`."""
    from tensorboard.backend.event_processing.event_accumulator import (
        SCALARS,
        EventAccumulator,
    )

    accumulator = EventAccumulator(str(run_dir), size_guidance={SCALARS: 0})
    accumulator.Reload()
    scalars: dict[str, dict[int, float]] = {}
    for tag in accumulator.Tags()["scalars"]:
        values = scalars.setdefault(tag, {})
        for event in accumulator.Scalars(tag):
            assert event.step not in values, f"{tag} has step {event.step} twice"
            values[event.step] = event.value
    return scalars


def test_a_key_tensorboard_would_rename_is_written_under_its_legal_tag():
    assert tensorboard_tag("eval/pass@1") == "eval/pass_1"
    assert tensorboard_tag("env/all/reward/total") == "env/all/reward/total"


def assert_tensorboard_matches(scalars, steps, evals) -> None:
    """Every stored step and eval value is in TensorBoard at its step (as float32), and
    TensorBoard holds no step the store does not."""
    import numpy as np

    expected: dict[str, dict[int, float]] = {}
    for step, metrics in steps + evals:
        for key, value in metrics.items():
            expected.setdefault(tensorboard_tag(key), {})[step] = value
    assert set(expected) <= set(scalars), set(expected) - set(scalars)
    assert set(scalars["policy_version"]) == {step for step, _ in steps}
    for key, by_step in expected.items():
        assert set(scalars[key]) == set(by_step), (key, scalars[key], by_step)
        for step, value in by_step.items():
            assert same(float(np.float32(value)), scalars[key][step]), (key, step)


# ---------------------------------------------------------------- no package, no import
@pytest.mark.parametrize(
    "flag, module, extra",
    [
        (["--wandb", "team-charts"], "wandb", "wandb"),
        (["--tensorboard"], "tensorboardX", "tensorboard"),
    ],
)
def test_a_missing_package_stops_the_run_before_anything_starts(
    tmp_path, monkeypatch, capsys, flag, module, extra
):
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    db = tmp_path / "runs" / "runs.db"
    assert main(["run", "example", *RUN_ARGS, "--db", str(db), *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert f'pip install "tinker-tui[{extra}]"' in err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists(), "nothing is created for a run that cannot start"

    assert main(["export", "latest", "--db", str(db), "--format", extra]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--format {extra} needs the {module} package" in err
    assert f'pip install "tinker-tui[{extra}]"' in err


def test_help_and_runs_without_trackers_never_import_them(tmp_path):
    code = (
        "import sys\n"
        "from tinker_tui.app.cli import build_parser\n"
        "parser = build_parser()\n"
        "parser.parse_args(['run', 'example'])\n"
        "from tinker_tui.engine.config import RunConfig\n"
        "from tinker_tui.engine.trackers import make_trackers, with_tracker_ids\n"
        "config = with_tracker_ids(RunConfig(), 'r1')\n"
        "assert make_trackers(config, store_folder=__import__('pathlib').Path('.')) == []\n"
        "assert config.wandb_run_id == ''\n"
        "print(sorted(m for m in ('wandb', 'tensorboardX', 'tensorboard') if m in sys.modules))\n"
    )
    probe = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]"


def test_the_wandb_run_id_is_the_run_id_without_what_wandb_refuses():
    assert (
        wandb_run_id_for("yes_no_maybe-20261201-003059-7c6e") == "yes_no_maybe-20261201-003059-7c6e"
    )
    assert wandb_run_id_for("my:task/v2#1") == "my-task-v2-1"


def test_wandb_goes_offline_instead_of_asking_for_a_key(tmp_path):
    from tinker_tui.engine.trackers.wandb_tracker import choose_mode

    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai login user password 0123456789\n")
    netrc.chmod(0o600)
    nowhere = str(tmp_path / "no-netrc")
    assert choose_mode({"NETRC": nowhere})[0] == "offline"
    assert "WANDB_API_KEY" in choose_mode({"NETRC": nowhere})[1]
    assert choose_mode({"NETRC": nowhere, "WANDB_MODE": "online"})[0] == "offline"
    assert choose_mode({"NETRC": nowhere, "WANDB_API_KEY": "k"}) == (None, "")
    assert choose_mode({"NETRC": str(netrc)}) == (None, "")  # `wandb login` wrote it
    assert (
        choose_mode({"NETRC": str(netrc), "WANDB_BASE_URL": "https://wandb.example"})[0]
        == "offline"
    )
    assert choose_mode({"WANDB_API_KEY": "k", "WANDB_MODE": "offline"})[0] == "offline"
    assert choose_mode({"WANDB_MODE": "disabled"})[0] == "disabled"


def test_a_trackers_lines_come_back_from_the_store_as_its_own(tmp_path):
    """A dashboard reads the run from the store: the trackers' lines (where the records went)
    must come back as `TrackerReported`, each tracker's with its name (older stores: by the
    name its lines began with)."""
    from tinker_tui.engine.store import RunStore, find_run
    from tinker_tui.engine.store.log_lines import TRACKER_LINE_NAMES
    from tinker_tui.engine.trackers.tensorboard_tracker import TensorBoardTracker
    from tinker_tui.engine.trackers.wandb_tracker import WandbTracker

    assert {t.name: t.key for t in (WandbTracker, TensorBoardTracker)} == TRACKER_LINE_NAMES
    path, clock = tmp_path / "runs.db", FakeClock(10.0)
    said = [
        TrackerReported(
            time=clock.now(),
            level="info",
            tracker="tensorboard",
            message="TensorBoard: event files in tb/r1; view with it",
        ),
        TrackerReported(
            time=clock.now(),
            level="warning",
            tracker="wandb",
            message="W&B: logging failed and is off",
        ),
        LogEmitted(time=clock.now(), level="info", message="W&B is not a tracker line"),
    ]

    async def store_and_read() -> list:
        store = await RunStore.open(path)
        store.handle(
            RunStarted(
                time=clock.now(),
                run_id="r1",
                name="t",
                backend="local",
                base_model="m",
                config={},
                max_steps=1,
                start_step=0,
            )
        )
        for event in said:
            store.handle(event)
        await store.close()
        reader = await StoreReader.open_readonly(path)
        try:
            return [
                e
                for e in await reader.events_after(EventCursor(await find_run(path, "r1")))
                if isinstance(e, LogEmitted)
            ]
        finally:
            await reader.close()

    assert asyncio.run(store_and_read()) == said


# ---------------------------------------------------------------- the feed (fake trackers)
class RecordingTracker:
    """Records each call and the thread it ran on; `gate` holds log_step until set."""

    key = "wandb"
    name = "Recorder"

    def __init__(self, fail_at_step: int | None = None) -> None:
        self.calls: list[tuple] = []
        self.threads: set[int] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.fail_at_step = fail_at_step
        self.aborted = 0

    def _record(self, *call):
        self.threads.add(threading.get_ident())
        self.calls.append(call)

    def start(self, run):
        self._record("start", run.run_id, run.start_step)
        return [f"Recorder: records of {run.run_id} go nowhere"]

    def log_step(self, step, policy_version, metrics, time):
        self.gate.wait(timeout=30)
        if step == self.fail_at_step:
            raise OSError("disk full\nsecond line")
        self._record("step", step, metrics["reward/mean"])

    def log_eval(self, step, policy_version, metrics, time):
        self._record("eval", step, metrics["eval/reward_mean"])

    def log_checkpoint(self, step, kind, name, path):
        self._record("checkpoint", step, kind)

    def log_samples(self, step, rows):
        self._record("samples", step, rows)

    def log_rollback(self, to_step, steps_undone, reason, time):
        self._record("rollback", to_step, steps_undone, reason)

    def finish(self, status):
        self._record("finish", status)
        return []

    def abort(self):
        self.aborted += 1


def run_events(steps: int, *, start_step: int = 0):
    yield RunStarted(
        time=0.0,
        run_id="r1",
        name="t",
        backend="local",
        base_model="m",
        max_steps=steps,
        start_step=start_step,
    )
    for step in range(start_step + 1, steps + 1):
        yield StepTrained(
            time=float(step), step=step, policy_version=step, metrics={"reward/mean": step / 10}
        )
    yield EvalCompleted(time=99.0, step=2, policy_version=2, metrics={"eval/reward_mean": 0.5})
    yield RunFinished(time=100.0, status="completed", final_step=steps)


async def test_the_feed_calls_the_tracker_in_order_on_its_own_thread_without_waiting():
    bus, clock, tracker = EventBus(), FakeClock(), RecordingTracker()
    reported = []
    bus.subscribe(lambda e: reported.append(e) if isinstance(e, LogEmitted) else None)
    feed = TrackerFeed(tracker, publish=bus.publish, clock=clock)
    bus.subscribe(feed.handle)
    tracker.gate.clear()  # the tracker is stuck in its first step...
    for event in run_events(5):
        bus.publish(event)  # ...and every event is still handed over at once
    assert [c[0] for c in tracker.calls] in ([], ["start"])  # no step went through yet
    tracker.gate.set()
    await feed.close()
    assert tracker.calls == [
        ("start", "r1", 0),
        ("step", 1, 0.1),
        ("step", 2, 0.2),
        ("step", 3, 0.3),
        ("step", 4, 0.4),
        ("step", 5, 0.5),
        ("eval", 2, 0.5),
        ("finish", "completed"),
    ]
    assert threading.get_ident() not in tracker.threads and len(tracker.threads) == 1
    await asyncio.sleep(0)  # the start line is published on the loop's thread
    assert [(type(e), e.level, e.tracker) for e in reported] == [(TrackerReported, "info", "wandb")]
    assert "records of r1" in reported[0].message


def rolled_back(to_step: int, undone: int, time: float) -> CommandReceived:
    return CommandReceived(
        time=time,
        command="rolled_back",
        args={
            "to_step": to_step,
            "checkpoint": f"step-{to_step:06d}",
            "steps_undone": undone,
            "reason": "collapsed at step 4 (best 0.3 at step 3)",
            "name": "learning_rate",
            "value": 5e-4,
            "old": 1e-3,
        },
    )


async def test_the_feed_tells_the_tracker_of_a_rollback_in_order():
    bus, tracker = EventBus(), RecordingTracker()
    feed = TrackerFeed(tracker, publish=bus.publish, clock=FakeClock())
    bus.subscribe(feed.handle)
    events = list(run_events(4))
    for event in (
        events[:5]
        + [rolled_back(2, 2, 4.5)]
        + [
            StepTrained(time=5.0 + s, step=s, policy_version=s, metrics={"reward/mean": s})
            for s in (3, 4)
        ]
        + [CommandReceived(time=9.0, command="rollback", args={})]
    ):
        bus.publish(event)
    await feed.close()
    assert tracker.calls[1:] == [
        ("step", 1, 0.1),
        ("step", 2, 0.2),
        ("step", 3, 0.3),
        ("step", 4, 0.4),
        ("rollback", 2, 2, "collapsed at step 4 (best 0.3 at step 3)"),
        ("step", 3, 3),
        ("step", 4, 4),
    ]


async def test_a_failing_tracker_is_reported_once_and_switched_off():
    bus, tracker = EventBus(), RecordingTracker(fail_at_step=2)
    warnings = []
    bus.subscribe(
        lambda e: warnings.append(e) if isinstance(e, LogEmitted) and e.level == "warning" else None
    )
    feed = TrackerFeed(tracker, publish=bus.publish, clock=FakeClock())
    bus.subscribe(feed.handle)
    for event in run_events(6):
        bus.publish(event)
    await feed.close()
    await asyncio.sleep(0)
    assert [c[:2] for c in tracker.calls] == [("start", "r1"), ("step", 1)]
    assert feed.failed and tracker.aborted == 1
    assert len(warnings) == 1
    message = warnings[0].message
    assert "Recorder logging failed and is off" in message and "OSError: disk full" in message
    assert "\n" not in message


async def test_a_tracker_that_falls_too_far_behind_is_switched_off():
    bus, tracker = EventBus(), RecordingTracker()
    warnings = []
    bus.subscribe(
        lambda e: (
            warnings.append(e.message)
            if isinstance(e, TrackerReported) and e.level == "warning"
            else None
        )
    )
    feed = TrackerFeed(tracker, publish=bus.publish, clock=FakeClock(), max_backlog=3)
    bus.subscribe(feed.handle)
    tracker.gate.clear()
    for event in run_events(10):
        bus.publish(event)
    tracker.gate.set()
    await feed.close()
    assert len(warnings) == 1 and "fell 3 records behind" in warnings[0]
    assert tracker.aborted == 1
    assert len(tracker.calls) <= 3


async def test_samples_tables_hold_the_rollouts_of_every_nth_step():
    bus, tracker = EventBus(), RecordingTracker()
    feed = TrackerFeed(tracker, publish=bus.publish, clock=FakeClock(), samples_every=2)
    bus.subscribe(feed.handle)
    bus.publish(
        RunStarted(
            time=0.0,
            run_id="r1",
            name="t",
            backend="local",
            base_model="m",
            max_steps=2,
            start_step=0,
        )
    )

    def group(group_id, rewards):
        return GroupSampled(
            time=0.0,
            group_id=group_id,
            scenario_id=f"q{group_id}",
            policy_version=0,
            num_trajectories=len(rewards),
            num_tokens=3,
            reward_mean=sum(rewards) / 2,
            trajectories=tuple(
                TrajectorySummary(
                    reward=r,
                    policy_version=0,
                    num_tokens=3,
                    messages=(
                        {"role": "user", "content": "hi"},
                        {"role": "assistant", "content": f"a{r}"},
                    ),
                )
                for r in rewards
            ),
        )

    for step, ids in ((1, (1, 2)), (2, (3, 4))):
        for g in ids:
            bus.publish(group(g, (0.0, 1.0)))
        bus.publish(group(9, (1.0,)))  # sampled, then dropped as stale: in no table
        bus.publish(
            GroupDiscarded(
                time=0.0,
                group_id=9,
                scenario_id="q9",
                reason="stale",
                policy_version=0,
                trainer_version=1,
                num_tokens=3,
            )
        )
        bus.publish(
            StepTrained(
                time=float(step),
                step=step,
                policy_version=step,
                metrics={"reward/mean": 0.5},
                group_ids=ids,
            )
        )
    await feed.close()
    (samples,) = [c for c in tracker.calls if c[0] == "samples"]
    _, step, rows = samples
    assert step == 2
    assert [dict(zip(SAMPLE_COLUMNS, r, strict=True))["group_id"] for r in rows] == [3, 3, 4, 4]
    first = dict(zip(SAMPLE_COLUMNS, rows[0], strict=True))
    assert first["scenario_id"] == "q3" and first["reward"] == 0.0
    assert first["conversation"] == "user: hi\nassistant: a0.0"


# ---------------------------------------------------------------- TensorBoard by itself
@needs_tensorboard
def test_tensorboard_drops_what_a_restarted_run_redoes(tmp_path):
    from tinker_tui.engine.trackers.tensorboard_tracker import TensorBoardTracker

    first = TensorBoardTracker(folder=tmp_path)
    info = RunInfo(run_id="r1", name="t", backend="local", base_model="m")
    first.start(info)
    for step in (1, 2, 3, 4):
        first.log_step(step, step, {"reward/mean": step / 10}, float(step))
    first.finish("failed")  # killed after step 4; its last checkpoint was step 2
    again = TensorBoardTracker(folder=tmp_path)
    again.start(RunInfo(run_id="r1", name="t", backend="local", base_model="m", start_step=2))
    for step in (3, 4, 5):
        again.log_step(step, step, {"reward/mean": step / 100}, float(step))
    again.finish("completed")
    assert len(list((tmp_path / "r1").glob("events.out.tfevents.*"))) == 2
    scalars = tensorboard_scalars(tmp_path / "r1")
    assert scalars["reward/mean"] == pytest.approx({1: 0.1, 2: 0.2, 3: 0.03, 4: 0.04, 5: 0.05})


@needs_tensorboard
def test_tensorboard_drops_the_steps_a_rollback_undoes(tmp_path):
    """Without the rollback's marker TensorBoard holds steps 3 and 4 twice (a step going
    back is no restart in these files); with it, the redone values only, as the store."""
    from tensorboard.backend.event_processing.event_accumulator import (
        TENSORS,
        EventAccumulator,
    )

    from tinker_tui.engine.trackers.tensorboard_tracker import TensorBoardTracker

    tracker = TensorBoardTracker(folder=tmp_path)
    tracker.start(RunInfo(run_id="r1", name="t", backend="local", base_model="m"))
    for step in (1, 2, 3, 4):
        tracker.log_step(step, step, {"reward/mean": step / 10}, float(step))
    tracker.log_rollback(2, 2, "collapsed at step 3 (best 0.2 at step 2)", 4.5)
    for step in (3, 4, 5):
        tracker.log_step(step, step, {"reward/mean": step / 100}, 5.0 + step)
    tracker.finish("completed")
    scalars = tensorboard_scalars(tmp_path / "r1")
    assert scalars["reward/mean"] == pytest.approx({1: 0.1, 2: 0.2, 3: 0.03, 4: 0.04, 5: 0.05})
    assert set(scalars["policy_version"]) == {1, 2, 3, 4, 5}
    notes = EventAccumulator(str(tmp_path / "r1"), size_guidance={TENSORS: 0})
    notes.Reload()
    (note,) = notes.Tensors("rollback/text_summary")
    assert note.step == 2
    assert note.tensor_proto.string_val[0].decode() == (
        "rolled back to step 2 (2 later step(s) undone): collapsed at step 3 (best 0.2 at step 2)"
    )


@needs_wandb
def test_wandb_marks_where_a_rollback_and_a_resume_redo_steps(tmp_path, offline_wandb):
    """W&B keeps every row logged: the row that marks the redo tells the undone records
    (those before it with a greater step) from the ones that count."""
    from tinker_tui.engine.trackers.wandb_tracker import WandbTracker

    def tracker() -> WandbTracker:
        return WandbTracker(project="p", run_id="w1", folder=tmp_path)

    first = tracker()
    started = time.time()
    first.start(RunInfo(run_id="r1", name="t", backend="local", base_model="m"))
    for step in (1, 2, 3, 4):
        first.log_step(step, step, {"reward/mean": step / 10}, float(step))
    first.log_rollback(2, 2, "collapsed at step 3 (best 0.2 at step 2)", 4.5)
    for step in (3, 4):
        first.log_step(step, step, {"reward/mean": step / 100}, 5.0 + step)
    summary = dict(first.run.summary["rollback/last"])
    first.finish("stopped")
    a_later_second(started)
    again = tracker()
    again.start(RunInfo(run_id="r1", name="t", backend="local", base_model="m", start_step=3))
    again.log_step(4, 4, {"reward/mean": 0.5}, 20.0)
    again.finish("completed")

    assert summary == {
        "to_step": 2,
        "steps_undone": 2,
        "reason": "collapsed at step 3 (best 0.2 at step 2)",
    }
    segments = settled_wandb_segments(tmp_path, "w1")
    assert len(segments) == 2
    rows = [
        [
            (r["step"], r.get("reward/mean"), r.get("rollback/to_step"), r.get("resume/from_step"))
            for r in s["rows"]
        ]
        for s in segments
    ]
    assert rows == [
        [
            (1, 0.1, None, None),
            (2, 0.2, None, None),
            (3, 0.3, None, None),
            (4, 0.4, None, None),
            (2, None, 2, None),
            (3, 0.03, None, None),
            (4, 0.04, None, None),
        ],
        [(3, None, None, 3), (4, 0.5, None, None)],
    ]


def a_later_second(started: float) -> None:
    """W&B names a run's offline folder by the second it started in: the next run of the
    same id must start in a later second than `started`."""
    wait_until_sync(lambda: int(time.time()) > int(started), "a later second")


# ---------------------------------------------------------------- whole runs
@needs_wandb
@needs_tensorboard
def test_a_run_and_its_resume_log_every_step_to_one_wandb_run_and_to_tensorboard(
    tmp_path, offline_wandb, capsys
):
    db = tmp_path / "runs" / "runs.db"
    db.parent.mkdir()
    first = [
        "run",
        "example",
        *RUN_ARGS,
        "--db",
        str(db),
        "--steps",
        "2",
        "--eval-every",
        "1",
        "--wandb",
        "team-charts",
        "--tensorboard",
        "--wandb-samples-every",
        "2",
    ]
    started = time.time()
    if importlib.util.find_spec("openai"):  # W&B advertises Weave to a process using it
        importlib.import_module("openai")
    assert main(first) == 0
    out, err = capsys.readouterr()
    assert "W&B: offline (WANDB_MODE=offline)" in out
    assert "upload with `wandb sync " in out.splitlines()[-1]  # the last word of the run
    assert out.count("offline run saved") == 1, "our own line, once"
    assert "wandb:" not in err, "W&B's own lines (its advertising) stay out of the output"
    assert "TensorBoard: event files in " in out
    # Resumed without the flags: a resumed run keeps its settings, W&B and TensorBoard too.
    a_later_second(started)
    assert main(["run", "example", "--db", str(db), "--no-ui", "--resume", "--steps", "4"]) == 0
    out = capsys.readouterr().out
    assert "upload with `wandb sync " in out.splitlines()[-1]

    (run_dir,) = (tmp_path / "runs" / "tensorboard").iterdir()
    run_id = run_dir.name
    run, steps, evals = asyncio.run(store_records(db, run_id))
    assert [s for s, _ in steps] == [1, 2, 3, 4] and evals, "the store has what is compared"
    # The W&B run id is kept in the store with the run's settings, and the resume used it.
    wandb_id = run.config["wandb_run_id"]
    assert wandb_id == wandb_run_id_for(run_id)
    segments = wandb_segments(tmp_path / "runs", wandb_id)
    assert len(segments) == 2, "one offline folder per process, one W&B run"
    assert {(s["run_id"], s["project"]) for s in segments} == {(wandb_id, "team-charts")}

    # Every step's metrics are in W&B's history, exactly as stored; evals too.
    rows = [row for segment in segments for row in segment["rows"]]
    for kind, records, marker in (
        ("step", steps, "reward/mean"),
        ("eval", evals, "eval/reward_mean"),
    ):
        logged = {row["step"]: row for row in rows if marker in row}
        assert sorted(logged) == sorted(s for s, _ in records), kind
        for step, metrics in records:
            for key, value in metrics.items():
                assert same(logged[step][key], value), (kind, step, key)
    assert [row["checkpoint/state_step"] for row in rows if "checkpoint/state_step" in row]
    tables = [row for row in rows if "samples/path" in row]
    assert [row["step"] for row in tables] == [2, 4]
    table = json.loads((segments[-1]["dir"] / "files" / tables[-1]["samples/path"]).read_text())
    assert table["columns"] == list(SAMPLE_COLUMNS)
    assert {r[0] for r in table["data"]} == {4} and len(table["data"]) == 8  # 2 groups of 4

    assert_tensorboard_matches(tensorboard_scalars(run_dir), steps, evals)

    # A stored run, exported after the fact: the same values, in a new W&B run.
    out_tb, out_wandb = tmp_path / "export-tb", tmp_path / "export-wandb"
    assert (
        main(["export", run_id, "--db", str(db), "--format", "tensorboard", "-o", str(out_tb)]) == 0
    )
    assert_tensorboard_matches(tensorboard_scalars(out_tb / run_id), steps, evals)
    assert main(["export", run_id, "--db", str(db), "--format", "wandb", "-o", str(out_wandb)]) == 0
    err = capsys.readouterr().err
    assert "exported run" in err and "upload with `wandb sync " in err
    (exported,) = (out_wandb / "wandb").glob("offline-run-*")
    (segment,) = settled_wandb_segments(out_wandb, exported.name.rsplit("-", 1)[-1])
    assert segment["run_id"] != wandb_id and segment["project"] == "team-charts"
    logged = {row["step"]: row for row in segment["rows"] if "reward/mean" in row}
    assert {s: logged[s]["reward/mean"] for s in logged} == {s: m["reward/mean"] for s, m in steps}


@needs_tensorboard
def test_a_tracker_that_fails_in_a_real_run_is_reported_and_the_run_completes(tmp_path, capsys):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the event files' folder should be")
    db = tmp_path / "runs.db"
    assert (
        main(
            [
                "run",
                "example",
                *RUN_ARGS,
                "--db",
                str(db),
                "--steps",
                "2",
                "--tensorboard",
                str(blocker),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("TensorBoard logging failed and is off") == 1, out
    assert "completed at step 2/" in out
    run_id = out.split("run ", 1)[1].split(":", 1)[0]
    _, steps, _ = asyncio.run(store_records(db, run_id))
    assert [s for s, _ in steps] == [1, 2]


async def test_tracker_feeds_for_a_run_without_trackers_are_empty():
    from tinker_tui.engine.config import RunConfig

    feeds = TrackerFeeds.start(
        RunConfig(), store_folder=Path("."), publish=lambda e: None, clock=FakeClock()
    )
    assert feeds.feeds == [] and feeds.handlers() == []
    await feeds.close()
