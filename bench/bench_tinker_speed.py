"""The Tinker path at service speed: sample requests per group, completions/s against a plain
SDK loop, and clock cycles per training step against the naive loop.

    python bench/bench_tinker_speed.py [--only requests|throughput|cycles ...]

requests: `tinker-tui run example --backend tinker --no-ui` (a child process) against the
service double (tests/tinker_double, served from this process), groups of 16, with the
policy server's coalescing on (the default) and off (`--sample-coalesce-ms 0`): the double's
own record counts the `asample` requests, the run store the groups.

throughput: completions/s at group 32, a group of 32 rollouts started together through the
engine's arrangement (task rollouts, their openai client and the policy server on the rollout
thread, the real `BackendSession` on the SDK), in both task forms: per-trajectory `rollout`
(32 requests n=1) and `group_rollout` (one request n=32); beside a plain SDK loop that asks
`sample(num_samples=32)` itself, in one run against one double (served by a process of its
own, so neither side shares its CPU with the other's service), the same number of groups in
flight on each side (`--in-flight`), each group in flight with a prompt of its own, the sides
interleaved in short slices (`--slices`) so that the machine's drifting load falls on each
alike. Each row adds a round trip to every `asample` (`--latency-ms`): at +0 ms the double
answers in milliseconds and the ratio is this process's CPU per group (printed beside it)
against the SDK call's alone; a real service sampling 32 answers takes seconds.

cycles: the double in clock-cycle mode (`--clock-cycle`, 1 s): training steps through the
engine's trainer (`BackendSession`: next step submitted before the last one's tail is
awaited) and through the naive sequential loop (await forward_backward, then optim_step,
then the sampler save); cycles per step at steady state, from the double's cycle record.

Timings are wall-clock on a shared machine: read them with the load printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from tinker_double import TinkerDouble  # noqa: E402

MODEL = "tinker-tui/tiny-chat"


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **extra)
    env.pop("HF_HUB_OFFLINE", None)
    return env


# ---------------------------------------------------------------------- requests per group
def requests_per_group(coalesce_ms: float, steps: int) -> tuple[float, int, int, int]:
    """(asample requests per group, requests, groups finished, groups started) of one run
    of the example. Groups still in flight when the run stops have sent their requests
    too: the figure divides by the groups started (an upper bound on the true ratio is
    requests / groups finished, also returned)."""
    with tempfile.TemporaryDirectory() as tmp, TinkerDouble(Path(tmp) / "ckpt") as double:
        db = Path(tmp) / "run.db"
        command = [
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
            "--base-model",
            MODEL,
            "--warmup-steps",
            "0",
            "--eval-every",
            "0",
            "--steps",
            str(steps),
            "--group-size",
            "16",
            "--groups-per-step",
            "2",
            "--rollout-workers",
            "4",
            "--sample-coalesce-ms",
            f"{coalesce_ms:g}",
        ]
        done = subprocess.run(
            command,
            env=child_env(double.env()),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise SystemExit(f"the run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        requests = sum(1 for _, path, _ in double.service.calls if path == "asample")
        with sqlite3.connect(db) as conn:
            groups = conn.execute("select count(*) from sampled_groups").fetchone()[0]
            groups += conn.execute(
                "select count(*) from discarded_groups where reason = 'error'"
            ).fetchone()[0]
            started = conn.execute("select count(*) from group_lifecycle").fetchone()[0]
        requests -= 1  # the server's warm-up request ("ready?") before the pipeline starts
        return requests / max(started, 1), requests, groups, started


def bench_requests(steps: int) -> None:
    print(f"\n== sample requests per group of 16 ({steps} steps, 2 groups a step) ==")
    for ms in (5.0, 0.0):
        before = load()
        per_group, requests, groups, started = requests_per_group(ms, steps)
        label = f"coalescing {ms:g} ms" if ms else "coalescing off"
        print(
            f"{label:>20}: {per_group:5.2f} requests/group ({requests} asample for "
            f"{started} groups started, {groups} finished: at most "
            f"{requests / max(groups, 1):.2f})  [{before} -> {load()}]"
        )


# ---------------------------------------------------------------------- throughput
def messages_for(lane: int) -> list[dict[str, str]]:
    """Each lane (a group in flight) asks its own question, as different scenarios do: no
    side gains from requests of different groups sharing one sampling call."""
    return [
        {
            "role": "user",
            "content": f"Answer with one word: yes, no or maybe. Question {lane}: is the sky blue?",
        }
    ]


class DoubleProcess:
    """`python -m tinker_double` in a child process, with the given extra flags."""

    def __init__(self, *flags: str) -> None:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.tmp = tempfile.TemporaryDirectory()
        env = child_env({"PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"})
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tinker_double",
                "--port",
                str(self.port),
                "--checkpoint-dir",
                self.tmp.name,
                *flags,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "serving on" not in line:
            raise SystemExit(f"the double did not start: {line}{self.proc.stdout.read()}")
        self.base_url = f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        from tinker_double import API_KEY

        return {"TINKER_BASE_URL": self.base_url, "TINKER_API_KEY": API_KEY}

    def record(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(f"{self.base_url}/_double/record") as answer:
            return dict(json.loads(answer.read()))

    def set_faults(self, faults: dict[str, Any]) -> None:
        import urllib.request

        request = urllib.request.Request(
            f"{self.base_url}/_double/faults", method="POST", data=json.dumps(faults).encode()
        )
        with urllib.request.urlopen(request) as answer:
            answer.read()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.tmp.cleanup()


@dataclass
class Side:
    """One side of the throughput comparison, its figures summed over its slices."""

    label: str
    one_group: Any
    #: (chat requests in, HTTP requests out) of the side's own coalescing client.
    client_stats: Any = None
    completions: int = 0
    groups: int = 0
    seconds: float = 0.0
    #: CPU seconds of this process (every thread: the SDK's, the rollouts', the engine's)
    #: while the side ran; the sides run one at a time, so each slice's CPU is its own.
    cpu: float = 0.0
    double_calls: Counter[str] = field(default_factory=Counter)
    chat_requests: int = 0
    http_requests: int = 0
    server_requests: int = 0
    sampling_calls: int = 0

    @property
    def rate(self) -> float:
        return self.completions / max(self.seconds, 1e-9)

    def seen(self, in_flight: int) -> str:
        n = max(self.groups, 1)
        return (
            f"{self.double_calls['asample'] / n:.2f} asample, "
            f"{self.double_calls['retrieve_future'] / n:.1f} retrieve_future a group, "
            f"{1000 * self.seconds * in_flight / n:.0f} ms a group, "
            f"{1000 * self.cpu / n:.1f} ms of this process's CPU a group"
        )


async def _slice(side: Side, seconds: float, in_flight: int, record: Any, server: Any) -> None:
    """Groups of completions, `in_flight` lanes at a time (lane i asks `messages_for(i)`),
    for `seconds`, added to the side's figures (with what the double and the coalescers saw)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds

    def double_calls() -> Counter[str]:
        return Counter(path for _, path, _ in record()["calls"])

    async def lane(i: int) -> None:
        while loop.time() < end:
            done = await side.one_group(i)  # read after the await: lanes run meanwhile
            side.completions += done
            side.groups += 1

    before = await asyncio.to_thread(double_calls)
    stats = side.client_stats
    asked, sent = (stats.requests, stats.sent) if stats else (0, 0)
    requests, calls = server.coalescer.stats.requests, server.coalescer.stats.calls
    started, cpu = loop.time(), time.process_time()
    await asyncio.gather(*(lane(i) for i in range(in_flight)))
    side.seconds += loop.time() - started
    side.cpu += time.process_time() - cpu
    side.double_calls.update((await asyncio.to_thread(double_calls)) - before)
    if stats:
        side.chat_requests += stats.requests - asked
        side.http_requests += stats.sent - sent
    side.server_requests += server.coalescer.stats.requests - requests
    side.sampling_calls += server.coalescer.stats.calls - calls


def _tasks(max_tokens: int) -> tuple[Any, Any]:
    """The two task forms, as a user writes them: per-trajectory `rollout` (one request each)
    and `group_rollout` (the group's n answers from one request)."""
    from tinker_tui import Task, Trajectory

    async def rollout(client: Any, model: str, scenario: Any) -> Any:
        completion = await client.chat.completions.create(
            model=model, messages=scenario.data, max_tokens=max_tokens
        )
        choice = completion.choices[0]
        return Trajectory.from_choices([choice], reward=float(len(choice.message.content or "")))

    async def group_rollout(client: Any, model: str, scenario: Any, n: int) -> list[Any]:
        completion = await client.chat.completions.create(
            model=model, messages=scenario.data, max_tokens=max_tokens, n=n
        )
        return [
            Trajectory.from_choices([c], reward=float(len(c.message.content or "")))
            for c in completion.choices
        ]

    def scenarios(_rng: Any) -> Any:
        return iter(())

    return (
        Task(name="policy", scenarios=scenarios, rollout=rollout),
        Task(name="policy", scenarios=scenarios, group_rollout=group_rollout),
    )


async def _throughput(
    seconds: float,
    group: int,
    in_flight: int,
    max_tokens: int,
    rounds: int,
    latencies: list[float],
    double: DoubleProcess,
    slices: int,
) -> dict[tuple[float, str], list[float]]:
    """Both sides as a run has them: the policy server, its openai client and the task's
    rollouts on the rollout thread's loop (`RolloutThread`), `BackendSession.sample` on this
    (the engine's) loop, a group's rollouts started together (`run_together`)."""
    import tinker

    from tinker_tui import Scenario
    from tinker_tui.engine.backend.session import BackendSession
    from tinker_tui.engine.sampling_defaults import SamplingDefaults
    from tinker_tui.engine.server import PolicyServer
    from tinker_tui.engine.training.rollout_loop import RolloutThread, run_together

    service = tinker.ServiceClient()
    session = BackendSession(service, base_model=MODEL, sampler_checkpoint_every=0)
    await session.start()
    rollouts = RolloutThread()
    await rollouts.start()
    server: Any = None

    async def start_server() -> None:  # on the rollout loop, which serves it
        nonlocal server
        server = PolicyServer(
            rollouts.policy_for_server(session),
            model_name="policy",
            coalesce_window=0.005,
            group_size=group,
            defaults=SamplingDefaults(max_tokens=max_tokens),
        )
        await server.start()

    async def new_client() -> Any:  # one a side, as a run has one for its rollouts
        return server.client()

    await rollouts.run(start_server())
    stop = session.renderer.get_stop_sequences()
    params = tinker.SamplingParams(max_tokens=max_tokens, temperature=1.0, stop=stop)
    prompts = [session.renderer.build_generation_prompt(messages_for(i)) for i in range(in_flight)]
    sampler = session.sampling_client  # the plain loop asks the same sampler itself
    per_trajectory, per_group = _tasks(max_tokens)
    scenarios = [Scenario(id=f"lane-{i}", data=messages_for(i)) for i in range(in_flight)]

    async def plain_group(lane: int) -> int:
        response = await sampler.sample(
            prompt=prompts[lane], num_samples=group, sampling_params=params
        )
        return len(response.sequences)

    async def engine_group(task: Any) -> Any:
        client = await rollouts.run(new_client())

        async def one_group(lane: int) -> int:
            async def roll_out() -> list[Any]:  # on the rollout loop
                return await run_together(
                    task.rollout(client, "policy", scenarios[lane]) for _ in range(group)
                )

            results = await rollouts.run(roll_out())
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                raise errors[0]
            return len(results)

        return one_group

    ratios: dict[tuple[float, str], list[float]] = {}
    forms = [
        ("per-trajectory rollout (n=1 each)", await engine_group(per_trajectory)),
        (f"group_rollout (1 request n={group})", await engine_group(per_group)),
    ]
    await plain_group(0)
    for _, one_group in forms:
        await one_group(0)  # warm every path
    for latency in latencies:
        double.set_faults({"delay": {"asample": latency}} if latency else {})
        for r in range(rounds):
            before = load()
            plain = Side(f"plain SDK n={group}", plain_group)
            sides = [plain] + [
                Side(f"tinker-tui {label}", one_group, stats)
                for (label, one_group), stats in zip(forms, server.client_coalescing, strict=True)
            ]
            # Interleaved in short slices, the order turned each time: the machine's load
            # drifts, and each side gets its share of every stretch of it.
            for k in range(slices):
                for side in sides[k % len(sides) :] + sides[: k % len(sides)]:
                    await _slice(side, seconds / slices, in_flight, double.record, server)
            lines = [f"{plain.label}: {plain.rate:7.1f}/s ({plain.seen(in_flight)})"]
            for side in sides[1:]:
                ratios.setdefault((latency, side.label), []).append(side.rate / plain.rate)
                lines.append(
                    f"{side.label}: {side.rate:7.1f}/s = {side.rate / plain.rate:.2f}x "
                    f"({side.chat_requests / max(side.http_requests, 1):.1f} chat requests "
                    f"per HTTP request, {side.server_requests / max(side.sampling_calls, 1):.1f}"
                    f" HTTP requests per sampling call; {side.seen(in_flight)})"
                )
            print(
                f"asample round trip +{latency * 1000:.0f} ms, round {r + 1} ({slices} "
                f"slices a side, interleaved):\n    "
                + "\n  | ".join(lines)
                + f"\n  [{before} -> {load()}]",
                flush=True,
            )
    double.set_faults({})

    async def stop_server() -> None:
        await server.stop()

    await rollouts.close(before=stop_server)
    await session.close("success")
    return ratios


def bench_throughput(
    seconds: float, rounds: int, latencies: list[float], slices: int, in_flight: int
) -> None:
    group, max_tokens = 32, 16
    print(
        f"\n== completions/s at group {group} ({in_flight} groups in flight, each its own "
        f"prompt, max_tokens {max_tokens}, {seconds:g} s a side) =="
    )
    double = DoubleProcess()
    try:
        os.environ.update(double.env())
        ratios = asyncio.run(
            _throughput(seconds, group, in_flight, max_tokens, rounds, latencies, double, slices)
        )
    finally:
        double.close()
    # The double answers at once: at +0 ms the ratio is this process's CPU per group (the
    # openai client's and the policy server's work) against the SDK call's alone. A service
    # sampling 32 real answers takes seconds; the longer round trips show where that leaves it.
    print(f"completions/s against the plain SDK n={group} loop (goal >= 0.9x), per round:")
    for (latency, label), values in ratios.items():
        print(f"  +{latency * 1000:5.0f} ms  {label:<50} " + "  ".join(f"{v:.2f}x" for v in values))


# ---------------------------------------------------------------------- clock cycles
def _steady_cycles(fb_cycles: list[int], skip: int) -> float:
    """Cycles per step from the cycle numbers of each step's forward_backward, the first
    `skip` steps left out (start-up)."""
    tail = fb_cycles[skip:]
    return (tail[-1] - tail[0]) / max(len(tail) - 1, 1)


def _sdk_loop(steps: int, naive: bool) -> list[int]:
    """naive: fb, optim_step, then the sampler snapshot, each awaited before the next is
    sent. Else the trainer before coalesced steps: fb and optim_step submitted together and
    awaited, then the snapshot and the named sampler save."""
    import tinker
    from tinker_cookbook.renderers import get_renderer

    service = tinker.ServiceClient()
    training = service.create_lora_training_client(base_model=MODEL, rank=8).result()
    renderer = get_renderer("role_colon", training.get_tokenizer())
    model_input, weights = renderer.build_supervised_example(
        [{"role": "user", "content": "Is the sky blue?"}, {"role": "assistant", "content": "maybe"}]
    )
    tokens = model_input.to_ints()
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "weights": [float(w) for w in weights.tolist()[1:]],
        },
    )
    adam = tinker.AdamParams(learning_rate=1e-4)
    for step in range(steps):
        if naive:
            training.forward_backward([datum] * 8, "cross_entropy").result()
            training.optim_step(adam).result()
            training.save_weights_and_get_sampling_client().result()
        else:
            fb = training.forward_backward([datum] * 8, "cross_entropy")
            optim = training.optim_step(adam)
            fb.result(), optim.result()
            snapshot = training.save_weights_and_get_sampling_client()
            saved = training.save_weights_for_sampler(f"s{step}")
            snapshot.result(), saved.result()
    service.close("success", None) if hasattr(service, "close") else None
    return [training.model_id]  # type: ignore[list-item]


def _fb_cycles(record: dict[str, Any], model_id: str) -> list[int]:
    return [
        n for n, model, kind in record["cycles"] if model == model_id and kind == "forward_backward"
    ]


def bench_cycles(cycle: float, steps: int) -> None:
    print(
        f"\n== clock cycles per training step (the double's --clock-cycle {cycle:g}, "
        f"{steps} steps; start-up steps left out) =="
    )
    double = DoubleProcess("--clock-cycle", f"{cycle:g}")
    try:
        before = load()
        with tempfile.TemporaryDirectory() as tmp:
            command = [
                sys.executable,
                "-m",
                "tinker_tui.app.cli",
                "run",
                "example",
                "--backend",
                "tinker",
                "--no-ui",
                "--db",
                str(Path(tmp) / "run.db"),
                "--base-model",
                MODEL,
                "--warmup-steps",
                "0",
                "--eval-every",
                "0",
                "--steps",
                str(steps),
                "--checkpoint-every",
                "0",
                "--group-size",
                "8",
                "--groups-per-step",
                "2",
            ]
            done = subprocess.run(
                command,
                env=child_env(double.env()),
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=900,
            )
            if done.returncode != 0:
                raise SystemExit(f"the run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        record = double.record()
        models = {model for _, model, kind in record["cycles"] if kind == "forward_backward"}
        (model,) = models
        engine = _fb_cycles(record, model)
        print(
            f"  engine (tinker-tui run example): {_steady_cycles(engine, 2):.2f} cycles/step "
            f"({len(engine)} steps, forward_backward in cycles {engine[:3]}...{engine[-3:]})"
            f"  [{before} -> {load()}]"
        )
        os.environ.update(double.env())
        for naive, label in (
            (True, "naive loop (await fb, then optim_step, then the sampler snapshot)"),
            (False, "fb + optim together, then publish (the trainer before)"),
        ):
            before = load()
            (model,) = _sdk_loop(max(4, steps // 2), naive)
            cycles = _fb_cycles(double.record(), str(model))
            print(
                f"  {label}: {_steady_cycles(cycles, 1):.2f} cycles/step ({len(cycles)} "
                f"steps)  [{before} -> {load()}]"
            )
    finally:
        double.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", action="append", choices=["requests", "throughput", "cycles"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--slices",
        type=int,
        default=4,
        help="throughput: each side's seconds in this many interleaved slices",
    )
    parser.add_argument("--clock-cycle", type=float, default=1.0)
    parser.add_argument("--cycle-steps", type=int, default=12)
    parser.add_argument(
        "--latency-ms",
        default="0,250,1000",
        help="round trips added to each asample request, comma-separated "
        "(0: the double's own, a few ms; a real service sampling 32 "
        "answers takes seconds)",
    )
    parser.add_argument(
        "--in-flight", type=int, default=4, help="throughput: groups in flight on each side"
    )
    args = parser.parse_args()
    only = set(args.only or ["requests", "throughput", "cycles"])
    import logging

    logging.getLogger("tinker").setLevel(logging.WARNING)  # its try_again retries
    print(f"cores {os.cpu_count()}, {load()}")
    if "requests" in only:
        bench_requests(args.steps)
    if "cycles" in only:
        bench_cycles(args.clock_cycle, args.cycle_steps)
    if "throughput" in only:
        bench_throughput(
            args.seconds,
            args.rounds,
            [float(x) / 1000 for x in args.latency_ms.split(",")],
            args.slices,
            args.in_flight,
        )


if __name__ == "__main__":
    main()
