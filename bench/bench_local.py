"""The local backend against plain torch, measured in one run (ratios are what to read: the
machine is shared, absolute numbers are noisy).

    python bench/bench_local.py [--model NAME_OR_FOLDER] [--rounds 5] [--skip-example]

1. Sampling tokens/s: `LocalSamplingClient.sample` (32 samples x 32 tokens of one prompt, no
   early stop) vs a plain loop on the same weights (a plain `LlamaForCausalLM` holding the
   merged LoRA weights, a `DynamicCache`, Gumbel-max sampling, no logprobs). Goal >= 0.7x.
2. Training tokens/s: `forward_backward` (cross_entropy, 32 datums x 64 tokens, every position
   weighted) + `optim_step` vs a plain loop on the same LoRA model (forward, summed cross
   entropy, backward, AdamW). Goal >= 0.7x.
3. Concurrency: 32 concurrent `sample` calls (1 sample x 16 tokens each, unseeded) vs the same
   32 calls one after another. The batched path must be faster.
4. Snapshot memory: 150 steps of (snapshot sampler, sample, train, drop the old sampler); RSS
   and live sampling clients at step 30 and step 150 (no growth expected).
5. The example: `tinker-tui run example --no-ui` in a child process: peak RSS (goal <= 1.5 GB),
   seconds to the first step with mean reward >= 0.9, last-step reward, total time.

`--model` takes the embedded name (default) or a Hugging Face model folder (then the plain
baselines run that model's own class, on CUDA when present).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tinker  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient, lora  # noqa: E402

PROMPT = "User: Answer with one word: yes, no or maybe. Is the sky blue?\n\nAssistant:"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_time(fn, rounds: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def trained_client(service: LocalServiceClient, model: str, tokens: list[int]):
    """A rank-32 training client with a few steps behind it (so the adapter is not zero)."""
    tc = service.create_lora_training_client(model, rank=32, seed=0).result()
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )
    for _ in range(3):
        tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(tinker.AdamParams(learning_rate=1e-3)).result()
    return tc


def plain_copy(tc) -> torch.nn.Module:
    """A plain Hugging Face model (no LoRA wrappers) holding the merged adapter weights."""
    from transformers import AutoModelForCausalLM

    base = tc.base
    plain = AutoModelForCausalLM.from_config(base.module.config)
    plain.to(base.device, base.dtype)
    state = {}
    for key, value in base.module.state_dict().items():
        state[key.replace(".base.weight", ".weight").replace(".base.bias", ".bias")] = value
    merged = tc.adapter.merge(base.layers)
    for name, weight in merged.items():
        state[f"{name}.weight"] = weight
    plain.load_state_dict(state, strict=False)
    plain.eval().requires_grad_(False)
    return plain


def bench_sampling(tc, prompt_ids: list[int], rounds: int) -> dict[str, float]:
    from transformers import DynamicCache

    device = tc.base.device
    rows, length = 32, 32
    sampler = tc.save_weights_and_get_sampling_client().result()
    prompt = tinker.ModelInput.from_ints(prompt_ids)
    params = tinker.SamplingParams(max_tokens=length, temperature=1.0, stop=[])

    def local() -> None:
        sampler.sample(prompt, rows, params).result()

    plain = plain_copy(tc)
    generator = torch.Generator(device=device).manual_seed(0)

    @torch.inference_mode()
    def plain_loop() -> None:
        x = torch.tensor([prompt_ids] * rows, device=device)
        cache = DynamicCache()
        out = plain(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
        for step in range(length):
            logits = out.logits[:, -1].float()
            # Gumbel-max: a sample from softmax(logits), cheaper than torch.multinomial
            u = torch.rand(logits.shape, generator=generator, device=device)
            nxt = (logits - torch.log(-torch.log(u))).argmax(dim=-1, keepdim=True)
            if step == length - 1:
                break
            out = plain(input_ids=nxt, past_key_values=cache, use_cache=True)
        sync(device)

    tokens = rows * length
    t_local, t_plain = median_time(local, rounds), median_time(plain_loop, rounds)
    return {"local": tokens / t_local, "plain": tokens / t_plain, "ratio": t_plain / t_local}


def bench_training(tc, token_pool: list[int], rounds: int) -> dict[str, float]:
    base, adapter = tc.base, tc.adapter
    device = base.device
    rows, length = 32, 64
    seqs = [
        [token_pool[(i * 7 + j) % len(token_pool)] for j in range(length + 1)] for i in range(rows)
    ]
    data = [
        tinker.Datum(
            model_input=tinker.ModelInput.from_ints(s[:-1]),
            loss_fn_inputs={"target_tokens": s[1:], "weights": [1.0] * length},
        )
        for s in seqs
    ]
    adam = tinker.AdamParams(learning_rate=1e-5)

    def local() -> None:
        fb = tc.forward_backward(data, "cross_entropy")
        tc.optim_step(adam).result()
        fb.result()

    # The plain loop trains a copy of the same adapter on the same LoRA-wrapped model.
    plain_adapter = adapter.snapshot()
    params = []
    for name, (a, b) in plain_adapter.weights.items():
        pa, pb = torch.nn.Parameter(a), torch.nn.Parameter(b)
        plain_adapter.weights[name] = (pa, pb)
        params += [pa, pb]
    optimizer = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), eps=1e-12, weight_decay=0)
    x = torch.tensor([s[:-1] for s in seqs], device=device)
    y = torch.tensor([s[1:] for s in seqs], device=device)

    def plain_loop() -> None:
        with lora.activate(base.layers, plain_adapter):
            logits = base.module(input_ids=x).logits.float()
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        sync(device)

    # Both run on the backend's torch thread, so thread settings are the same.
    from tinker_tui.engine.local import runtime

    def on_torch_thread(fn):
        return lambda: runtime.submit(fn).result()

    tokens = rows * length
    t_local = median_time(local, rounds)
    t_plain = median_time(on_torch_thread(plain_loop), rounds)
    return {"local": tokens / t_local, "plain": tokens / t_plain, "ratio": t_plain / t_local}


async def bench_concurrency(tc, prompt_ids: list[int], rounds: int) -> dict[str, float]:
    sampler = await tc.save_weights_and_get_sampling_client()
    prompt = tinker.ModelInput.from_ints(prompt_ids)
    params = tinker.SamplingParams(max_tokens=16, temperature=1.0, stop=[])
    calls = 32

    async def concurrent() -> None:
        await asyncio.gather(*[sampler.sample(prompt, 1, params) for _ in range(calls)])

    async def serial() -> None:
        for _ in range(calls):
            await sampler.sample(prompt, 1, params)

    async def timed(fn) -> float:
        await fn()
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            await fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    t_conc, t_serial = await timed(concurrent), await timed(serial)
    return {"concurrent_s": t_conc, "serial_s": t_serial, "speedup": t_serial / t_conc}


def bench_snapshot_memory(service: LocalServiceClient, model: str, prompt_ids: list[int]):
    from tinker_tui.engine.local.sampling_client import LocalSamplingClient

    tc = service.create_lora_training_client(model, rank=32, seed=1).result()
    prompt = tinker.ModelInput.from_ints(prompt_ids)
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(prompt_ids[:-1]),
        loss_fn_inputs={"target_tokens": prompt_ids[1:], "weights": [1.0] * (len(prompt_ids) - 1)},
    )
    live: weakref.WeakSet = weakref.WeakSet()
    marks = {}
    sampler = None
    for step in range(1, 151):
        sampler = tc.save_weights_and_get_sampling_client().result()
        live.add(sampler)
        sampler.sample(prompt, 4, tinker.SamplingParams(max_tokens=4)).result()
        tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(tinker.AdamParams(learning_rate=1e-4)).result()
        if step in (30, 150):
            gc.collect()
            alive = sum(1 for s in live if isinstance(s, LocalSamplingClient))
            marks[step] = (rss_mb(), alive)
    return marks


def run_example() -> dict[str, float | None]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "tinker_tui.app.cli", "run", "example", "--no-ui", "--db", f"{tmp}/run.db"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
            env={**os.environ, "CI": "1"},
        )
        total = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    steps = [
        (int(m.group(1)), float(m.group(2)), float(m.group(3)))
        for m in re.finditer(
            r"step\s+(\d+)/\d+\s+reward\s+([\d.]+).*?elapsed\s+([\d.]+)s", proc.stdout
        )
    ]
    first = next(((s, e) for s, r, e in steps if r >= 0.9), (None, None))
    return {
        "exit_code": proc.returncode,
        "peak_rss_mb": peak_mb,
        "first_step_ge_0.9": first[0],
        "first_ge_0.9_elapsed_s": first[1],
        "last_reward": steps[-1][1] if steps else None,
        "steps": len(steps),
        "total_s": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_BASE_MODEL)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-example", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        service = LocalServiceClient(checkpoint_dir=tmp)
        tokenizer_probe = service.create_sampling_client(base_model=args.model).result()
        tokenizer = tokenizer_probe.get_tokenizer()
        prompt_ids = tokenizer.encode(PROMPT)
        pool = tokenizer.encode(PROMPT * 8)
        tc = trained_client(service, args.model, prompt_ids + tokenizer.encode(" maybe"))
        print(f"model {args.model} on {tc.base.device}, LoRA rank 32", flush=True)

        s = bench_sampling(tc, prompt_ids, args.rounds)
        print(
            f"sampling  tokens/s: local {s['local']:9.0f}  plain {s['plain']:9.0f}  "
            f"ratio {s['ratio']:.2f}x (goal >= 0.7)",
            flush=True,
        )
        t = bench_training(tc, pool, args.rounds)
        print(
            f"training  tokens/s: local {t['local']:9.0f}  plain {t['plain']:9.0f}  "
            f"ratio {t['ratio']:.2f}x (goal >= 0.7)",
            flush=True,
        )
        c = asyncio.run(bench_concurrency(tc, prompt_ids, args.rounds))
        print(
            f"32 sample calls: concurrent {c['concurrent_s']:.3f}s  serial {c['serial_s']:.3f}s  "
            f"batched speedup {c['speedup']:.1f}x",
            flush=True,
        )
        m = bench_snapshot_memory(service, args.model, prompt_ids)
        (rss30, live30), (rss150, live150) = m[30], m[150]
        print(
            f"snapshots: RSS {rss30:.0f} MB at step 30, {rss150:.0f} MB at step 150 "
            f"(growth {rss150 - rss30:+.1f} MB); live sampling clients {live30} -> {live150}",
            flush=True,
        )
    if not args.skip_example:
        e = run_example()
        print(
            f"example: exit {e['exit_code']}, peak RSS {e['peak_rss_mb']:.0f} MB (goal <= 1536), "
            f"first step >= 0.9: {e['first_step_ge_0.9']} at {e['first_ge_0.9_elapsed_s']} s, "
            f"last-step reward {e['last_reward']}, {e['steps']} steps, total {e['total_s']:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
