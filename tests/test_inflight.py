"""In-flight sampling (`sampling = inflight`): one sampler that every publish moves to the
new weights, on the local backend and through the real SDK to the Tinker double; versions
become lower bounds wherever they show, and nothing is discarded for staleness."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import sqlite3

import pytest
import tinker
from tinker_double import API_KEY, Faults, TinkerDouble

from bench.simulated import SimulatedClient, SimulatedPolicy, simulated_task
from tinker_tui.app.cli import main
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.widgets.discarded import staleness_lines
from tinker_tui.app.widgets.rollouts_tree import group_label
from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import EventBus, GroupDiscarded, StepTrained, ThroughputMeasured
from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.rollouts.trajectory import Trajectory, TrajectoryGroup
from tinker_tui.engine.training.pipeline import Pipeline

CONVERSATION = [
    {"role": "user", "content": "Is the sky blue?"},
    {"role": "assistant", "content": "maybe"},
]
PARAMS = tinker.SamplingParams(max_tokens=3, temperature=1.0)


def _prompt(session: BackendSession) -> tinker.ModelInput:
    return session.renderer.build_generation_prompt(CONVERSATION[:1])


# ---------------------------------------------------------------------- local backend
async def test_a_local_inflight_sampler_moves_to_each_published_version(tmp_path):
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path),
        base_model=DEFAULT_BASE_MODEL,
        lora_rank=8,
        sampling="inflight",
    )
    await session.start()
    first = session.sampling_client
    prompt = _prompt(session)
    before = await first.sample(prompt, 1, PARAMS)
    assert [s.weights_publish for s in before.sequences] == [1]
    data = session.supervised_datums([CONVERSATION])
    await session.train(data, loss_fn="cross_entropy", learning_rate=1e-2)
    await session.train(data, loss_fn="cross_entropy", learning_rate=1e-2)
    assert session.version == 2 and session.sampling_client is not first
    # the first client was not restarted: its next request runs on the newest weights
    after = await first.sample(prompt, 1, PARAMS)
    assert [s.weights_publish for s in after.sequences] == [3]
    # the local backend names the weights, so the version is exact, not only a bound
    _, version = await session.sample(prompt, 2, PARAMS)
    assert version == 2
    # older in-flight clients no longer hold their versions: model@0 comes from its
    # saved sampler weights (a snapshot), not from the moved client
    assert session.samplers.versions() == {2}
    _, version = await session.sample(prompt, 1, PARAMS, version=0)
    assert version == 0 and session.samplers.get(0) is not first


async def test_snapshot_sampling_stays_on_its_weights(tmp_path):
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL, lora_rank=8
    )
    await session.start()
    first = session.sampling_client
    await session.train(
        session.supervised_datums([CONVERSATION]), loss_fn="cross_entropy", learning_rate=1e-2
    )
    response = await first.sample(_prompt(session), 1, PARAMS)
    assert not hasattr(response.sequences[0], "weights_publish")
    assert session.samplers.versions() == {0, 1}


# ---------------------------------------------------------------------- pipeline
def _old_group(group_id: int, version: int) -> TrajectoryGroup:
    choice = {
        "prompt_token_ids": [1],
        "token_ids": [2],
        "token_logprobs": [-0.1],
        "policy_version": version,
    }
    return TrajectoryGroup(
        group_id=group_id,
        scenario_id="old",
        started_at=0,
        finished_at=0,
        trajectories=(
            Trajectory.from_choices([choice], reward=1.0),
            Trajectory.from_choices([choice], reward=0.0),
        ),
    )


@pytest.mark.parametrize("sampling", ["snapshot", "inflight"])
async def test_inflight_trains_a_late_group_that_snapshot_discards(sampling):
    session = SimulatedPolicy()
    bus, events = EventBus(), []
    bus.subscribe(events.append)
    pipeline = Pipeline(
        config=RunConfig(
            max_steps=3,
            group_size=4,
            groups_per_step=2,
            rollout_workers=2,
            checkpoint_every=0,
            max_steps_off_policy=1,
            sampling=sampling,
        ),
        task=simulated_task(),
        session=session,
        client_factory=lambda: SimulatedClient(session),
        model_name="m",
        bus=bus,
        clock=FakeClock(),
        rng=random.Random(0),
    )
    session.version = 5
    pipeline._queue.put_nowait(_old_group(99, 0))
    await pipeline.run()
    stale = [e for e in events if isinstance(e, GroupDiscarded) and e.reason == "stale"]
    steps = [e for e in events if isinstance(e, StepTrained)]
    if sampling == "snapshot":
        assert [e.group_id for e in stale] == [99]
        assert all(keys.STALENESS_BOUND not in e.metrics for e in steps)
    else:
        assert stale == []
        assert 99 in steps[0].group_ids and steps[0].metrics[keys.STALENESS_MAX] == 5
        assert all(e.metrics[keys.STALENESS_BOUND] == 1.0 for e in steps)


# ---------------------------------------------------------------------- views
def test_views_mark_inflight_versions_as_lower_bounds():
    from tinker_tui.app.dashboard_rows import GroupRecord

    group = GroupRecord(group_id=3, scenario_id="q1", policy_version=4, step=None, time=0.0)
    assert "v4" in group_label(group).plain and "v≥" not in group_label(group).plain
    assert "v≥4" in group_label(group, bound=True).plain
    state = DashboardState(FakeClock())
    state.throughput = ThroughputMeasured(
        time=0.0,
        window=10.0,
        rollouts_per_s=1.0,
        sampled_tokens_per_s=1.0,
        trained_tokens_per_s=1.0,
        queue_depth=0,
        in_flight=0,
        trainer_busy=0.5,
        sampler_busy=0.5,
        verdict="",
        staleness_in_flight={0: 2, 1: 1},
        staleness_queued={1: 3},
    )
    exact = [line.plain for line in staleness_lines(state, 60, 5)]
    state.config = {"sampling": "inflight"}
    bounded = [line.plain for line in staleness_lines(state, 60, 5)]
    assert not any("≤" in line for line in exact)
    assert bounded[0].startswith("≤ behind") and bounded[1].strip().startswith("≤0")


# ---------------------------------------------------------------------- headless runs
def _run(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", "example", "--no-ui", *args])
    return code, out.getvalue()


SHORT = [
    "--base-model",
    DEFAULT_BASE_MODEL,
    "--warmup-steps",
    "0",
    "--eval-every",
    "0",
    "--steps",
    "4",
    "--group-size",
    "4",
    "--groups-per-step",
    "2",
    "--rollout-workers",
    "4",
    "--sampling",
    "inflight",
]


def _stored(db) -> tuple[dict, list[dict]]:
    with sqlite3.connect(db) as conn:
        (config,) = conn.execute("select config from runs").fetchone()
        steps = [json.loads(m) for (m,) in conn.execute("select metrics from steps order by step")]
    return json.loads(config), steps


def _check_inflight_run(code: int, out: str, db) -> list[dict]:
    assert code == 0, out[-3000:]
    step_lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(step_lines) == 4, out
    assert all("staleness ≤" in line for line in step_lines), step_lines
    assert all("discarded stale/no-signal/error 0/" in line for line in step_lines), step_lines
    config, steps = _stored(db)
    assert config["sampling"] == "inflight"
    assert [m[keys.STALENESS_BOUND] for m in steps] == [1.0] * 4
    assert all(m[keys.discarded("stale")] == 0 for m in steps)
    return steps


def test_a_local_inflight_run_shows_staleness_as_a_bound_and_discards_nothing_stale(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "runs.db"
    code, out = _run([*SHORT, "--backend", "local", "--db", str(db)])
    _check_inflight_run(code, out, db)


# ---------------------------------------------------------------------- Tinker double
def test_an_inflight_sampler_moves_to_new_weights_through_the_sdk(tmp_path):
    """The documented contract, through the real SDK: sampler A (publish 1) is not
    restarted when later saves publish newer weights; its next request runs on them."""

    async def steps(double: TinkerDouble) -> tuple[int, int]:
        service = tinker.ServiceClient(base_url=double.base_url, api_key=API_KEY)
        session = BackendSession(
            service, base_model=DEFAULT_BASE_MODEL, lora_rank=8, sampling="inflight"
        )
        await session.start()
        first = session.sampling_client
        prompt = _prompt(session)
        await first.sample(prompt, 1, PARAMS)
        data = session.supervised_datums([CONVERSATION])
        await session.train(data, loss_fn="cross_entropy", learning_rate=1e-2)
        await first.sample(prompt, 1, PARAMS)  # a rollout's next turn on its old sampler
        _, version = await session.sample(prompt, 1, PARAMS)
        await session.close("success")
        return session.version, version

    with TinkerDouble(tmp_path / "service") as double:
        current, version = asyncio.run(steps(double))
        saves = list(double.service.inflight_saves)
        samples = list(double.service.inflight_samples)
    assert [s.publish for s in saves] == [1, 2]
    assert [(s.sampler_publish, s.used_publish) for s in samples] == [(1, 1), (1, 2), (2, 2)]
    assert samples[1].sampler_id == saves[0].sampler_id  # the same sampler, moved on
    # the SDK's response does not say which weights: the version is the client's, a bound
    assert current == version == 1


def test_an_inflight_run_through_the_sdk_records_its_saves(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Each sampling request reaches the sampler a while after it was sent, as on a busy
    # service: requests sent before a step's publish run after it.
    with TinkerDouble(tmp_path / "service", faults=Faults(delay={"asample": 0.3})) as double:
        for name, value in double.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        db = tmp_path / "runs.db"
        code, out = _run([*SHORT, "--backend", "tinker", "--db", str(db)])
        saves = list(double.service.inflight_saves)
        samples = list(double.service.inflight_samples)
        snapshots = [
            s
            for s in double.service.samplers.values()
            if s.model_path is None and not s.inflight_publish
        ]
    steps = _check_inflight_run(code, out, db)
    trained = [m for m in steps if not m.get(keys.TRAIN_SKIPPED)]
    # the start's publish and each trained step's, all in flight (a step whose groups all
    # had equal rewards trains nothing and publishes nothing)
    assert len(saves) == 1 + len(trained) and not snapshots
    assert samples and {s.sampler_id for s in samples} <= {s.sampler_id for s in saves}
    assert all(s.used_publish >= s.sampler_publish for s in samples)
    # a rollout spanned a weight update: its request, sent to the sampler of one version,
    # ran on a newer one (4-6 of 15 requests in three runs)
    assert any(s.used_publish > s.sampler_publish for s in samples), samples
