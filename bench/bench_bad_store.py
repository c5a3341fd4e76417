"""How fast `run` refuses a store it cannot use, against `tinker-tui --help` in the same run.
Goal: within 1 s of the command on an idle machine; as a ratio, close to `--help` (which
imports nothing heavy) rather than to the seconds torch takes to import.

    python bench/bench_bad_store.py              # 5 alternating rounds
    python bench/bench_bad_store.py --rounds 9

Each measurement is a fresh process, `tinker-tui run example --no-ui --db BAD` (the
installed command; `python -m tinker_tui.app.cli` without it) timed to its exit. The bad
stores: a damaged store, another application's database, a store of a newer schema, a
file that is not SQLite, a folder, and a store another writer keeps locked (the check waits
half a second for that lock, as for a run sharing the store, so it costs that much more).
The kinds alternate with `--help`, so drift in the machine's load hits all of them. Figures:
median and max per kind, each median over the `--help` median, and the exit codes seen.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tinker_tui.engine.events import LogEmitted, RunStarted  # noqa: E402
from tinker_tui.engine.store import APPLICATION_ID, SCHEMA_VERSION, RunStore  # noqa: E402

COMMAND = (
    [shutil.which("tinker-tui") or ""]
    if shutil.which("tinker-tui")
    else [sys.executable, "-m", "tinker_tui.app.cli"]
)


def make_store(path: Path) -> None:
    async def go() -> None:
        store = await RunStore.open(path)
        store.handle(
            RunStarted(
                time=1.0,
                run_id="r1",
                name="yes_no_maybe",
                backend="local",
                base_model="tiny",
                max_steps=2,
                start_step=0,
                config={},
            )
        )
        for i in range(3000):
            store.handle(LogEmitted(time=2.0 + i, level="info", message="x" * 200))
        await store.close()

    asyncio.run(go())


def bad_stores(folder: Path) -> dict[str, Path]:
    stores = {}
    damaged = stores["damaged"] = folder / "damaged.db"
    make_store(damaged)
    data = bytearray(damaged.read_bytes())
    middle = len(data) // 2 // 4096 * 4096
    data[middle : middle + 4096] = b"\xff" * 4096
    damaged.write_bytes(bytes(data))
    other = stores["other application"] = folder / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    newer = stores["newer schema"] = folder / "newer.db"
    with sqlite3.connect(newer) as conn:
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
        conn.execute("CREATE TABLE runs (run_id TEXT)")
    conn.close()
    garbage = stores["not SQLite"] = folder / "garbage.db"
    garbage.write_bytes(os.urandom(8192))
    directory = stores["a folder"] = folder / "folder.db"
    directory.mkdir()
    locked = stores["locked"] = folder / "locked.db"
    make_store(locked)
    return stores


def time_to_exit(args: list[str], env: dict[str, str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run([*COMMAND, *args], env=env, capture_output=True, timeout=120)
    return time.perf_counter() - started, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    env = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "CI")}
    with tempfile.TemporaryDirectory() as tmp:
        stores = bad_stores(Path(tmp))
        holder = sqlite3.connect(stores["locked"], isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another writer keeps the write lock
        times: dict[str, list[float]] = {"--help": []}
        codes: dict[str, set[int]] = {"--help": set()}
        for _ in range(rounds):
            for kind, args in [("--help", ["--help"])] + [
                (kind, ["run", "example", "--no-ui", "--db", str(path)])
                for kind, path in stores.items()
            ]:
                seconds, code = time_to_exit(args, env)
                times.setdefault(kind, []).append(seconds)
                codes.setdefault(kind, set()).add(code)
        holder.execute("ROLLBACK")
        holder.close()
    base = statistics.median(times["--help"])
    print(
        f"{'kind':<20} {'median s':>9} {'max s':>7} {'/ --help':>9}  exit codes"
        f"   ({rounds} rounds, {' '.join(COMMAND[-1:])}, load {os.getloadavg()[0]:.1f})"
    )
    for kind, values in times.items():
        median = statistics.median(values)
        print(
            f"{kind:<20} {median:9.3f} {max(values):7.3f} {median / base:9.2f}  "
            f"{sorted(codes[kind])}"
        )


if __name__ == "__main__":
    main()
