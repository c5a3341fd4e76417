"""Pipeline benchmark: every figure is a ratio or a bound measured in this one run.

    python bench/bench_pipeline.py            # all sections (about a minute on 2 cores)
    python bench/bench_pipeline.py --quick    # smaller, for a smoke check

1. efficiency: bottleneck bound / wall time, with simulated sampling and training latencies;
   bound = max(total rollout time / rollout concurrency, total train time). Goal >= 0.95.
2. async vs synchronous (max_steps_off_policy 0: sample the batch, then train) with equal
   stage times. Goal >= 1.85x (2x is the ceiling).
3. instant backend: groups/s through bookkeeping, events and the SQLite store. Goal >= 2,000.
4. memory: resident size at step 2,000 vs step 100 of an instant run. Goal <= +10%.
   Event-loop lag p99 during those runs. Goal <= 20 ms.
5. for reference, event-loop lag p99 while the real local backend trains the built-in example
   through the in-process server and the official openai client.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tinker_tui.engine.clock import SystemClock  # noqa: E402
from tinker_tui.engine.config import RunConfig  # noqa: E402
from tinker_tui.engine.events import EventBus, RunStarted, StepTrained, ThroughputMeasured  # noqa: E402
from tinker_tui.engine.pipeline import Pipeline  # noqa: E402
from tinker_tui.engine.store import RunStore  # noqa: E402

from bench.simulated import SimulatedClient, SimulatedPolicy, simulated_task  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def timed_run(*, steps: int, sample_s: float, train_s: float, max_off: int,
                    workers: int = 4, group_size: int = 8, groups_per_step: int = 4,
                    store_dir: Path | None = None, on_step=None) -> dict[str, float]:
    policy = SimulatedPolicy(train_seconds=train_s)
    client = SimulatedClient(policy, sample_seconds=sample_s)
    config = RunConfig(max_steps=steps, group_size=group_size, groups_per_step=groups_per_step,
                       rollout_workers=workers, max_steps_off_policy=max_off,
                       checkpoint_every=0, health_window=10_000)
    bus = EventBus()
    store = None
    if store_dir is not None:
        store = await RunStore.open(store_dir / f"bench-{random.random():.9f}.db")
        bus.subscribe(store.handle)
        bus.publish(RunStarted(time=time.time(), run_id="bench", name="bench",
                               backend="simulated", base_model="none", max_steps=steps,
                               start_step=0))
    if on_step is not None:
        bus.subscribe(lambda e: on_step(e) if isinstance(e, StepTrained) else None)
    pipeline = Pipeline(config=config, task=simulated_task(), policy=policy,
                        client_factory=lambda: client, model_name="bench", bus=bus,
                        clock=SystemClock(), rng=random.Random(0))
    started = time.perf_counter()
    await pipeline.run()
    wall = time.perf_counter() - started
    if store is not None:
        await store.close()
    rollouts = client.started
    concurrency = workers * group_size
    bound = max(rollouts * sample_s / concurrency, steps * train_s)
    return {"wall": wall, "bound": bound, "rollouts": rollouts,
            "groups": rollouts / group_size, "lag_p99": pipeline.loop_lag.percentile(99)}


async def efficiency(quick: bool) -> None:
    steps = 20 if quick else 60
    # A rollout takes sample_s; 4 workers x 8 rollouts run at once, so one batch of
    # 4 groups samples in sample_s. Trainer-bound, then sampler-bound.
    for label, sample_s, train_s in (("trainer-bound", 0.05, 0.10),
                                     ("sampler-bound", 0.10, 0.05)):
        r = await timed_run(steps=steps, sample_s=sample_s, train_s=train_s, max_off=1)
        print(f"1. efficiency      {label}: bound {r['bound']:.2f} s / wall {r['wall']:.2f} s"
              f" = {r['bound'] / r['wall']:.3f}   (goal >= 0.95); loop lag p99 "
              f"{r['lag_p99'] * 1000:.1f} ms (goal <= 20 ms)")


async def async_vs_sync(quick: bool) -> None:
    steps = 20 if quick else 60
    # Equal stage times: one batch (4 groups x 8 rollouts, 32 at once) samples in 0.1 s,
    # one training step takes 0.1 s.
    a = await timed_run(steps=steps, sample_s=0.1, train_s=0.1, max_off=1)
    s = await timed_run(steps=steps, sample_s=0.1, train_s=0.1, max_off=0)
    print(f"2. async vs sync   {s['wall']:.2f} s / {a['wall']:.2f} s = "
          f"{s['wall'] / a['wall']:.2f}x   (goal >= 1.85x, ceiling 2x)")


async def instant(quick: bool, store_dir: Path) -> None:
    steps = 300 if quick else 2000
    marks: dict[int, float] = {}

    def on_step(event: StepTrained) -> None:
        if event.step in (100, steps):
            marks[event.step] = rss_mb()

    r = await timed_run(steps=steps, sample_s=0.0, train_s=0.0, max_off=1,
                        store_dir=store_dir, on_step=on_step)
    print(f"3. instant backend {r['groups'] / r['wall']:,.0f} groups/s "
          f"({r['groups']:,.0f} groups of 8 in {r['wall']:.2f} s, store attached)"
          f"   (goal >= 2,000)")
    growth = marks[steps] / marks[100] - 1
    print(f"4. memory          {marks[100]:.0f} MB at step 100 -> {marks[steps]:.0f} MB at "
          f"step {steps}: {growth:+.1%}   (goal <= +10%)")


async def loop_lag_while_training(quick: bool, store_dir: Path) -> None:
    from tinker_tui.engine.run import Run
    from tinker_tui.examples.yes_no_maybe import TASK

    config = RunConfig().with_overrides(dict(TASK.settings)).with_overrides(
        {"max_steps": 8 if quick else 20, "warmup_steps": 0, "checkpoint_every": 0})
    run = Run(task=TASK, config=config, backend="local", db_path=store_dir / "lag.db")
    lags: list[float] = []
    run.events.subscribe(
        lambda e: lags.append(e.loop_lag_p99) if isinstance(e, ThroughputMeasured) else None)
    await run.run()
    worst = max(lags) if lags else float("nan")
    print(f"5. loop lag p99    {worst * 1000:.1f} ms worst 1-s report over "
          f"{len(lags)} reports while training on the local backend (reference)"
          f"  [{', '.join(f'{x * 1000:.0f}' for x in lags)}]")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        await efficiency(args.quick)
        await async_vs_sync(args.quick)
        await instant(args.quick, Path(tmp))
        await loop_lag_while_training(args.quick, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
