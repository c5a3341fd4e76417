"""The two async recipes on one task, over seeds: `async_style = default` (snapshot samplers,
importance_sampling, the staleness discard) against `cookbook` (in-flight sampling,
stable_reinforce, nothing discarded for staleness), on the local backend.

    python bench/bench_recipes.py --task locker_tool [--steps 100] [--seeds 0,1,2]
                                  [--recipes default,cookbook] [--store DIR]
                                  [-- --group-size 4 ...]

`--task`: `locker_tool` (bench/recipe_tasks.py, written for this comparison), a built-in task
(`example`, `binary_prefix_tool`, `next_number`) or any task path. Each run is
`tinker-tui run TASK --json --seed S --steps N --async-style R [flags after --]` in a child
process, one at a time (a run uses every core), the recipes alternating seed by seed so that
a change of load falls on both. Everything is read from the run's own records, not its text:
the rewards from its `--json` step lines, how it ended from its `finished` line, and the
collapses from its store (the commands the collapse check gave, `source = on_collapse`: a
headless run stops at its first collapse, so a run has 0 or 1).

Printed per run: the mean reward of its last 10 steps, the steps it ran, how it ended, its
wall time (and the time from its first step to its end: a seed's format warm-up runs once and
the next recipe reuses it from the store's cache) and the load average at its start and end;
then per recipe: each seed's last-10 mean, their mean, the collapses, the runs stopped early
for no learning signal, the time from step 1 summed over the seeds, the load range, and the
difference of the two recipes' means, all measured in this one invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tinker_tui.engine.metrics.collapse_memory import AUTOMATIC  # noqa: E402

TASKS = {"locker_tool": f"{HERE / 'recipe_tasks.py'}:LOCKER_TOOL_TASK"}
RECIPES = ("default", "cookbook")
#: The `source` of the stop a no-learning-signal health check gives (engine.training.pipeline).
NO_SIGNAL_SOURCE = "on_health_pause"


def load() -> tuple[float, float]:
    one, five, _ = os.getloadavg()
    return one, five


def load_words(values: tuple[float, float]) -> str:
    return f"load {values[0]:.1f}/{values[1]:.1f}"


def run_one(task: str, recipe: str, seed: int, steps: int, flags: list[str], store: Path) -> dict:
    target = TASKS.get(task, task)
    db = store / f"{task.replace('/', '_').replace(':', '_')}-{recipe}-{seed}-{time.time_ns()}.db"
    # This checkout's code, whatever folder the run starts in.
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    load_start = load()
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            target,
            "--json",
            "--seed",
            str(seed),
            "--steps",
            str(steps),
            "--async-style",
            recipe,
            "--name",
            f"{recipe} seed {seed}",
            "--db",
            str(db),
            *flags,
        ],
        capture_output=True,
        text=True,
        cwd=store,
        env=env,
    )
    seconds = time.perf_counter() - started
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    rewards: dict[int, float] = {}
    for line in lines:
        if line.get("event") == "step":
            reward = line["metrics"].get("reward/mean")
            if reward is not None:
                rewards[line["step"]] = reward  # a redone step's line replaces the old one
    finished = next((x for x in reversed(lines) if x.get("event") == "finished"), {})
    first_step = next((x["time"] for x in lines if x.get("event") == "step"), None)
    # From the first step to the end: the format warm-up, run once per seed and reused from
    # the store's cache by the next recipe, is left out.
    training = finished["time"] - first_step if first_step and finished.get("time") else 0.0
    run_id = next((x["run_id"] for x in lines if x.get("event") == "started"), None)
    collapses, no_signal = _stops(db, run_id)
    return {
        "recipe": recipe,
        "seed": seed,
        "rewards": [rewards[s] for s in sorted(rewards)],
        "status": finished.get("status", "no finished line"),
        "cause": finished.get("cause", ""),
        "exit": proc.returncode,
        "collapses": collapses,
        "no_signal": no_signal,
        "seconds": seconds,
        "training": training,
        "load_start": load_start,
        "load_end": load(),
        "stderr": proc.stderr[-600:],
    }


def _stops(db: Path, run_id: str | None) -> tuple[int, int]:
    """The run's collapses (each command the collapse check gave: a stop, a pause or a
    rollback) and its stops for no learning signal, from its store."""
    if run_id is None or not db.exists():
        return 0, 0
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT command, source FROM commands WHERE run_id = ?", (run_id,)
        ).fetchall()
    collapses = sum(source == AUTOMATIC and command != "resume" for command, source in rows)
    no_signal = sum(source == NO_SIGNAL_SOURCE and command == "stop" for command, source in rows)
    return collapses, no_signal


def last10(rewards: list[float]) -> float:
    return statistics.fmean(rewards[-10:]) if rewards else float("nan")


def describe(result: dict, steps: int) -> str:
    ran = len(result["rewards"])
    ended = result["cause"] or result["status"]
    marks = []
    if result["collapses"]:
        marks.append("COLLAPSED")
    if result["no_signal"]:
        marks.append("stopped: no learning signal")
    if result["exit"] not in (0, 3):
        marks.append(f"exit {result['exit']}")
    curve = " ".join(f"{r:.2f}" for r in result["rewards"][9::10])
    return (
        f"  {result['recipe']:>8} seed {result['seed']}: last-10 mean "
        f"{last10(result['rewards']):.3f}, {ran}/{steps} steps ({ended}"
        f"{'; ' + ', '.join(marks) if marks else ''}), {result['seconds']:.0f} s "
        f"({result['training']:.0f} s from step 1) "
        f"[{load_words(result['load_start'])} -> {load_words(result['load_end'])}]\n"
        f"           every 10th step: {curve}"
    )


def table(results: list[dict], recipes: list[str], seeds: list[int]) -> str:
    rows = [
        "| recipe | "
        + " | ".join(f"seed {s}" for s in seeds)
        + " | mean | collapses | no-signal stops | time from step 1 | load start → end |",
        "|---" * (len(seeds) + 6) + "|",
    ]
    means = {}
    for recipe in recipes:
        mine = [r for r in results if r["recipe"] == recipe]
        by_seed = {r["seed"]: r for r in mine}
        values = [last10(by_seed[s]["rewards"]) for s in seeds if s in by_seed]
        means[recipe] = statistics.fmean(values) if values else float("nan")
        cells = [f"{last10(by_seed[s]['rewards']):.3f}" if s in by_seed else "-" for s in seeds]
        loads = [r["load_start"][0] for r in mine] + [r["load_end"][0] for r in mine]
        rows.append(
            f"| {recipe} | "
            + " | ".join(cells)
            + f" | {means[recipe]:.3f} | {sum(r['collapses'] for r in mine)} | "
            f"{sum(r['no_signal'] for r in mine)} | "
            f"{sum(r['training'] for r in mine) / 60:.1f} min | "
            f"{min(loads):.1f}–{max(loads):.1f} |"
        )
    if len(recipes) == 2:
        a, b = recipes
        rows.append(f"\n{b} − {a}, mean of the last-10 means: {means[b] - means[a]:+.3f}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="locker_tool")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument(
        "--store",
        help="a folder to keep the stores in (default: a temporary one); its warm-up cache "
        "serves the next bench too",
    )
    parser.add_argument("flags", nargs="*", help="run flags, after --")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
    print(
        f"recipes {recipes} on {args.task}: seeds {seeds}, {args.steps} steps, flags "
        f"{' '.join(args.flags) or '(the task defaults)'}, {os.cpu_count()} cpus  "
        f"[{load_words(load())}]",
        flush=True,
    )
    started = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(args.store) if args.store else Path(tmp)
        store.mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            for recipe in recipes:
                result = run_one(args.task, recipe, seed, args.steps, args.flags, store)
                results.append(result)
                print(describe(result, args.steps), flush=True)
                if result["exit"] not in (0, 3) or not result["rewards"]:
                    print("    stderr: " + result["stderr"].replace("\n", "\n    "), flush=True)
    print(
        f"\n{args.task}, {args.steps} steps, last-10 mean reward per seed "
        f"(all runs: {(time.perf_counter() - started) / 60:.1f} min)  [{load_words(load())}]\n"
    )
    print(table(results, recipes, seeds), flush=True)


if __name__ == "__main__":
    main()
