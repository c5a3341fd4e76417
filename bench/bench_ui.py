"""The dashboard and the engine, each in its own process, measured in this one run:

1. engine throughput with the dashboard attached vs headless (goal: ratio >= 0.95);
2. key press -> screen changed, p50/p99 over >= 50 presses while the engine trains the
   example at full speed (goal: p99 <= 100 ms);
3. store -> screen delay, p50/p99: a step committed to the store -> that step shown in the
   dashboard's status line (goal: p99 <= 1 s); and, apart, the engine's own part: the
   step's event published -> committed.

    python bench/bench_ui.py                  # 2 rounds of each, 80 RL steps per run
    python bench/bench_ui.py --steps 60 --rounds 1

Workload: `tinker-tui run example` on the local backend (no warm-up, no periodic
checkpoints, no health pauses), the same seed every time, each run in fresh processes, in
a fresh store. Headless: `run ... --no-ui`. Dashboard: `run ...` on a pseudo-terminal of
160x48 (this script reads what it draws, as a terminal would, and presses keys); its engine
is the same headless run in a process of its own. Runs alternate so drift in the machine's
load hits both sides. Throughput is rollouts sampled per second between the first and the
last training step (start-up excluded), read back from each run's store; the ratio is
dashboard / headless of the medians.

Key presses: `3` (control view) and `1` (dashboard) in turn, 0.1-0.3 s apart, from the
second step on; a press counts as shown when text only the new view draws (a knob's name,
the throughput pane's title) arrives on the terminal. Where a press's time went, from the
kernel's account of the dashboard's main thread (/proc/PID/task/PID/schedstat, Linux):
running, waiting for a CPU (runnable, the scheduler gave the cores to others), or neither
(blocked: on the GIL, on I/O, or idle before the key was read). Dashboard CPU: the
process's user + system time while the engine trains (from the second step to the run's
end) per second of that time. Store -> screen: for each step, the
first time the status line reads that step (or a later one) minus the first time a reader
polling the store every 10 ms saw it (the time the engine stamped the event with, for the
engine's part); all are this machine's wall clock.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import pty
import random
import re
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tinker_tui.engine.events import GroupSampled, StepTrained  # noqa: E402

RUN_ARGS = [
    "--warmup-steps",
    "0",
    "--checkpoint-every",
    "0",
    "--health-window",
    "1000000",
    "--seed",
    "0",
]
ANSI = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][A-Z0-9]|[=>78])")
#: What only the view a key switches to draws.
VIEW_MARKERS = {"3": b"max_steps_off_policy", "1": b"Throughput"}
#: The finish screen's title: the run ended, keys no longer switch views.
FINISHED = b"Run completed"


def schedstat(pid: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of a process's main thread
    so far (Linux)."""
    running, waiting, _ = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
    return int(running) / 1e9, int(waiting) / 1e9


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TINKER_API_KEY")}
    env.update(TERM="xterm-256color", TEXTUAL_ANIMATIONS="none", PYTHONUNBUFFERED="1")
    return env


def command(db: Path, steps: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tinker_tui.app.cli",
        "run",
        "example",
        "--db",
        str(db),
        "--steps",
        str(steps),
        *RUN_ARGS,
        *extra,
    ]


# ------------------------------------------------------------------ reading a run back


async def read_run(db: Path) -> tuple[float, dict[int, float]]:
    """(rollouts/s between the first and the last step, {step: time of its event})."""
    from tinker_tui.engine.store import StoreReader

    async with await StoreReader.open_readonly(db) as store:
        (run,) = await store.runs()
        events = await store.events(run, kinds={GroupSampled, StepTrained})
    step_times = {e.step: e.time for e in events if isinstance(e, StepTrained)}
    first, last = min(step_times.values()), max(step_times.values())
    rollouts = sum(
        e.num_trajectories for e in events if isinstance(e, GroupSampled) and first < e.time <= last
    )
    return rollouts / (last - first), step_times


class StorePoller:
    """When each step first became visible to a reader of the store (polled every 10 ms).
    Reads the steps table directly: a bench may, and the store's reader is too heavy to
    poll this often."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        conn = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    if not self.db.exists():
                        time.sleep(0.01)
                        continue
                    conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=1)
                (top,) = conn.execute("select max(step) from steps").fetchone()
            except sqlite3.Error:
                top = None
            now = time.time()
            if top is not None:
                for k in range(1, int(top) + 1):
                    self.seen.setdefault(k, now)
            time.sleep(0.01)
        if conn is not None:
            conn.close()


# ------------------------------------------------------------------ a terminal


class Terminal:
    """A program on a pseudo-terminal; what it draws is kept with the time it arrived."""

    def __init__(self, argv: list[str], size: tuple[int, int] = (160, 48)) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.execvpe(argv[0], argv, environment())
            finally:
                os._exit(127)
        columns, rows = size
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.chunks: list[tuple[float, bytes]] = []
        self.lock = threading.Lock()
        self._looked: dict[bytes, tuple[int, bytes]] = {}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.chunks.append((time.time(), data))

    def since(self, index: int) -> tuple[int, bytes]:
        with self.lock:
            return len(self.chunks), b"".join(c for _, c in self.chunks[index:])

    def press(self, key: str) -> tuple[float, int]:
        with self.lock:
            index = len(self.chunks)
        sent = time.time()
        os.write(self.fd, key.encode())
        return sent, index

    def wait_for(
        self, marker: bytes, index: int, timeout: float = 10.0, poll: float = 0.002
    ) -> float | None:
        """When `marker` first arrived after chunk `index` (None if not within timeout).
        Each chunk is looked at once, with the end of the one before (a marker or an escape
        sequence may be cut between two): this process shares the cores with the run it
        measures, so its own reading must stay cheap however long the run draws."""
        deadline = time.monotonic() + timeout
        tail = b""
        while time.monotonic() < deadline:
            with self.lock:
                chunks = self.chunks[index:]
            index += len(chunks)
            for arrived, data in chunks:
                window = tail + data
                if marker in ANSI.sub(b"", window):
                    return arrived
                tail = window[-256:]
            time.sleep(poll)
        return None

    def seen(self, marker: bytes) -> bool:
        """Whether `marker` has arrived yet; each chunk is looked at once over the calls (as
        in `wait_for`), so asking before every key press stays cheap."""
        index, tail = self._looked.get(marker, (0, b""))
        with self.lock:
            chunks = self.chunks[index:]
        found = False
        for _, data in chunks:
            window = tail + data
            found = found or marker in ANSI.sub(b"", window)
            tail = window[-256:]
        self._looked[marker] = (index + len(chunks), tail)
        return found

    def shown_steps(self, steps: int) -> dict[int, float]:
        """{step: when the status line first read that step or a later one}."""
        pattern = re.compile(rb"step (\d+)/" + str(steps).encode() + rb"\b")
        shown: dict[int, float] = {}
        text = b""
        with self.lock:
            chunks = list(self.chunks)
        for arrived, data in chunks:
            tail = ANSI.sub(b"", text[-64:] + data)
            text += data
            for match in pattern.finditer(tail):
                step = int(match.group(1))
                for k in range(1, step + 1):
                    shown.setdefault(k, arrived)
        return shown

    def wait(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        self.reader.join(timeout=5)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


# ------------------------------------------------------------------ the runs


def headless(folder: Path, steps: int) -> float:
    db = folder / "runs.db"
    subprocess.run(
        command(db, steps, "--no-ui"),
        check=True,
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rate, _ = asyncio.run(read_run(db))
    return rate


class Press(NamedTuple):
    """One key press: seconds until shown, and the main thread's share of them on a CPU
    and waiting for one."""

    latency: float
    running: float
    waiting: float


def with_dashboard(
    folder: Path, steps: int, presses: int, rng: random.Random
) -> tuple[float, list[Press], list[float], list[float], float]:
    """(rollouts/s, key presses, store -> screen seconds, event -> store seconds, the
    dashboard's CPU seconds per second of training)."""
    db = folder / "runs.db"
    poller = StorePoller(db)
    terminal = Terminal(command(db, steps))
    latencies: list[Press] = []
    while True:  # until the second step is in the store: the engine trains at full speed
        time.sleep(0.1)
        try:
            rows = asyncio.run(read_run(db))[1] if db.exists() else {}
        except Exception:
            rows = {}
        if len(rows) >= 2:
            break
    busy_from, training_from = cpu_seconds(terminal.pid), time.time()
    key = "3"
    misses = 0
    # Presses count only while the engine trains: once the run ends the finish screen is on
    # top (keys go to it, not to the views), so pressing stops there, said below.
    while len(latencies) < presses and not terminal.seen(FINISHED):
        running, waiting = schedstat(terminal.pid)
        sent, index = terminal.press(key)
        shown = terminal.wait_for(VIEW_MARKERS[key], index, timeout=5)
        if shown is None:
            if terminal.seen(FINISHED):
                break
            misses += 1
            if misses > 5:
                raise SystemExit("the dashboard stopped answering keys while the engine trained")
        else:
            ran, waited = schedstat(terminal.pid)
            # the account is read a little after the screen changed: its shares of that
            # span stand for the press's
            share = (shown - sent) / (time.time() - sent)
            latencies.append(
                Press(shown - sent, share * (ran - running), share * (waited - waiting))
            )
        key = "1" if key == "3" else "3"
        time.sleep(rng.uniform(0.1, 0.3))
    ended = terminal.wait_for(FINISHED, 0, timeout=600, poll=0.1)
    if ended is None:
        raise SystemExit("the run did not complete")
    busy_training = (cpu_seconds(terminal.pid) - busy_from) / (time.time() - training_from)
    rate, step_times = asyncio.run(read_run(db))
    trained_while_pressing = max(step_times)
    busy = cpu_seconds(terminal.pid)
    span = max(step_times.values()) - min(step_times.values())
    print(
        f"  the dashboard's process used {busy:.1f} s of CPU in all ({steps} steps trained "
        f"in {span:.1f} s); {busy_training:.2f} s per second while the engine trained",
        flush=True,
    )
    terminal.press("q")
    if (code := terminal.wait()) != 0:
        raise SystemExit(f"the dashboard exited with {code}")
    poller.stop.set()
    shown = terminal.shown_steps(steps)
    delays = [shown[k] - poller.seen[k] for k in step_times if k in shown and k in poller.seen]
    commits = [poller.seen[k] - t for k, t in step_times.items() if k in poller.seen]
    if trained_while_pressing < steps:
        print(f"  (only {trained_while_pressing} steps trained)", flush=True)
    if len(latencies) < presses:
        print(
            f"  the run ended after {len(latencies)} of {presses} key presses: raise "
            "--steps to measure them all while the engine trains",
            flush=True,
        )
    return rate, latencies, delays, commits, busy_training


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=80, help="RL steps per run (default 80)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="runs of each kind, alternating (default 2)"
    )
    parser.add_argument(
        "--presses", type=int, default=30, help="key presses per dashboard run (default 30)"
    )
    args = parser.parse_args()

    rng = random.Random(0)
    rates: dict[str, list[float]] = {"headless": [], "dashboard": []}
    latencies: list[Press] = []
    delays: list[float] = []
    commits: list[float] = []
    busy: list[float] = []
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for kind in ("headless", "dashboard"):
                folder = Path(tmp) / f"{kind}-{round_}"
                folder.mkdir()
                if kind == "headless":
                    rate = headless(folder, args.steps)
                else:
                    rate, pressed, delayed, committed, cpu = with_dashboard(
                        folder, args.steps, args.presses, rng
                    )
                    latencies += pressed
                    delays += delayed
                    commits += committed
                    busy.append(cpu)
                rates[kind].append(rate)
                print(
                    f"round {round_ + 1} {kind:>9}: {rate:7.1f} rollouts/s "
                    f"(load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
    headless_median = statistics.median(rates["headless"])
    dashboard_median = statistics.median(rates["dashboard"])
    print(
        f"headless median {headless_median:.1f} rollouts/s, with the dashboard "
        f"{dashboard_median:.1f} rollouts/s"
    )
    print(
        f"with the dashboard / headless throughput: {dashboard_median / headless_median:.3f} "
        "(goal >= 0.95)"
    )
    shown = [p.latency for p in latencies]
    print(
        f"key press -> screen changed over {len(latencies)} presses: p50 "
        f"{1000 * percentile(shown, 0.5):.0f} ms, p99 {1000 * percentile(shown, 0.99):.0f}"
        f" ms, max {1000 * max(shown):.0f} ms (goal p99 <= 100 ms)"
    )
    for title, chosen in (
        ("all presses", latencies),
        ("presses over 100 ms", [p for p in latencies if p.latency > 0.1]),
    ):
        if chosen:
            total = sum(p.latency for p in chosen)
            running = sum(p.running for p in chosen)
            waiting = sum(p.waiting for p in chosen)
            print(
                f"  {title} ({len(chosen)}): the dashboard's main thread ran "
                f"{running / total:.0%} of their time, waited for a CPU {waiting / total:.0%},"
                f" was blocked or idle {max(0.0, total - running - waiting) / total:.0%}; "
                f"{1000 * running / len(chosen):.0f} ms on a CPU per press"
            )
    print(
        f"the dashboard's CPU while the engine trains: {statistics.median(busy):.2f} s per "
        "second (median over runs)"
    )
    print(
        f"store -> screen over {len(delays)} steps: p50 {1000 * percentile(delays, 0.5):.0f} ms,"
        f" p99 {1000 * percentile(delays, 0.99):.0f} ms (goal p99 <= 1000 ms)"
    )
    print(
        f"  the engine's part, step event -> committed to the store: p50 "
        f"{1000 * percentile(commits, 0.5):.0f} ms, p99 {1000 * percentile(commits, 0.99):.0f} ms"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
