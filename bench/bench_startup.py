"""How fast the command line answers: time to the dashboard's first frame and time to a
usage error, each against `tinker-tui --help` measured in the same run. Goals: first frame
<= 1 s and a usage error <= 1 s on an idle machine; as ratios, both close to `--help`
(which imports nothing heavy) rather than to the seconds torch takes to import.

    python bench/bench_startup.py              # 5 alternating rounds
    python bench/bench_startup.py --rounds 9

Each measurement is a fresh process. `--help` and the usage errors (`run exampel`: a task
name off by two letters; `run example --steps 0`: a bad setting) run to their exit. The
first frame: `run example` on a pseudo-terminal of 80x24, timed until the dashboard's status
line ("STARTING") is written to the terminal, then it is stopped with SIGTERM (it stops
its engine; the run itself is not measured). The three kinds alternate, so drift in the machine's load hits all
of them. Figures: median and min per kind, and each median over the `--help` median.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

COMMAND = [sys.executable, "-m", "tinker_tui.app.cli"]
FRAME_MARKER = b"STARTING"


def environment(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD", "CI")
    }
    env.update(
        HOME=str(home), TEXTUAL_ANIMATIONS="none", TERM="xterm-256color", OMP_NUM_THREADS="1"
    )
    return env


def time_to_exit(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run([*COMMAND, *args], env=env, cwd=cwd, capture_output=True, timeout=120)
    return time.perf_counter() - started, done.returncode


def time_to_first_frame(env: dict[str, str], cwd: Path, timeout: float = 60.0) -> float:
    """Seconds from starting `run example` on an 80x24 pseudo-terminal to its first frame."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*COMMAND, "run", "example", "--db", str(cwd / "bench.db")],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    os.close(follower)
    seen = b""
    try:
        while True:
            left = timeout - (time.perf_counter() - started)
            if left <= 0:
                raise TimeoutError("no first frame within the timeout")
            ready, _, _ = select.select([leader], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                raise RuntimeError("the dashboard exited before drawing") from None
            seen = (seen + chunk)[-4096:]
            if FRAME_MARKER in seen:
                return time.perf_counter() - started
    finally:
        stop(proc, leader)


def stop(proc: subprocess.Popen[bytes], leader: int, timeout: float = 60.0) -> None:
    """SIGTERM, as a user's `kill`: the dashboard stops its engine (or cancels its start)
    and leaves. The engine has a session of its own, so killing the dashboard's process
    group would leave it training, loading the machine for the rounds after. The terminal
    is drained meanwhile; SIGKILL after `timeout` seconds."""
    proc.send_signal(signal.SIGTERM)
    deadline = time.perf_counter() + timeout
    while proc.poll() is None and time.perf_counter() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                os.read(leader, 65536)
            except OSError:
                break
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    os.close(leader)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {
        "--help": [],
        "usage error (task)": [],
        "usage error (setting)": [],
        "first frame": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        env = environment(cwd)
        time_to_exit(["--help"], env, cwd)  # warm the file cache once, unmeasured
        for _ in range(args.rounds):
            elapsed, code = time_to_exit(["--help"], env, cwd)
            assert code == 0, code
            times["--help"].append(elapsed)
            elapsed, code = time_to_exit(["run", "exampel"], env, cwd)
            assert code == 2, code
            times["usage error (task)"].append(elapsed)
            elapsed, code = time_to_exit(["run", "example", "--steps", "0"], env, cwd)
            assert code == 2, code
            times["usage error (setting)"].append(elapsed)
            times["first frame"].append(time_to_first_frame(env, cwd))
    load = os.getloadavg()
    print(
        f"{args.rounds} rounds, each a fresh process; load average after: "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    base = statistics.median(times["--help"])
    for kind, values in times.items():
        median = statistics.median(values)
        print(
            f"{kind:<24} median {median:6.3f} s  min {min(values):6.3f} s  "
            f"{median / base:5.2f}x --help"
        )


if __name__ == "__main__":
    main()
