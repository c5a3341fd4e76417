"""What a long run of verifiers episodes holds on to: the process's resident memory, the
distinct capture addresses the episodes were given and the HTTP clients verifiers keeps for
them (one per distinct endpoint, until the environment stops serving), over many rollouts.

    python bench/bench_vf_clients.py [--rollouts 480] [--concurrency 8] [--every 80]

Needs the verifiers extra (`pip install -e ".[verifiers]"`). The rollouts are the verifiers
example's episodes (`tinker_tui.examples.verifiers_yes_no_maybe`, its harness in-process), run
as a training run starts them (`captured_rollout`, each under a capture key) against the
policy server on the local backend's embedded model, `--concurrency` at a time; nothing is
trained. Every `--every` rollouts it prints the resident memory, the distinct keys so far,
verifiers' client count and the mean seconds a rollout took since the last line; the memory
is read after a full garbage collection (an episode leaves cyclic garbage, which Python frees
in rare full collections: without one, the memory climbs in steps and levels off). Goal: the
keys and clients stay at most the concurrency, and the memory flat once they are made.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rss_mb() -> float:
    """Resident memory after a full garbage collection: what is held, not the cyclic garbage
    (an episode leaves some) that Python's rare full collections would free later."""
    gc.collect()
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def verifiers_clients(env: Any) -> int:
    """The model clients verifiers' interception server(s) keep, one per distinct endpoint."""
    interception = env._interception
    if interception is None:
        return 0
    servers = getattr(interception, "servers", None) or [interception]
    return sum(len(server.clients) for server in servers)


async def main(args: argparse.Namespace) -> None:
    import tempfile

    from tinker_tui import Task
    from tinker_tui.engine.backend.session import BackendSession
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient
    from tinker_tui.engine.rollouts.task import captured_rollout
    from tinker_tui.engine.sampling_defaults import SamplingDefaults
    from tinker_tui.engine.server import PolicyServer
    from tinker_tui.examples import verifiers_yes_no_maybe as example

    env = example.environment()
    task = Task.from_verifiers(env, name="vf")
    with tempfile.TemporaryDirectory() as folder:
        session = BackendSession(
            LocalServiceClient(checkpoint_dir=Path(folder)), base_model=DEFAULT_BASE_MODEL
        )
        await session.start()
        server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults())
        await server.start()
        keys: set[str] = set()
        opening = server.captures.open

        def open_keeping(key: str | None = None, **kwargs: Any) -> str:
            opened = opening(key, **kwargs)
            keys.add(opened)
            return opened

        server.captures.open = open_keeping  # type: ignore[method-assign]
        scenarios = task.scenarios(random.Random(0))
        client = server.client()
        gate = asyncio.Semaphore(args.concurrency)
        failed = 0

        async def one() -> None:
            nonlocal failed
            async with gate:
                try:
                    await captured_rollout(task, client, "policy", next(scenarios), server.captures)
                except Exception as exc:
                    failed += 1
                    print(f"  failed: {type(exc).__name__}: {exc}")

        print(f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        # a first batch: the env starts serving, the model warms up
        await asyncio.gather(*(one() for _ in range(args.concurrency)))
        start_rss, done = rss_mb(), args.concurrency
        print(f"{'rollouts':>9} {'rss MB':>8} {'keys':>5} {'clients':>8} {'s/rollout':>10}")
        print(f"{done:>9} {start_rss:>8.0f} {len(keys):>5} {verifiers_clients(env):>8}")
        while done < args.rollouts:
            batch = min(args.every, args.rollouts - done)
            began = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(batch)))
            took = (time.perf_counter() - began) / batch
            done += batch
            print(
                f"{done:>9} {rss_mb():>8.0f} {len(keys):>5} {verifiers_clients(env):>8} "
                f"{took:>10.3f}"
            )
        end_rss = rss_mb()
        print(
            f"rss {start_rss:.0f} -> {end_rss:.0f} MB over {done - args.concurrency} rollouts "
            f"({(end_rss - start_rss) / max(1, done - args.concurrency):.3f} MB each); "
            f"{len(keys)} keys, {verifiers_clients(env)} verifiers clients, {failed} failed; "
            f"load {os.getloadavg()[0]:.2f}"
        )
        await server.stop()
        await session.close("success")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=480)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--every", type=int, default=80)
    asyncio.run(main(parser.parse_args()))
