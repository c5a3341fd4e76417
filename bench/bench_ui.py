"""Engine throughput with the dashboard attached vs headless, on the same workload, measured
in this one run. Goal: ratio >= 0.9.

    python bench/bench_ui.py                 # 3 rounds of each, 40 RL steps per run
    python bench/bench_ui.py --steps 20 --rounds 1

Workload: the built-in example on the local backend (no warm-up, no periodic checkpoints,
no health pauses),
same seed for every run, each run in a fresh process. Headless: the run with the headless
reporter subscribed (its output discarded). UI: the same run driven by the Textual app in a
pseudo-terminal of 160x48, so it draws and writes every frame as in a real terminal (this
script reads and discards the output). Runs alternate so drift in the machine's load hits
both sides. Throughput is rollouts sampled per second between the first and the last
training step (start-up excluded); the ratio is UI / headless of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import io
import json
import os
import pty
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from tinker_tui.engine.events import GroupSampled, StepTrained  # noqa: E402


class Meter:
    """Rollouts per second between the first and the last StepTrained."""

    def __init__(self) -> None:
        self.first_step: float | None = None
        self.last_step: float | None = None
        self.samples: list[tuple[float, int]] = []
        self.steps = 0

    def handle(self, event: object) -> None:
        if isinstance(event, GroupSampled):
            self.samples.append((event.time, event.num_trajectories))
        elif isinstance(event, StepTrained):
            self.steps += 1
            if self.first_step is None:
                self.first_step = event.time
            self.last_step = event.time

    def rollouts_per_s(self) -> float:
        if self.first_step is None or self.last_step is None or self.last_step <= self.first_step:
            return float("nan")
        rollouts = sum(n for t, n in self.samples if self.first_step < t <= self.last_step)
        return rollouts / (self.last_step - self.first_step)


def make_run(folder: Path, steps: int, seed: int):
    from tinker_tui.engine.config import RunConfig
    from tinker_tui.engine.run import Run
    from tinker_tui.examples.yes_no_maybe import TASK

    config = RunConfig().with_overrides(dict(TASK.settings)).with_overrides(
        {"max_steps": steps, "warmup_steps": 0, "checkpoint_every": 0, "seed": seed,
         # no health pauses: nobody is there to resume a benchmark run
         "health_window": 1_000_000})
    return Run(task=TASK, config=config, backend="local", db_path=folder / "runs.db")


def run_headless(folder: Path, steps: int, seed: int) -> float:
    from tinker_tui.app.headless import HeadlessReporter

    session = make_run(folder, steps, seed)
    meter = Meter()
    session.events.subscribe(meter.handle)
    session.events.subscribe(HeadlessReporter(out=io.StringIO()).handle)
    asyncio.run(session.run())
    return meter.rollouts_per_s()


def run_with_ui(folder: Path, steps: int, seed: int) -> float:
    from tinker_tui.app.tui import TinkerTuiApp

    session = make_run(folder, steps, seed)
    meter = Meter()
    session.events.subscribe(meter.handle)
    app = TinkerTuiApp(session)
    app.run()
    if app.run_error:
        raise SystemExit(f"the UI run failed: {app.run_error}")
    return meter.rollouts_per_s()


def child(kind: str, folder: Path, steps: int, out: Path) -> int:
    runner = run_headless if kind == "headless" else run_with_ui
    rate = runner(folder, steps, seed=0)
    out.write_text(json.dumps({"rollouts_per_s": rate}))
    return 0


def spawn(kind: str, folder: Path, steps: int) -> float:
    """One run in a fresh process; the UI one on a 160x48 pseudo-terminal."""
    out = folder / "result.json"
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", kind,
            "--folder", str(folder), "--steps", str(steps), "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if kind == "headless":
        subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    else:
        env["TERM"] = "xterm-256color"
        pid, fd = pty.fork()
        if pid == 0:  # the child: the app draws on the pseudo-terminal
            os.execvpe(argv[0], argv, env)
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
        while True:  # read and drop what the app draws, as a terminal would
            try:
                if not os.read(fd, 1 << 16):
                    break
            except OSError:
                break
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"the UI run exited with {os.waitstatus_to_exitcode(status)}")
    return float(json.loads(out.read_text())["rollouts_per_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="RL steps per run (default 40)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of each kind, alternating (default 3)")
    parser.add_argument("--child", choices=("headless", "ui"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.folder, args.steps, args.out)

    headless: list[float] = []
    ui: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for kind, results in (("headless", headless), ("ui", ui)):
                folder = Path(tmp) / f"{kind}-{round_}"
                folder.mkdir()
                rate = spawn(kind, folder, args.steps)
                results.append(rate)
                print(f"round {round_ + 1} {kind:>8}: {rate:7.1f} rollouts/s", flush=True)
    ratio = statistics.median(ui) / statistics.median(headless)
    print(f"headless median {statistics.median(headless):.1f} rollouts/s, "
          f"UI median {statistics.median(ui):.1f} rollouts/s")
    print(f"UI-attached / headless throughput ratio: {ratio:.3f} (goal >= 0.9)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
