"""Does learning hold? Runs tasks headless over seeds and prints, per run, the best step, the
mean of the last 10 steps and whether it holds (last-10 mean >= half the best step), and where
a run fell (the first step after its best whose 3-step mean is below half the best).

    python bench/bench_holds.py [--tasks tool,named,multi,example] [--seeds 0,1,2]
                                [--steps 100] [--jobs 2] [--lora-alpha 32]
                                [-- --learning-rate 1e-3 ...]

Tasks: `tool`, `named`, `multi` are bench/holds_tasks.py (written for this check, not tuned),
`example`, `binary_prefix_tool`, `next_number` the built-in ones, or any task path. Each run is
`tinker-tui run TASK --no-ui --seed S --steps N [flags after --]` in a child process with
OMP_NUM_THREADS=1 (up to `--jobs` at once); the load average is printed with each line.

Each run gets one verdict:

* `holds`: it ran every step and its last-10 mean is at least half its best step;
* `FALLS`: its last-10 mean is below that, or the collapse check stopped it (it fell and
  stayed down);
* `plateau`: the no-learning-signal pause stopped it early: most groups earned equal rewards
  below the best seen, so there was no gradient left to climb or to fall with. Such a run is
  judged over the steps it ran (`plateau, holds` when its last-10 mean is at least half its
  best step) and counted apart: it held what it learned, but not over the full length.

`--lora-alpha A` runs the embedded model with the LoRA scale A / lora_rank instead of the
backend's fixed 32 / lora_rank (a measurement of the scale, patched in the child process; the
warm-up cache keys on the adapter's alpha, so runs of different scales never share a warm-up).
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
TASKS = {
    "tool": f"{HERE / 'holds_tasks.py'}:TOOL_TASK",
    "named": f"{HERE / 'holds_tasks.py'}:NAMED_TOOL_TASK",
    "multi": f"{HERE / 'holds_tasks.py'}:MULTI_TURN_TASK",
}
#: The fresh tasks have no settings of their own: they get the issue's warm-up.
FRESH_FLAGS = ["--warmup-steps", "80"]


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


#: The child of `--lora-alpha A`: the CLI with every new adapter's alpha set to A.
WITH_ALPHA = """
import runpy, sys
from tinker_tui.engine.local import lora
alpha = float(sys.argv.pop(1))
create = lora.Adapter.create.__func__
def create_with_alpha(cls, *args, **kwargs):
    adapter = create(cls, *args, **kwargs)
    adapter.alpha = alpha
    return adapter
lora.Adapter.create = classmethod(create_with_alpha)
sys.argv[0] = "tinker-tui"
runpy.run_module("tinker_tui.app.cli", run_name="__main__", alter_sys=True)
"""


def run_one(
    task: str, seed: int, steps: int, flags: list[str], store: Path, lora_alpha: float | None = None
) -> dict:
    target = TASKS.get(task, task)
    extra = FRESH_FLAGS if task in TASKS else []
    # This checkout's code, whatever folder the run starts in.
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}
    cli = (
        ["-m", "tinker_tui.app.cli"] if lora_alpha is None else ["-c", WITH_ALPHA, str(lora_alpha)]
    )
    started = time.time()
    proc = subprocess.run(
        [
            sys.executable,
            *cli,
            "run",
            target,
            "--no-ui",
            "--seed",
            str(seed),
            "--steps",
            str(steps),
            "--db",
            str(store / f"{task.replace('/', '_')}-{seed}-{time.time_ns()}.db"),
            *extra,
            *flags,
        ],
        capture_output=True,
        text=True,
        cwd=store,
        env=env,
    )
    rewards: list[float] = []
    path = store / f"{_run_id(proc.stdout)}.metrics.jsonl"
    if path.exists():
        events = [json.loads(line) for line in path.read_text().splitlines()]
        rewards = [e["reward/mean"] for e in events if e["event"] == "step"]
    ended = next(
        (
            x
            for x in reversed(proc.stdout.splitlines())
            if x.startswith("run ") and " at step " in x
        ),
        "",
    )
    return {
        "task": task,
        "seed": seed,
        "steps": steps,
        "rewards": rewards,
        "exit": proc.returncode,
        "seconds": time.time() - started,
        "ended": ended,
        "stderr": proc.stderr[-400:],
    }


def _run_id(stdout: str) -> str:
    """The run id from its line "run ID: task ..."."""
    line = next((x for x in stdout.splitlines() if x.startswith("run ") and ": task " in x), "")
    return line.split(":")[0].removeprefix("run ").strip()


def verdict(rewards: list[float], steps: int | None = None, ended: str = "") -> dict:
    """The run's figures and its verdict (module docstring): `holds` is whether the last-10
    mean is at least half the best step; `kind` is holds / FALLS / plateau."""
    if not rewards:
        return {
            "best": float("nan"),
            "best_step": 0,
            "last10": float("nan"),
            "holds": False,
            "fell_at": None,
            "kind": "FALLS",
        }
    best_step = max(range(len(rewards)), key=lambda i: rewards[i])
    best = rewards[best_step]
    last = rewards[-10:]
    last10 = sum(last) / len(last)
    fell_at = next(
        (
            i + 1
            for i in range(best_step + 3, len(rewards))
            if sum(rewards[i - 2 : i + 1]) / 3 < best / 2
        ),
        None,
    )
    holds = last10 >= best / 2
    stopped_early = steps is not None and len(rewards) < steps
    if stopped_early and "collapsed" in ended:
        holds = False
    kind = "holds" if holds else "FALLS"
    if stopped_early and "no learning signal" in ended:
        kind = "plateau"
    return {
        "best": best,
        "best_step": best_step + 1,
        "last10": last10,
        "holds": holds,
        "fell_at": fell_at,
        "kind": kind,
    }


def judge(result: dict) -> dict:
    return verdict(result["rewards"], result["steps"], result["ended"])


def describe(result: dict) -> str:
    v = judge(result)
    curve = " ".join(f"{r:.2f}" for r in result["rewards"][::5])
    fell = "" if v["fell_at"] is None else f", fell at step {v['fell_at']}"
    words = {
        "holds": "holds",
        "FALLS": "FALLS",
        "plateau": "plateau, " + ("holds" if v["holds"] else "FALLS"),
    }[v["kind"]]
    return (
        f"  {result['task']:>8} seed {result['seed']}: best {v['best']:.3f} at step "
        f"{v['best_step']}, last-10 mean {v['last10']:.3f} "
        f"({words}{fell}); {len(result['rewards'])} steps in "
        f"{result['seconds']:.0f} s, exit {result['exit']}  [{load()}]\n"
        f"           every 5th step: {curve}\n           {result['ended']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", default="tool,named,multi")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--lora-alpha",
        type=float,
        help="LoRA alpha of the embedded model (scale = alpha / lora_rank; the backend's is 32)",
    )
    parser.add_argument(
        "--store",
        help="a folder to keep the stores in (default: a temporary "
        "one); its warm-up cache serves the next bench too",
    )
    parser.add_argument("flags", nargs="*", help="run flags, after --")
    args = parser.parse_args()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]
    alpha = "" if args.lora_alpha is None else f", LoRA alpha {args.lora_alpha:g}"
    print(
        f"learning holds: {tasks} x seeds {seeds}, {args.steps} steps{alpha}, flags "
        f"{' '.join(args.flags) or '(defaults)'}  [{load()}]",
        flush=True,
    )
    # One folder for every run: the format warm-up's result is saved beside the stores and
    # reused by the runs that repeat it (same task, seed and settings).
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(args.store) if args.store else Path(tmp)
        store.mkdir(parents=True, exist_ok=True)
        jobs = [(t, s) for t in tasks for s in seeds]
        kinds: list[tuple[str, bool]] = []
        with ThreadPoolExecutor(args.jobs) as pool:
            futures = [
                pool.submit(run_one, t, s, args.steps, args.flags, store, args.lora_alpha)
                for t, s in jobs
            ]
            for future in futures:
                result = future.result()
                v = judge(result)
                kinds.append((v["kind"], v["holds"]))
                print(describe(result), flush=True)
                if result["exit"] not in (0, 3):
                    print("    stderr: " + result["stderr"].replace("\n", "\n    "), flush=True)
    held = sum(kind == "holds" for kind, _ in kinds)
    plateaus = [holds for kind, holds in kinds if kind == "plateau"]
    plateau = (
        f"; {len(plateaus)} stopped early at a no-signal plateau ({sum(plateaus)} of "
        f"them holding there)"
        if plateaus
        else ""
    )
    print(
        f"holds over all {args.steps} steps in {held} of {len(jobs)} runs{plateau}  [{load()}]",
        flush=True,
    )


if __name__ == "__main__":
    main()
