"""`PYTHONPATH=tests python -m tinker_double --port 8765`: the double in a process of its own.

Faults are set over HTTP: `curl -X POST localhost:8765/_double/faults -d '{"delay":
{"client/config": 30}}'`; `GET /_double/record` shows the calls, deletions and sessions.
`--serve-model Qwen/Qwen3-4B-Instruct-2507=./qwen3-folder` serves a hub name from a folder.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from . import API_KEY, TinkerDouble


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tinker_double", description="A Tinker service double on 127.0.0.1."
    )
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--checkpoint-dir", type=Path, help="where checkpoints go (default: a new temporary folder)"
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=1.0,
        help="seconds retrieve_future holds a poll before answering try_again",
    )
    parser.add_argument(
        "--serve-model",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="serve the hub name NAME from the local model folder FOLDER "
        "(repeatable): get_info names FOLDER's tokenizer, samplers and "
        "checkpoints report NAME",
    )
    parser.add_argument(
        "--only-served",
        action="store_true",
        help="the --serve-model names are the whole lineup: capabilities list "
        "only them and any other base model is refused, as a retired one is",
    )
    parser.add_argument(
        "--clock-cycle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="run training calls (forward_backward, optim_step, saves) in "
        "lock-step clock cycles of this length, as Tinker's workers do: "
        "a request submitted before a cycle starts runs in it, one that "
        "misses it waits for the next; sampling answers at once (0: no "
        "cycles)",
    )
    args = parser.parse_args(argv)
    served: dict[str, str] = {}
    for item in args.serve_model:
        name, sep, model_folder = item.partition("=")
        if not sep or not name or not model_folder:
            parser.error(f"--serve-model wants NAME=FOLDER, got {item!r}")
        served[name] = model_folder
    folder = args.checkpoint_dir or Path(tempfile.mkdtemp(prefix="tinker-double-"))
    try:
        double = TinkerDouble(
            folder,
            port=args.port,
            hold=args.hold,
            served_models=served,
            clock_cycle=args.clock_cycle,
            only_served=args.only_served,
        )
    except ValueError as exc:
        parser.error(str(exc))
    double.start()
    print(
        f"serving on {double.base_url} (TINKER_API_KEY={API_KEY}), checkpoints in {folder}",
        flush=True,
    )
    for name, model_folder in double.service.served.folders.items():
        print(f"serving {name} from {model_folder}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        double.stop()


if __name__ == "__main__":
    main()
