"""What the in-process OpenAI server costs: latency it adds over a direct sampling call, and
requests per second at 32 concurrent requests, with an instant sampler.

    python bench/bench_server.py [--requests 2000] [--seconds 5] [--concurrency 32]

The server runs as in a training run (FastAPI + uvicorn, the real `Policy` on the local
backend with its role_colon renderer and tokenizer) in a child process; only the sampling
client is replaced by one that answers at once with a fixed completion, so what is measured is
the server: HTTP, validation, rendering, parsing, JSON. The load comes from this process over
keep-alive connections with a minimal HTTP/1.1 client (so the client's own cost stays small);
the same is then measured with the official `openai.AsyncOpenAI` client, which is what
rollouts use. Goals: at most 2 ms added at p50; at least 500 requests/s on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
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
        response = tinker.SampleResponse(sequences=[
            tinker.SampledSequence(stop_reason="stop", sequence_id=f"s{i}",
                                   tokens_np=self._tokens, logprobs_np=self._logprobs)
            for i in range(num_samples)])
        future: Future[Any] = Future()
        future.set_result(response)
        return AwaitableConcurrentFuture(future)


async def make_policy(checkpoint_dir: str) -> Any:
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient
    from tinker_tui.engine.policy import Policy

    policy = Policy(LocalServiceClient(checkpoint_dir=checkpoint_dir),
                    base_model=DEFAULT_BASE_MODEL, sampler_checkpoint_every=0)
    await policy.start()
    policy.sampling_client = InstantSamplingClient(policy.tokenizer.encode(COMPLETION))
    return policy


def serve(conn: Any, checkpoint_dir: str) -> None:
    """Child process: the policy server with an instant sampler, until told to stop."""
    os.environ.setdefault("TINKER_TUI_TORCH_THREADS", "1")

    async def main() -> None:
        from tinker_tui.engine.sampling_defaults import SamplingDefaults
        from tinker_tui.engine.server import PolicyServer

        policy = await make_policy(checkpoint_dir)
        server = PolicyServer(policy, model_name="policy", defaults=SamplingDefaults())
        await server.start()
        conn.send((server.port, server.token))
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await server.stop()

    asyncio.run(main())


class RawClient:
    """Keep-alive HTTP/1.1 POSTs with a fixed body: as little client work as possible."""

    def __init__(self, port: int, token: str, body: bytes) -> None:
        self.port = port
        self.request = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body
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
    """A direct sampling call, as the server makes it (Policy.sample, with its retry wrapper)
    and as a bare sampling-client call."""
    import tinker

    policy = await make_policy(checkpoint_dir)
    prompt = policy.renderer.build_generation_prompt(MESSAGES)
    params = tinker.SamplingParams(max_tokens=64, temperature=1.0, stop=["\n\nUser:"])
    via_policy, bare = [], []
    for _ in range(n):
        t = time.perf_counter()
        await policy.sample(prompt, 1, params)
        via_policy.append(time.perf_counter() - t)
        t = time.perf_counter()
        await policy.sampling_client.sample(prompt=prompt, num_samples=1, sampling_params=params)
        bare.append(time.perf_counter() - t)
    return via_policy, bare


async def sequential(client_post: Any, n: int) -> list[float]:
    latencies = []
    for _ in range(n):
        t = time.perf_counter()
        await client_post()
        latencies.append(time.perf_counter() - t)
    return latencies


async def throughput(make_post: Any, concurrency: int, seconds: float,
                     server_pid: int | None = None) -> tuple[float, float | None]:
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
    cpu = (cpu_after - cpu_before) / done if cpu_before is not None and cpu_after is not None \
        else None
    return done / elapsed, cpu


async def measure(port: int, token: str, args: argparse.Namespace,
                  checkpoint_dir: str, server_pid: int) -> dict[str, Any]:
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

    raw_rps, server_cpu = await throughput(make_raw, args.concurrency, args.seconds,
                                           server_pid)
    for c in clients:
        c.close()

    oa = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token,
                            max_retries=0)

    async def oa_post() -> Any:
        return await oa.chat.completions.create(model="policy", messages=MESSAGES)

    for _ in range(100):
        await oa_post()
    oa_lat = await sequential(oa_post, args.requests // 2)
    oa_rps, _ = await throughput(lambda: oa_post, args.concurrency, args.seconds)
    await oa.close()
    return {
        "direct_p50": statistics.median(direct), "direct_p99": percentile(direct, 0.99),
        "bare_p50": statistics.median(bare),
        "raw_p50": statistics.median(raw_lat), "raw_p99": percentile(raw_lat, 0.99),
        "raw_rps": raw_rps, "server_cpu": server_cpu,
        "openai_p50": statistics.median(oa_lat), "openai_p99": percentile(oa_lat, 0.99),
        "openai_rps": oa_rps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000,
                        help="sequential requests for the latency figures")
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="duration of each throughput run")
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    import tempfile

    os.environ.setdefault("TINKER_TUI_TORCH_THREADS", "1")
    with tempfile.TemporaryDirectory() as checkpoint_dir:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(target=serve, args=(child, checkpoint_dir), daemon=True)
        process.start()
        port, token = parent.recv()
        try:
            r = asyncio.run(measure(port, token, args, checkpoint_dir, process.pid))
        finally:
            parent.send("stop")
            process.join(timeout=10)
    ms = 1000.0
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"cores: {os.cpu_count()}   load average {load:.1f}   requests: {args.requests} sequential, "
          f"{args.concurrency} concurrent for {args.seconds:g} s")
    print(f"direct sampling call (Policy.sample, instant sampler): p50 {r['direct_p50'] * ms:.3f} ms"
          f"  p99 {r['direct_p99'] * ms:.3f} ms   (bare client call p50 "
          f"{r['bare_p50'] * ms:.3f} ms)")
    print(f"through the server, minimal HTTP client:  round trip p50 {r['raw_p50'] * ms:.3f} ms"
          f"  p99 {r['raw_p99'] * ms:.3f} ms")
    print(f"  added by the server:  p50 {(r['raw_p50'] - r['direct_p50']) * ms:.3f} ms"
          f"  p99 {(r['raw_p99'] - r['direct_p50']) * ms:.3f} ms   (goal: p50 <= 2 ms)")
    print(f"  requests/s at {args.concurrency} concurrent: {r['raw_rps']:.0f}   (goal: >= 500)")
    if r["server_cpu"]:
        print(f"  server CPU per request: {r['server_cpu'] * 1e6:.0f} us, so one free core "
              f"serves about {1 / r['server_cpu']:.0f} requests/s")
    print(f"through the server, openai.AsyncOpenAI:   round trip p50 {r['openai_p50'] * ms:.3f} ms"
          f"  p99 {r['openai_p99'] * ms:.3f} ms   requests/s at {args.concurrency} concurrent: "
          f"{r['openai_rps']:.0f}")


if __name__ == "__main__":
    main()
