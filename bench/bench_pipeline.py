"""Pipeline benchmark: every figure is a ratio or a bound measured in this one run.

    python bench/bench_pipeline.py            # all sections (a few minutes on 2 cores)
    python bench/bench_pipeline.py --quick    # smaller, for a smoke check
    python bench/bench_pipeline.py --sections 5 --rounds 5 --burn 1   # 5 only, busy machine

1. efficiency: bottleneck bound / wall time, with simulated sampling and training latencies;
   bound = max(total rollout time / rollout concurrency, total train time). Goal >= 0.97.
2. async vs synchronous (max_steps_off_policy 0: sample the batch, then train) with equal
   stage times. Goal >= 1.85x (2x is the ceiling).
3. instant backend: groups/s through bookkeeping, events and the SQLite store. Goal >= 4,000.
   Also groups per CPU-second of the process (all its threads), which a busy machine
   changes less than wall time; the load average is printed with it.
4. memory: resident size at step 2,000 vs step 100 of an instant run. Goal <= +10%.
   Event-loop lag p99 during those runs. Goal <= 20 ms.
   Sections 1-4 run the rollouts on their own loop thread, as real runs do (`--single-loop`:
   on the engine's loop, as before).
5. the real local backend trains the built-in example through the in-process server and the
   official openai client, each run in a fresh process, alternating round by round between
   rollouts on the engine's loop (the arrangement before the rollout thread) and rollouts on
   their own loop thread. Per arrangement: the engine loop's lag p50/p99/max and the
   rollout loop's own lag, from the first sampled group to the end of the run, rollouts/s
   over the same span and the process's CPU time per rollout. Goal: engine-loop lag p99
   <= 20 ms with the rollout thread, rollouts/s >= 0.95x the single loop's (median of the
   per-round ratios).
   `--burn N` keeps N other processes spinning meanwhile (a busy machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.simulated import SimulatedClient, SimulatedPolicy, simulated_task  # noqa: E402
from tinker_tui.engine.clock import SystemClock  # noqa: E402
from tinker_tui.engine.config import RunConfig  # noqa: E402
from tinker_tui.engine.events import EventBus, GroupSampled, RunStarted, StepTrained  # noqa: E402
from tinker_tui.engine.metrics.loop_lag import LoopLagMonitor  # noqa: E402
from tinker_tui.engine.store import RunStore  # noqa: E402
from tinker_tui.engine.training.pipeline import Pipeline  # noqa: E402
from tinker_tui.engine.training.rollout_loop import RolloutThread, SameLoop  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def timed_run(
    *,
    steps: int,
    sample_s: float,
    train_s: float,
    max_off: int,
    workers: int = 4,
    group_size: int = 8,
    groups_per_step: int = 4,
    store_dir: Path | None = None,
    on_step=None,
    thread: bool = True,
) -> dict[str, float]:
    session = SimulatedPolicy(train_seconds=train_s)
    client = SimulatedClient(session, sample_seconds=sample_s)
    config = RunConfig(
        max_steps=steps,
        group_size=group_size,
        groups_per_step=groups_per_step,
        rollout_workers=workers,
        max_steps_off_policy=max_off,
        checkpoint_every=0,
        health_window=10_000,
    )
    bus = EventBus()
    store = None
    if store_dir is not None:
        store = await RunStore.open(store_dir / f"bench-{random.random():.9f}.db")
        bus.subscribe(store.handle)
        bus.publish(
            RunStarted(
                time=time.time(),
                run_id="bench",
                name="bench",
                backend="simulated",
                base_model="none",
                max_steps=steps,
                start_step=0,
            )
        )
    if on_step is not None:
        bus.subscribe(lambda e: on_step(e) if isinstance(e, StepTrained) else None)
    rollouts = RolloutThread() if thread else SameLoop()
    await rollouts.start()
    pipeline = Pipeline(
        config=config,
        task=simulated_task(),
        session=session,
        client_factory=lambda: client,
        model_name="bench",
        bus=bus,
        clock=SystemClock(),
        rng=random.Random(0),
        rollouts=rollouts,
    )
    started, cpu_started = time.perf_counter(), time.process_time()
    await pipeline.run()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    await rollouts.close()
    if store is not None:
        await store.close()
    rollouts = client.started
    concurrency = workers * group_size
    bound = max(rollouts * sample_s / concurrency, steps * train_s)
    return {
        "wall": wall,
        "cpu": cpu,
        "bound": bound,
        "rollouts": rollouts,
        "groups": rollouts / group_size,
        "lag_p99": pipeline.loop_lag.percentile(99),
    }


async def efficiency(quick: bool, thread: bool) -> None:
    steps = 20 if quick else 60
    # A rollout takes sample_s; 4 workers x 8 rollouts run at once, so one batch of
    # 4 groups samples in sample_s. Trainer-bound, then sampler-bound.
    for label, sample_s, train_s in (("trainer-bound", 0.05, 0.10), ("sampler-bound", 0.10, 0.05)):
        r = await timed_run(
            steps=steps, sample_s=sample_s, train_s=train_s, max_off=1, thread=thread
        )
        print(
            f"1. efficiency      {label}: bound {r['bound']:.2f} s / wall {r['wall']:.2f} s"
            f" = {r['bound'] / r['wall']:.3f}   (goal >= 0.97); loop lag p99 "
            f"{r['lag_p99'] * 1000:.1f} ms (goal <= 20 ms); load average "
            f"{os.getloadavg()[0]:.2f}"
        )


async def async_vs_sync(quick: bool, thread: bool) -> None:
    steps = 20 if quick else 60
    # Equal stage times: one batch (4 groups x 8 rollouts, 32 at once) samples in 0.1 s,
    # one training step takes 0.1 s.
    a = await timed_run(steps=steps, sample_s=0.1, train_s=0.1, max_off=1, thread=thread)
    s = await timed_run(steps=steps, sample_s=0.1, train_s=0.1, max_off=0, thread=thread)
    print(
        f"2. async vs sync   {s['wall']:.2f} s / {a['wall']:.2f} s = "
        f"{s['wall'] / a['wall']:.2f}x   (goal >= 1.85x, ceiling 2x)"
    )


async def instant(quick: bool, store_dir: Path, thread: bool) -> None:
    steps = 300 if quick else 2000
    marks: dict[int, float] = {}

    def on_step(event: StepTrained) -> None:
        if event.step in (100, steps):
            marks[event.step] = rss_mb()

    r = await timed_run(
        steps=steps,
        sample_s=0.0,
        train_s=0.0,
        max_off=1,
        store_dir=store_dir,
        on_step=on_step,
        thread=thread,
    )
    print(
        f"3. instant backend {r['groups'] / r['wall']:,.0f} groups/s "
        f"({r['groups']:,.0f} groups of 8 in {r['wall']:.2f} s, store attached)"
        f"   (goal >= 4,000); {r['groups'] / r['cpu']:,.0f} groups per CPU-second; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    growth = marks[steps] / marks[100] - 1
    print(
        f"4. memory          {marks[100]:.0f} MB at step 100 -> {marks[steps]:.0f} MB at "
        f"step {steps}: {growth:+.1%}   (goal <= +10%)"
    )


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples) or [float("nan")]

    def at(q: float) -> float:
        return 1000 * ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]

    return {"p50": at(50), "p99": at(99), "max": 1000 * ordered[-1]}


async def real_backend_run(steps: int, rollout_thread: bool, folder: Path) -> dict:
    """One run of the example on the local backend; lag and throughput from the first
    sampled group (start-up excluded) to the end."""
    from tinker_tui.engine.run import Run
    from tinker_tui.examples.yes_no_maybe import TASK

    config = (
        RunConfig()
        .with_overrides(dict(TASK.settings))
        .with_overrides(
            {
                "max_steps": steps,
                "warmup_steps": 0,
                "checkpoint_every": 0,
                "eval_every": 0,
                "seed": 0,
                "health_window": 10_000,
            }
        )
    )
    run = Run(
        task=TASK,
        config=config,
        backend="local",
        db_path=folder / "lag.db",
        rollout_thread=rollout_thread,
    )
    engine_lag = LoopLagMonitor(max_samples=10**7)
    rollout_lag = LoopLagMonitor(max_samples=10**7)
    if isinstance(run.rollouts, RolloutThread):
        run.rollouts.lag = rollout_lag
    seen: dict = {"rollouts": 0, "first": None, "monitor": None}

    def on_event(event: object) -> None:
        if not isinstance(event, GroupSampled):
            return
        if seen["first"] is None:
            seen["first"] = time.perf_counter()
            seen["cpu"] = time.process_time()
            seen["monitor"] = asyncio.get_running_loop().create_task(engine_lag.run())
            rollout_lag.samples.clear()  # deque: safe to clear from this thread
        else:
            seen["rollouts"] += event.num_trajectories

    run.events.subscribe(on_event)
    status = await run.run()
    span = time.perf_counter() - seen["first"]
    cpu = time.process_time() - seen["cpu"]
    seen["monitor"].cancel()
    return {
        "status": status,
        "rollouts_per_s": seen["rollouts"] / span,
        "cpu_ms_per_rollout": 1000 * cpu / seen["rollouts"],
        "engine_lag": _percentiles(list(engine_lag.samples)),
        "rollout_lag": _percentiles(list(rollout_lag.samples)) if rollout_thread else None,
    }


ARRANGEMENTS = {"single loop": False, "rollout thread": True}


def loop_lag_while_training(quick: bool, rounds: int, burn: int) -> None:
    steps = 8 if quick else 30
    burners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(burn)]
    results: dict[str, list[dict]] = {name: [] for name in ARRANGEMENTS}
    try:
        for round_ in range(rounds):
            order = list(ARRANGEMENTS) if round_ % 2 == 0 else list(ARRANGEMENTS)[::-1]
            for name in order:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", name, "--steps", str(steps)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    load = os.getloadavg()[0]
    for name, runs in results.items():
        worst = max(runs, key=lambda r: r["engine_lag"]["p99"])
        lag = "  ".join(
            f"{k} {statistics.median(r['engine_lag'][k] for r in runs):.1f}"
            for k in ("p50", "p99", "max")
        )
        line = (
            f"5. {name:<15} engine loop lag (median of {len(runs)} runs) {lag} ms, worst "
            f"p99 {worst['engine_lag']['p99']:.1f} ms; "
            f"{statistics.median(r['rollouts_per_s'] for r in runs):.1f} rollouts/s, "
            f"{statistics.median(r['cpu_ms_per_rollout'] for r in runs):.1f} ms CPU each"
        )
        if runs[0]["rollout_lag"] is not None:
            own = "  ".join(
                f"{k} {statistics.median(r['rollout_lag'][k] for r in runs):.0f}"
                for k in ("p50", "p99", "max")
            )
            line += f"; its own loop's lag {own} ms"
        print(line)
    ratios = [
        t["rollouts_per_s"] / s["rollouts_per_s"]
        for s, t in zip(results["single loop"], results["rollout thread"], strict=True)
    ]
    print(
        f"5. rollout thread / single loop rollouts/s: median {statistics.median(ratios):.3f} "
        f"[{', '.join(f'{r:.2f}' for r in ratios)}] (goal >= 0.95); engine lag p99 goal "
        f"<= 20 ms; {steps} steps per run, {burn} spinning process(es), load average "
        f"{load:.2f}"
    )


def child(name: str, steps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(real_backend_run(steps, ARRANGEMENTS[name], Path(tmp)))
    print(json.dumps(result))


async def simulated_sections(quick: bool, sections: set[int], thread: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if 1 in sections:
            await efficiency(quick, thread)
        if 2 in sections:
            await async_vs_sync(quick, thread)
        if sections & {3, 4}:
            await instant(quick, Path(tmp), thread)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--sections", default="1,2,3,4,5", help="comma-separated sections to run (default: all)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="section 5: runs of each arrangement (default 3)"
    )
    parser.add_argument(
        "--burn",
        type=int,
        default=0,
        help="section 5: processes kept spinning meanwhile (default 0)",
    )
    parser.add_argument(
        "--single-loop",
        action="store_true",
        help="sections 1-4: rollouts on the engine's loop, not on a thread",
    )
    parser.add_argument("--child", choices=ARRANGEMENTS, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=30, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    sections = {int(s) for s in args.sections.split(",")}
    asyncio.run(simulated_sections(args.quick, sections, thread=not args.single_loop))
    if 5 in sections:
        loop_lag_while_training(args.quick, 1 if args.quick else args.rounds, args.burn)


if __name__ == "__main__":
    main()
