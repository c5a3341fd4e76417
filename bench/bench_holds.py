"""Does learning hold? Runs tasks headless over seeds and prints, per run, the best step, the
mean of the last 10 steps and whether it holds (last-10 mean >= half the best step), and where
a run fell (the first step after its best whose 3-step mean is below half the best).

    python bench/bench_holds.py [--tasks tool,named,multi,example] [--seeds 0,1,2]
                                [--steps 100] [--jobs 2] [-- --learning-rate 1e-3 ...]

Tasks: `tool`, `named`, `multi` are bench/holds_tasks.py (written for this check, not tuned),
`example`, `binary_prefix_tool`, `next_number` the built-in ones, or any task path. Each run is
`tinker-tui run TASK --no-ui --seed S --steps N [flags after --]` in a child process with
OMP_NUM_THREADS=1 (up to `--jobs` at once); the load average is printed with each line.
A run that a health check stopped is read over the steps it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
TASKS = {"tool": f"{HERE / 'holds_tasks.py'}:TOOL_TASK",
         "named": f"{HERE / 'holds_tasks.py'}:NAMED_TOOL_TASK",
         "multi": f"{HERE / 'holds_tasks.py'}:MULTI_TURN_TASK"}
#: The fresh tasks have no settings of their own: they get the issue's warm-up.
FRESH_FLAGS = ["--warmup-steps", "80"]


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


def run_one(task: str, seed: int, steps: int, flags: list[str], store: Path) -> dict:
    target = TASKS.get(task, task)
    extra = FRESH_FLAGS if task in TASKS else []
    # This checkout's code, whatever folder the run starts in.
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "tinker_tui.app.cli", "run", target, "--no-ui", "--seed",
         str(seed), "--steps", str(steps), "--db",
         str(store / f"{task.replace('/', '_')}-{seed}-{time.time_ns()}.db"),
         *extra, *flags],
        capture_output=True, text=True, cwd=store, env=env)
    rewards: list[float] = []
    path = store / f"{_run_id(proc.stdout)}.metrics.jsonl"
    if path.exists():
        events = [json.loads(line) for line in path.read_text().splitlines()]
        rewards = [e["reward/mean"] for e in events if e["event"] == "step"]
    return {"task": task, "seed": seed, "rewards": rewards, "exit": proc.returncode,
            "seconds": time.time() - started, "tail": proc.stdout.strip().splitlines()[-6:],
            "stderr": proc.stderr[-400:]}


def _run_id(stdout: str) -> str:
    """The run id from its line "run ID: task ..."."""
    line = next((x for x in stdout.splitlines() if x.startswith("run ") and ": task " in x), "")
    return line.split(":")[0].removeprefix("run ").strip()


def verdict(rewards: list[float]) -> dict:
    if not rewards:
        return {"best": float("nan"), "best_step": 0, "last10": float("nan"), "holds": False,
                "fell_at": None}
    best_step = max(range(len(rewards)), key=lambda i: rewards[i])
    best = rewards[best_step]
    last = rewards[-10:]
    last10 = sum(last) / len(last)
    fell_at = next((i + 1 for i in range(best_step + 3, len(rewards))
                    if sum(rewards[i - 2:i + 1]) / 3 < best / 2), None)
    return {"best": best, "best_step": best_step + 1, "last10": last10,
            "holds": last10 >= best / 2, "fell_at": fell_at}


def describe(result: dict) -> str:
    v = verdict(result["rewards"])
    curve = " ".join(f"{r:.2f}" for r in result["rewards"][::5])
    fell = "" if v["fell_at"] is None else f", fell at step {v['fell_at']}"
    ended = next((x for x in result["tail"] if x.startswith("run ")), "")
    return (f"  {result['task']:>8} seed {result['seed']}: best {v['best']:.3f} at step "
            f"{v['best_step']}, last-10 mean {v['last10']:.3f} "
            f"({'holds' if v['holds'] else 'FALLS'}{fell}); {len(result['rewards'])} steps in "
            f"{result['seconds']:.0f} s, exit {result['exit']}  [{load()}]\n"
            f"           every 5th step: {curve}\n           {ended}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="tool,named,multi")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--store", help="a folder to keep the stores in (default: a temporary "
                        "one); its warm-up cache serves the next bench too")
    parser.add_argument("flags", nargs="*", help="run flags, after --")
    args = parser.parse_args()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"learning holds: {tasks} x seeds {seeds}, {args.steps} steps, flags "
          f"{' '.join(args.flags) or '(defaults)'}  [{load()}]", flush=True)
    # One folder for every run: the format warm-up's result is saved beside the stores and
    # reused by the runs that repeat it (same task, seed and settings).
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(args.store) if args.store else Path(tmp)
        store.mkdir(parents=True, exist_ok=True)
        jobs = [(t, s) for t in tasks for s in seeds]
        held = 0
        with ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(run_one, t, s, args.steps, args.flags, store)
                       for t, s in jobs]
            for future in futures:
                result = future.result()
                held += verdict(result["rewards"])["holds"]
                print(describe(result), flush=True)
                if result["exit"] not in (0, 3):
                    print("    stderr: " + result["stderr"].replace("\n", "\n    "), flush=True)
    print(f"holds in {held} of {len(jobs)} runs  [{load()}]", flush=True)


if __name__ == "__main__":
    main()
