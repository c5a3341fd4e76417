"""`PYTHONPATH=tests python -m tinker_double --port 8765`: the double in a process of its own.

Faults are set over HTTP: `curl -X POST localhost:8765/_double/faults -d '{"delay":
{"client/config": 30}}'`; `GET /_double/record` shows the calls, deletions and sessions.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from . import API_KEY, TinkerDouble


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tinker_double",
                                     description="A Tinker service double on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--checkpoint-dir", type=Path,
                        help="where checkpoints go (default: a new temporary folder)")
    parser.add_argument("--hold", type=float, default=1.0,
                        help="seconds retrieve_future holds a poll before answering try_again")
    parser.add_argument("--clock-cycle", type=float, default=0.0, metavar="SECONDS",
                        help="run training calls (forward_backward, optim_step, saves) in "
                             "lock-step clock cycles of this length, as Tinker's workers do: "
                             "a request submitted before a cycle starts runs in it, one that "
                             "misses it waits for the next; sampling answers at once (0: no "
                             "cycles)")
    args = parser.parse_args()
    folder = args.checkpoint_dir or Path(tempfile.mkdtemp(prefix="tinker-double-"))
    double = TinkerDouble(folder, port=args.port, hold=args.hold,
                          clock_cycle=args.clock_cycle).start()
    print(f"serving on {double.base_url} (TINKER_API_KEY={API_KEY}), checkpoints in {folder}",
          flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        double.stop()


if __name__ == "__main__":
    main()
