"""What the in-process OpenAI server costs: latency it adds over a direct sampling call, and
requests per second at 32 concurrent requests, with an instant sampler; what a 1,000,000-
character prompt does to its event loop; and what abandoned requests cost the next one.

    python bench/bench_server.py [--requests 2000] [--seconds 5] [--concurrency 32]
                                 [--only overhead|large-prompt|abandoned]

The server runs as in a training run (FastAPI + uvicorn, the real `BackendSession` on the local
backend with its role_colon renderer and tokenizer) in a child process; only the sampling
client is replaced by one that answers at once with a fixed completion, so what is measured is
the server: HTTP, validation, rendering, parsing, JSON. The load comes from this process over
keep-alive connections with a minimal HTTP/1.1 client (so the client's own cost stays small);
the same is then measured with the official `openai.AsyncOpenAI` client, which is what
rollouts use. Goals: at most 2 ms added at p50; at least 500 requests/s on 2 cores.

Large prompt: a request carrying a 1,000,000-character prompt (the tiny-chat context is 2048
tokens) must be refused within 1 s with no stall of the server's event loop over 50 ms. The
stall is measured by a ticker on the server's loop (a 5 ms sleep, how late it wakes), with
the openai client in another process (the server's own cost) and in the same loop (as a
rollout in the engine sends it, so the client's JSON encoding counts too).

Abandoned requests: 10 requests with n=128 whose client gives up after 0.2 s, on the real
local sampler, then one ordinary request: how long that one takes against the same request
on an idle server, and how many abandoned samplings were cancelled before they ran.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MESSAGES = [{"role": "user", "content": "Answer with one word: yes, no or maybe. Is the sky blue?"}]
COMPLETION = " maybe\n\nUser:"


class InstantSamplingClient:
    """Answers every sample() at once with the same tokens (an already-finished future)."""

    def __init__(self, tokens: list[int]) -> None:
        import numpy as np
        import tinker

        self._tinker = tinker
        self._tokens = np.asarray(tokens, dtype=np.int32)
        self._logprobs = np.full(len(tokens), -0.1, dtype=np.float32)

    def sample(self, prompt: Any, num_samples: int, sampling_params: Any, **_: Any) -> Any:
        from concurrent.futures import Future

        from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

        tinker = self._tinker
        response = tinker.SampleResponse(
            sequences=[
                tinker.SampledSequence(
                    stop_reason="stop",
                    sequence_id=f"s{i}",
                    tokens_np=self._tokens,
                    logprobs_np=self._logprobs,
                )
                for i in range(num_samples)
            ]
        )
        future: Future[Any] = Future()
        future.set_result(response)
        return AwaitableConcurrentFuture(future)


async def make_session(checkpoint_dir: str) -> Any:
    from tinker_tui.engine.backend.session import BackendSession
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient

    session = BackendSession(
        LocalServiceClient(checkpoint_dir=checkpoint_dir),
        base_model=DEFAULT_BASE_MODEL,
        sampler_checkpoint_every=0,
    )
    await session.start()
    session.sampling_client = InstantSamplingClient(session.tokenizer.encode(COMPLETION))
    return session


class LagTicker:
    """How late a 5 ms sleep wakes on this loop, with the time of each wake-up."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (monotonic time, lag in seconds)

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(0.005)
            now = time.monotonic()
            self.samples.append((now, max(0.0, now - started - 0.005)))

    def max_since(self, since: float) -> float:
        return max((lag for at, lag in self.samples if at >= since), default=0.0)


def serve(conn: Any, checkpoint_dir: str) -> None:
    """Child process: the policy server with an instant sampler and a lag ticker on its loop.
    Answers ("lag", since) with the largest lag since then; stops on "stop"."""
    os.environ.setdefault("TINKER_TUI_TORCH_THREADS", "1")

    async def main() -> None:
        from tinker_tui.engine.sampling_defaults import SamplingDefaults
        from tinker_tui.engine.server import PolicyServer

        session = await make_session(checkpoint_dir)
        server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults())
        await server.start()
        ticker = LagTicker()
        ticking = asyncio.create_task(ticker.run())
        conn.send((server.port, server.token))
        loop = asyncio.get_running_loop()
        while True:
            message = await loop.run_in_executor(None, conn.recv)
            if message == "stop":
                break
            conn.send(ticker.max_since(message[1]))
        ticking.cancel()
        await server.stop()

    asyncio.run(main())


class RawClient:
    """Keep-alive HTTP/1.1 POSTs with a fixed body: as little client work as possible."""

    def __init__(self, port: int, token: str, body: bytes) -> None:
        self.port = port
        self.request = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self) -> bytes:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode(errors="replace"))
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def direct_latencies(n: int, checkpoint_dir: str) -> tuple[list[float], list[float]]:
    """A direct sampling call, as the server makes it (BackendSession.sample, with its retry wrapper)
    and as a bare sampling-client call."""
    import tinker

    session = await make_session(checkpoint_dir)
    prompt = session.renderer.build_generation_prompt(MESSAGES)
    params = tinker.SamplingParams(max_tokens=64, temperature=1.0, stop=["\n\nUser:"])
    via_policy, bare = [], []
    for _ in range(n):
        t = time.perf_counter()
        await session.sample(prompt, 1, params)
        via_policy.append(time.perf_counter() - t)
        t = time.perf_counter()
        await session.sampling_client.sample(prompt=prompt, num_samples=1, sampling_params=params)
        bare.append(time.perf_counter() - t)
    return via_policy, bare


async def sequential(client_post: Any, n: int) -> list[float]:
    latencies = []
    for _ in range(n):
        t = time.perf_counter()
        await client_post()
        latencies.append(time.perf_counter() - t)
    return latencies


async def throughput(
    make_post: Any, concurrency: int, seconds: float, server_pid: int | None = None
) -> tuple[float, float | None]:
    """Requests per second, and the server's CPU seconds per request (None if unknown)."""
    posts = [make_post() for _ in range(concurrency)]
    for post in posts:  # open the connections first
        await post()
    done = 0
    stop_at = time.perf_counter() + seconds

    async def worker(post: Any) -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await post()
            done += 1

    cpu_before = process_cpu_seconds(server_pid) if server_pid else None
    started = time.perf_counter()
    await asyncio.gather(*(worker(p) for p in posts))
    elapsed = time.perf_counter() - started
    cpu_after = process_cpu_seconds(server_pid) if server_pid else None
    cpu = (
        (cpu_after - cpu_before) / done
        if cpu_before is not None and cpu_after is not None
        else None
    )
    return done / elapsed, cpu


async def measure(
    port: int, token: str, args: argparse.Namespace, checkpoint_dir: str, server_pid: int
) -> dict[str, Any]:
    import openai

    body = json.dumps({"model": "policy", "messages": MESSAGES}).encode()
    direct, bare = await direct_latencies(args.requests, checkpoint_dir)
    raw = RawClient(port, token, body)
    for _ in range(200):  # warm up: first-request costs are not what is measured
        await raw.post()
    raw_lat = await sequential(raw.post, args.requests)
    raw.close()
    clients: list[RawClient] = []

    def make_raw() -> Any:
        clients.append(RawClient(port, token, body))
        return clients[-1].post

    raw_rps, server_cpu = await throughput(make_raw, args.concurrency, args.seconds, server_pid)
    for c in clients:
        c.close()

    oa = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0)

    async def oa_post() -> Any:
        return await oa.chat.completions.create(model="policy", messages=MESSAGES)

    for _ in range(100):
        await oa_post()
    oa_lat = await sequential(oa_post, args.requests // 2)
    oa_rps, _ = await throughput(lambda: oa_post, args.concurrency, args.seconds)
    await oa.close()
    return {
        "direct_p50": statistics.median(direct),
        "direct_p99": percentile(direct, 0.99),
        "bare_p50": statistics.median(bare),
        "raw_p50": statistics.median(raw_lat),
        "raw_p99": percentile(raw_lat, 0.99),
        "raw_rps": raw_rps,
        "server_cpu": server_cpu,
        "openai_p50": statistics.median(oa_lat),
        "openai_p99": percentile(oa_lat, 0.99),
        "openai_rps": oa_rps,
    }


LARGE_PROMPT = [{"role": "user", "content": "a" * 1_000_000}]


async def refuse_large(client: Any) -> tuple[float, int]:
    """Send the 1,000,000-character prompt; (seconds to the answer, its HTTP status)."""
    import openai

    started = time.monotonic()
    try:
        await client.chat.completions.create(model="policy", messages=LARGE_PROMPT)
        status = 200
    except openai.APIStatusError as exc:
        status = exc.status_code
    return time.monotonic() - started, status


async def large_prompt_other_process(
    port: int, token: str, conn: Any, tries: int
) -> list[tuple[float, int, float]]:
    """(seconds, status, the server loop's largest stall meanwhile) per try: the client in
    this process, the server in the child."""
    import openai

    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0
    )
    await client.chat.completions.create(model="policy", messages=MESSAGES)
    results = []
    for _ in range(tries):
        since = time.monotonic()
        seconds, status = await refuse_large(client)
        await asyncio.sleep(0.02)  # let the ticker wake once after the answer
        conn.send(("lag", since))
        results.append((seconds, status, conn.recv()))
    await client.close()
    return results


async def large_prompt_same_loop(
    checkpoint_dir: str, tries: int
) -> tuple[list[tuple[float, int, float]], float]:
    """The same with server, client and ticker on one loop; also the largest stall over a
    second of small requests, for comparison."""
    from tinker_tui.engine.sampling_defaults import SamplingDefaults
    from tinker_tui.engine.server import PolicyServer

    session = await make_session(checkpoint_dir)
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults())
    await server.start()
    ticker = LagTicker()
    ticking = asyncio.create_task(ticker.run())
    client = server.client()
    try:
        since = time.monotonic()
        while time.monotonic() < since + 1.0:
            await client.chat.completions.create(model="policy", messages=MESSAGES)
        small = ticker.max_since(since)
        results = []
        for _ in range(tries):
            since = time.monotonic()
            seconds, status = await refuse_large(client)
            await asyncio.sleep(0.02)
            results.append((seconds, status, ticker.max_since(since)))
    finally:
        ticking.cancel()
        await client.close()
        await server.stop()
    return results, small


async def abandoned_requests(checkpoint_dir: str) -> dict[str, float]:
    """The real local sampler: a request on an idle server, then the same request after 10
    abandoned n=128 requests; and how many of those were cancelled before they ran."""
    import openai

    from tinker_tui.engine.backend.session import BackendSession
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient
    from tinker_tui.engine.sampling_defaults import SamplingDefaults
    from tinker_tui.engine.server import PolicyServer

    session = BackendSession(
        LocalServiceClient(checkpoint_dir=checkpoint_dir),
        base_model=DEFAULT_BASE_MODEL,
        sampler_checkpoint_every=0,
    )
    await session.start()
    futures: list[Any] = []
    real = session.sampling_client

    class Recording:
        """The real sampling client; keeps each call's future to see if it was cancelled."""

        def sample(self, **kwargs: Any) -> Any:
            future = real.sample(**kwargs)
            futures.append(future.future())
            return future

    session.sampling_client = Recording()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults())
    await server.start()
    client = server.client()
    impatient = openai.AsyncOpenAI(
        base_url=server.base_url, api_key=server.token, max_retries=0, timeout=0.2
    )

    async def timed() -> float:
        started = time.monotonic()
        await client.chat.completions.create(model="policy", messages=MESSAGES, max_tokens=16)
        return time.monotonic() - started

    async def abandon() -> None:
        with contextlib.suppress(openai.APITimeoutError):
            await impatient.chat.completions.create(
                model="policy", messages=MESSAGES, n=128, max_tokens=64
            )

    try:
        for _ in range(3):
            await timed()  # warm up
        idle = statistics.median([await timed() for _ in range(5)])
        futures.clear()
        await asyncio.gather(*(abandon() for _ in range(10)))
        after = await timed()
        abandoned = futures[:10]
        cancelled = sum(f.cancelled() for f in abandoned)
    finally:
        await impatient.close()
        await client.close()
        await server.stop()
    return {"idle": idle, "after": after, "cancelled": cancelled, "abandoned": len(abandoned)}


def report_large_prompt(
    other: list[tuple[float, int, float]], same: list[tuple[float, int, float]], small: float
) -> None:
    ms = 1000.0
    print(
        f"1,000,000-character prompt, {len(other)} tries each (goals: refused within 1 s, "
        f"no loop stall over 50 ms):"
    )
    for title, results in (
        ("client in another process", other),
        ("client on the server's loop", same),
    ):
        statuses = sorted({status for _, status, _ in results})
        print(
            f"  {title}: status {statuses}, answered in at most "
            f"{max(s for s, _, _ in results) * ms:.0f} ms, server loop's largest stall "
            f"{max(lag for _, _, lag in results) * ms:.1f} ms"
        )
    print(f"  (the same loop's largest stall over 1 s of small requests: {small * ms:.1f} ms)")


def report_abandoned(r: dict[str, float]) -> None:
    print(
        f"10 abandoned n=128 requests (client timeout 0.2 s), real local sampler: "
        f"{r['cancelled']:.0f} of {r['abandoned']:.0f} cancelled before they ran; the next "
        f"request took {r['after'] * 1000:.0f} ms (idle: {r['idle'] * 1000:.0f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--requests", type=int, default=2000, help="sequential requests for the latency figures"
    )
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="duration of each throughput run"
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--only", choices=("overhead", "large-prompt", "abandoned"))
    args = parser.parse_args()
    import tempfile

    os.environ.setdefault("TINKER_TUI_TORCH_THREADS", "1")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"cores: {os.cpu_count()}   load average {load:.1f}")
    with tempfile.TemporaryDirectory() as checkpoint_dir:
        if args.only in (None, "overhead", "large-prompt"):
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe()
            process = ctx.Process(target=serve, args=(child, checkpoint_dir), daemon=True)
            process.start()
            port, token = parent.recv()
            try:
                if args.only in (None, "overhead"):
                    report_overhead(
                        asyncio.run(measure(port, token, args, checkpoint_dir, process.pid)), args
                    )
                if args.only in (None, "large-prompt"):
                    other = asyncio.run(large_prompt_other_process(port, token, parent, 5))
            finally:
                parent.send("stop")
                process.join(timeout=10)
            if args.only in (None, "large-prompt"):
                same, small = asyncio.run(large_prompt_same_loop(checkpoint_dir, 5))
                report_large_prompt(other, same, small)
        if args.only in (None, "abandoned"):
            report_abandoned(asyncio.run(abandoned_requests(checkpoint_dir)))


def report_overhead(r: dict[str, Any], args: argparse.Namespace) -> None:
    ms = 1000.0
    print(
        f"requests: {args.requests} sequential, {args.concurrency} concurrent for "
        f"{args.seconds:g} s"
    )
    print(
        f"direct sampling call (BackendSession.sample, instant sampler): p50 {r['direct_p50'] * ms:.3f} ms"
        f"  p99 {r['direct_p99'] * ms:.3f} ms   (bare client call p50 "
        f"{r['bare_p50'] * ms:.3f} ms)"
    )
    print(
        f"through the server, minimal HTTP client:  round trip p50 {r['raw_p50'] * ms:.3f} ms"
        f"  p99 {r['raw_p99'] * ms:.3f} ms"
    )
    print(
        f"  added by the server:  p50 {(r['raw_p50'] - r['direct_p50']) * ms:.3f} ms"
        f"  p99 {(r['raw_p99'] - r['direct_p50']) * ms:.3f} ms   (goal: p50 <= 2 ms)"
    )
    print(f"  requests/s at {args.concurrency} concurrent: {r['raw_rps']:.0f}   (goal: >= 500)")
    if r["server_cpu"]:
        print(
            f"  server CPU per request: {r['server_cpu'] * 1e6:.0f} us, so one free core "
            f"serves about {1 / r['server_cpu']:.0f} requests/s"
        )
    print(
        f"through the server, openai.AsyncOpenAI:   round trip p50 {r['openai_p50'] * ms:.3f} ms"
        f"  p99 {r['openai_p99'] * ms:.3f} ms   requests/s at {args.concurrency} concurrent: "
        f"{r['openai_rps']:.0f}"
    )


if __name__ == "__main__":
    main()
