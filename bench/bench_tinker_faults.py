"""The Tinker path under full-size faults, and the example's learning through the SDK.

    python bench/bench_tinker_faults.py [--only NAME ...] [--skip-learning]

Each case runs `tinker-tui run example --backend tinker --no-ui` in a child process against
the service double (tests/tinker_double, served from this process), with the issue's fault at
full size and the engine's default settings (waits reported after 15 s, an unreachable service
given up after 60 s). A case that waits is stopped with SIGINT once its wait is shown. For each
it prints what the user saw first, the exit, the seconds to the clear error (or from SIGINT to
exit), and the engine's own event-loop lag over the whole run (p99 and max, from its log).

The learning run is the example with the local backend's settings (60 warm-up steps, learning
rate 3e-3, 60 steps) through the SDK: seconds and step to a 3-step mean reward >= 0.9, the end.

Timings are wall-clock on a shared machine: read them with `uptime` (printed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from tinker_double import Burst, Faults, TinkerDouble  # noqa: E402

MODEL = ["--base-model", "tinker-tui/tiny-chat", "--eval-every", "0"]
SHORT = [*MODEL, "--warmup-steps", "0", "--steps", "3"]
LEARN = [*MODEL, "--warmup-steps", "60", "--learning-rate", "3e-3", "--steps", "60"]


@dataclass
class Case:
    name: str
    fault: str  # as the issue names it
    faults: Faults | None  # None: no service (a closed port)
    stop_on: str | None = None  # SIGINT once a warning matches this
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=lambda: list(SHORT))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def silent_hub() -> tuple[socket.socket, str]:
    """An address that accepts connections and never answers (a hub behind a black hole)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def cases(hub: str) -> list[Case]:
    return [
        Case(
            "slow_config", "client/config answers after 30 s", Faults(delay={"client/config": 30.0})
        ),
        Case("unreachable", "no service (closed port)", None),
        Case("burst_429", "asample: 429 x 40", Faults(fail={"asample": Burst(429, 40)})),
        Case(
            "burst_503", "create_session: 503 x 6", Faults(fail={"create_session": Burst(503, 6)})
        ),
        Case(
            "optim_step_503",
            "optim_step: 503 for good",
            Faults(fail={"optim_step": Burst(503)}),
            stop_on="optim_step has waited",
        ),
        Case(
            "stuck_future",
            "optim_step's future: try_again for good",
            Faults(stuck_futures={"optim_step"}),
            stop_on="optim_step has waited",
        ),
        Case(
            "silent_sampler",
            "asample never answers",
            Faults(hang={"asample"}),
            stop_on="sample has waited",
        ),
        Case(
            "tokenizer_offline",
            "tokenizer not cached, hub silent",
            Faults(tokenizer_id="acme/not-cached-tokenizer"),
            env={"HF_ENDPOINT": hub, "HF_HOME": tempfile.mkdtemp(prefix="hf-home-")},
        ),
    ]


def child_env(*extra: dict[str, str]) -> dict[str, str]:
    """The run's environment: this one, without the offline switches the double's local
    backend set in it (they would make the child's tokenizer case an HF_HUB_OFFLINE one)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(name, None)
    for more in extra:
        env.update(more)
    return env


def run(case: Case, folder: Path) -> dict:
    double = None
    if case.faults is None:
        env = {
            "TINKER_BASE_URL": f"http://127.0.0.1:{closed_port()}",
            "TINKER_API_KEY": "tml-nobody-answers",
        }
    else:
        double = TinkerDouble(folder / "service", faults=case.faults).start()
        env = double.env()
    full = child_env(env, case.env)
    db = folder / "runs.db"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--backend",
            "tinker",
            "--no-ui",
            "--db",
            str(db),
            *case.args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full,
    )
    errors: list[str] = []
    threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True).start()
    started = signalled = None
    first_wait = ""
    for line in proc.stdout:
        now = time.monotonic()
        if started is None and re.match(r"run \S+: task", line):
            started = now
        if line.startswith("warning: ") and not first_wait:
            first_wait = f"{line[9:].strip()} (at {now - (started or now):.0f} s)"
        if case.stop_on and signalled is None and re.search(case.stop_on, line):
            signalled = now
            proc.send_signal(signal.SIGINT)
    code = proc.wait()
    ended = time.monotonic()
    time.sleep(0.2)
    if double is not None:
        double.stop()
    with sqlite3.connect(db) as conn:
        log = [m for (m,) in conn.execute("select message from log order by rowid")]
    lag = next((m for m in log if m.startswith("event loop lag over the run")), "")
    p99, worst = re.search(r"p99 ([\d.]+) ms, max ([\d.]+) ms", lag).groups() if lag else ("?", "?")
    error = (errors[0].strip().splitlines() or [""])[-1] if errors and code not in (0, 130) else ""
    return {
        "case": case.name,
        "fault": case.fault,
        "saw": first_wait or "(no warning)",
        "exit": code,
        "error": error,
        "seconds": round(ended - (signalled or started or ended), 1),
        "measured_from": "SIGINT" if signalled else "run start",
        "lag_p99_ms": p99,
        "lag_max_ms": worst,
    }


def learning(folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    with TinkerDouble(folder / "service") as double:
        db = folder / "runs.db"
        env = child_env(double.env())
        launched = time.time()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tinker_tui.app.cli",
                "run",
                "example",
                "--backend",
                "tinker",
                "--no-ui",
                "--db",
                str(db),
                *LEARN,
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        total = time.time() - launched
        deleted = len(double.service.deleted)
        finished = [s.finished for s in double.service.sessions.values()]
    if not db.exists():
        return {"exit": done.returncode, "error": (done.stderr.strip().splitlines() or [""])[-1]}
    with sqlite3.connect(db) as conn:
        steps = [
            (s, t, json.loads(m)["reward/mean"])
            for s, t, m in conn.execute("select step, time, metrics from steps order by step")
        ]
    rewards = [r for _, _, r in steps]
    reached = next(
        (i for i in range(2, len(rewards)) if sum(rewards[i - 2 : i + 1]) / 3 >= 0.9), None
    )
    return {
        "exit": done.returncode,
        "total_s": round(total, 1),
        "first_step": f"{rewards[0]:.2f} at {steps[0][1] - launched:.0f} s" if steps else "-",
        "3-step mean >= 0.9": (
            f"step {steps[reached][0]} at {steps[reached][1] - launched:.0f} s"
            if reached is not None
            else "never"
        ),
        "end": f"{rewards[-1]:.2f} at step {steps[-1][0]}" if steps else "-",
        "checkpoints deleted": deleted,
        "sessions": finished,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--skip-learning", action="store_true")
    args = parser.parse_args()
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    hub_socket, hub = silent_hub()
    root = Path(tempfile.mkdtemp(prefix="bench-tinker-"))
    for case in cases(hub):
        if args.only and case.name not in args.only:
            continue
        folder = root / case.name
        folder.mkdir()
        print(json.dumps(run(case, folder)), flush=True)
    hub_socket.close()
    if not args.skip_learning:
        print(json.dumps({"learning": learning(root / "learning")}), flush=True)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
