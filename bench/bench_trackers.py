"""What W&B and TensorBoard logging cost a run, measured in this one run: the example with
both trackers on vs off, alternating, each run in a fresh process. Goal: ratio >= 0.95 and
no added event-loop lag (the trackers write on threads of their own).

    python bench/bench_trackers.py               # 3 rounds of each, 40 RL steps per run
    python bench/bench_trackers.py --steps 20 --rounds 1

Workload: the built-in example on the local backend, no warm-up, same seed, W&B offline
(WANDB_MODE=offline, its files in a temporary folder). Throughput is rollouts sampled per
second between the first and the last training step (start-up excluded: W&B's import and
start happen then, on the tracker's thread); loop lag is the largest p99 the engine reported
while training. Needs `pip install -e ".[wandb,tensorboard]"`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")


async def one_run(steps: int, trackers: bool, folder: Path) -> dict:
    from tinker_tui.engine.config import RunConfig
    from tinker_tui.engine.events import GroupSampled, StepTrained, ThroughputMeasured
    from tinker_tui.engine.run import Run
    from tinker_tui.examples.yes_no_maybe import TASK

    overrides = {
        "max_steps": steps,
        "warmup_steps": 0,
        "checkpoint_every": 0,
        "seed": 0,
        "health_window": 10_000,
    }
    if trackers:
        overrides |= {"wandb_project": "bench", "tensorboard_dir": str(folder / "tb")}
    config = RunConfig().with_overrides(dict(TASK.settings)).with_overrides(overrides)
    run = Run(task=TASK, config=config, backend="local", db_path=folder / "runs.db")
    seen: dict = {"steps": [], "rollouts": 0, "lag": 0.0}

    def on_event(e) -> None:
        if isinstance(e, GroupSampled):
            seen["rollouts"] += e.num_trajectories
        elif isinstance(e, StepTrained):
            seen["steps"].append(e.time)
            seen.setdefault("rollouts_at_first", seen["rollouts"])
        elif isinstance(e, ThroughputMeasured) and seen["steps"]:
            seen["lag"] = max(seen["lag"], e.loop_lag_p99)

    run.events.subscribe(on_event)
    await run.run()
    span = seen["steps"][-1] - seen["steps"][0]
    rollouts = seen["rollouts"] - seen["rollouts_at_first"]
    return {"rollouts_per_s": rollouts / span, "loop_lag_p99_ms": 1000 * seen["lag"]}


def child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(
            WANDB_MODE="offline",
            WANDB_CONFIG_DIR=f"{tmp}/wc",
            WANDB_CACHE_DIR=f"{tmp}/wk",
            WANDB_DATA_DIR=f"{tmp}/wd",
        )
        result = asyncio.run(one_run(args.steps, args.variant == "trackers", Path(tmp)))
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", choices=("plain", "trackers"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        child(args)
        return
    results: dict[str, list[dict]] = {"plain": [], "trackers": []}
    for _ in range(args.rounds):
        for variant in results:
            out = subprocess.run(
                [sys.executable, __file__, "--steps", str(args.steps), "--variant", variant],
                capture_output=True,
                text=True,
                check=True,
            )
            results[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(variant, results[variant][-1], flush=True)
    med = {v: statistics.median(r["rollouts_per_s"] for r in rs) for v, rs in results.items()}
    lag = {v: max(r["loop_lag_p99_ms"] for r in rs) for v, rs in results.items()}
    print(
        f"rollouts/s median: plain {med['plain']:.1f}, W&B + TensorBoard "
        f"{med['trackers']:.1f}; ratio {med['trackers'] / med['plain']:.3f} (goal >= 0.95)"
    )
    print(
        f"loop lag p99, worst run: plain {lag['plain']:.1f} ms, "
        f"W&B + TensorBoard {lag['trackers']:.1f} ms"
    )
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
