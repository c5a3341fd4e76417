"""Forced tool calls against free text: tokens/s of the same request through the policy
server on the local backend, on the embedded model and on the real-format Qwen3 fixture (a
tiny random Qwen3 over the full 151,936-token vocabulary, tests/real_format.py).

    python bench/bench_tool_calls.py [--rounds 3] [--n 8] [--max-tokens 40] [--models both]

One request, the official `openai` client: a user question, two tools (add and mul, two
integer arguments each), n samples of at most max-tokens tokens, seeded. Three modes:
free (tool_choice "none": plain text), named (tool_choice add) and required (the model picks
add or mul). A forced call is held to the call's grammar (engine.local.token_masks) and to
the scanner (engine.server.tool_call_constraint); free text is not. Tokens/s is sampled
tokens over the request's wall time; the modes alternate round by round and the median of
the rounds is reported, with each forced mode's ratio to free measured in the same run
(goal on the Qwen3 fixture: >= 0.5x). The first forced call of each model, which builds the
tokenizer's grammar view once, is timed apart. The load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

QUESTION = [{"role": "user", "content": "What is 2 plus 3?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
    for name in ("add", "mul")
]
MODES = {
    "free": "none",
    "named": {"type": "function", "function": {"name": "add"}},
    "required": "required",
}


def load() -> str:
    return "/proc/loadavg " + Path("/proc/loadavg").read_text().strip()


async def one(client, mode: str, n: int, max_tokens: int, seed: int) -> tuple[int, float, int]:
    """(sampled tokens, seconds, choices that are calls) of one request."""
    start = time.perf_counter()
    completion = await client.chat.completions.create(
        model="policy",
        messages=QUESTION,
        tools=TOOLS,
        tool_choice=MODES[mode],
        n=n,
        max_tokens=max_tokens,
        seed=seed,
    )
    seconds = time.perf_counter() - start
    tokens = sum(len(c.model_extra["token_ids"]) for c in completion.choices)
    calls = sum(1 for c in completion.choices if c.message.tool_calls)
    return tokens, seconds, calls


async def bench_model(label: str, base_model: str, rounds: int, n: int, max_tokens: int) -> None:
    from tinker_tui.engine.backend.session import BackendSession
    from tinker_tui.engine.local import LocalServiceClient
    from tinker_tui.engine.sampling_defaults import SamplingDefaults
    from tinker_tui.engine.server import PolicyServer

    service = LocalServiceClient(checkpoint_dir=tempfile.mkdtemp(prefix="bench-tool-calls-"))
    session = BackendSession(service, base_model=base_model)
    await session.start()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults(max_tokens=8))
    await server.start()
    client = server.client()
    try:
        await one(client, "free", n, max_tokens, 0)  # warm: prefill paths, caches
        _, first, _ = await one(client, "named", n, max_tokens, 0)  # builds the view once
        await one(client, "required", n, max_tokens, 0)
        rates: dict[str, list[float]] = {mode: [] for mode in MODES}
        calls: dict[str, int] = dict.fromkeys(MODES, 0)
        for r in range(rounds):
            for mode in MODES:
                tokens, seconds, made = await one(client, mode, n, max_tokens, 1 + r)
                rates[mode].append(tokens / seconds)
                calls[mode] += made
        free = statistics.median(rates["free"])
        print(f"{label}: first forced request (builds the grammar view) {first:.2f} s")
        for mode in MODES:
            rate = statistics.median(rates[mode])
            share = f"calls {calls[mode]}/{rounds * n}" if mode != "free" else ""
            print(f"  {mode:<9} {rate:8.1f} tok/s  {rate / free:5.2f}x free  {share}")
    finally:
        await server.stop()
        await session.close("success")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--models", choices=("both", "embedded", "qwen3"), default="both")
    args = parser.parse_args()
    print(f"n={args.n} max_tokens={args.max_tokens} rounds={args.rounds} cpus={os.cpu_count()}")
    print(f"before: {load()}")
    if args.models in ("both", "embedded"):
        from tinker_tui.engine.config import DEFAULT_BASE_MODEL

        await bench_model("embedded", DEFAULT_BASE_MODEL, args.rounds, args.n, args.max_tokens)
    if args.models in ("both", "qwen3"):
        from real_format import write_tiny_qwen3

        folder = write_tiny_qwen3(Path(tempfile.mkdtemp(prefix="bench-qwen3-")))
        await bench_model("qwen3 fixture", str(folder), args.rounds, args.n, args.max_tokens)
    print(f"after: {load()}")


if __name__ == "__main__":
    asyncio.run(main())
