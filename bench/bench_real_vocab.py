"""A real vocabulary at a laptop's cost: the local backend's forward_backward on the real-format
fixture (a tiny random Qwen3 over the full 151,936-token vocabulary, tests/real_format.py)
against a plain torch loop computing the same loss in chunks, and each one's peak memory.

    python bench/bench_real_vocab.py [--rounds 3] [--answer-tokens 160] [--plain-chunk 128]

The batch is RL-shaped: 4 groups x 8 answers of `--answer-tokens` tokens (random ids; a
random model rarely ends early) after each group's chat prompt (rendered by the fixture's
chat template), loss importance_sampling, advantages nonzero on the answer tokens only. A
*trained token* is an answer token. LoRA rank 32 on attention, MLP and the unembedding (the
SDK's defaults, what tinker-tui trains).

1. Trained tokens/s of `forward_backward` (goal >= 500) against a plain torch loop on the same
   batch and adapter (goal >= 1.0x): a fresh transformers copy of the model with textbook LoRA
   modules, the backbone run once, then the loss over the answer positions in chunks of
   `--plain-chunk` rows, each chunk's logits recomputed in the backward
   (`torch.utils.checkpoint`) so no [tokens x vocab] tensor is held. The two alternate round
   by round on the backend's torch thread (ratios are what to read on a shared machine).
2. Peak RSS (VmHWM) of a fresh process per case that loads the model and runs 3
   forward_backward calls: the local backend (goal <= 1 GB), the plain chunked loop, and
   the same process that only loads the model (what the rest costs).

The load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

GROUPS, ANSWERS, RANK = 4, 8, 32
QUESTIONS = [
    "What is the capital of France? Answer in one word.",
    "Add 17 and 25, then explain the steps you took.",
    "Name three colours of the rainbow.",
    "Write a haiku about the sea at night.",
]


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def batch(tokenizer, answer_tokens: int):
    """(datums, per datum: token ids, prompt length) of the RL-shaped batch (seeded), with
    the backend's own tokenizer (a second copy would cost a few hundred MB)."""
    import numpy as np
    import tinker

    rng = np.random.default_rng(0)
    data, shapes = [], []
    for question in QUESTIONS[:GROUPS]:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
        )
        prompt = tokenizer.encode(text, add_special_tokens=False)
        for _ in range(ANSWERS):
            answer = rng.integers(0, 151643, answer_tokens).tolist()
            tokens = prompt + answer
            n = len(tokens) - 1
            trained = [0.0] * (len(prompt) - 1) + [1.0] * answer_tokens
            data.append(
                tinker.Datum(
                    model_input=tinker.ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={
                        "target_tokens": tokens[1:],
                        "logprobs": (-12.0 - rng.random(n)).tolist(),
                        "advantages": [w * float(rng.normal()) for w in trained],
                    },
                )
            )
            shapes.append((tokens, len(prompt)))
    return data, shapes


def training_client(folder: str):
    from tinker_tui.engine.local import LocalServiceClient

    service = LocalServiceClient(checkpoint_dir=tempfile.mkdtemp(prefix="bench-real-vocab-"))
    return service.create_lora_training_client(folder, rank=RANK, seed=0).result()


def plain_loop(tc, shapes, chunk: int):
    """One step of the plain torch loop (see the module docstring), as a function."""
    import numpy as np
    import torch
    from bench_local import fresh_module, with_textbook_lora
    from torch.utils.checkpoint import checkpoint

    base = tc.base
    module = fresh_module(base)
    with torch.no_grad():  # a trained-looking adapter: B = 0 would skip nothing, but be fair
        for _, b in tc.adapter.weights.values():
            b.normal_(0, 1e-3)
    params = with_textbook_lora(module, tc.adapter)
    width = max(len(t) - 1 for t, _ in shapes)
    ids = torch.full((len(shapes), width), base.pad_token_id, dtype=torch.long)
    rows, targets = [], []
    rng = np.random.default_rng(1)
    for i, (tokens, prompt) in enumerate(shapes):
        ids[i, : len(tokens) - 1] = torch.tensor(tokens[:-1])
        for j in range(prompt - 1, len(tokens) - 1):  # the answer positions
            rows.append(i * width + j)
            targets.append(tokens[j + 1])
    rows_t, targets_t = torch.tensor(rows), torch.tensor(targets)
    sampling = torch.tensor(-12.0 - rng.random(len(rows)), dtype=torch.float32)
    advantages = torch.tensor(rng.normal(size=len(rows)), dtype=torch.float32)
    head = module.get_output_embeddings()

    def chunk_loss(h, target, old, adv):
        logits = head(h).float()
        lp = torch.log_softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(1)
        return -(torch.exp(lp - old) * adv).sum()

    def step() -> None:
        hidden = module.model(input_ids=ids).last_hidden_state.reshape(
            -1, base.module.config.hidden_size
        )
        picked = hidden.index_select(0, rows_t)
        loss = torch.zeros(())
        for lo in range(0, len(rows), chunk):
            sl = slice(lo, lo + chunk)
            loss = loss + checkpoint(
                chunk_loss,
                picked[sl],
                targets_t[sl],
                sampling[sl],
                advantages[sl],
                use_reentrant=False,
            )
        for p in params:
            p.grad = None
        loss.backward()

    return step


def run_case(case: str, folder: str, answer_tokens: int, chunk: int) -> None:
    """A child process: load, run 3 steps of `case`, print the peak RSS in MB."""
    from tinker_tui.engine.local import runtime

    tc = training_client(folder)
    data, shapes = batch(tc.get_tokenizer(), answer_tokens)
    if case == "local":
        for _ in range(3):
            tc.forward_backward(data, "importance_sampling").result()
    elif case == "plain":
        step = plain_loop(tc, shapes, chunk)
        for _ in range(3):
            runtime.submit(step).result()
    print(f"{peak_rss_mb():.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--answer-tokens", type=int, default=160)
    parser.add_argument(
        "--plain-chunk", type=int, default=128, help="rows per chunk of the plain loop's loss"
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)  # child process: one case's RSS
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.case:
        run_case(args.case, args.folder, args.answer_tokens, args.plain_chunk)
        return

    import torch
    from real_format import write_tiny_qwen3

    from tinker_tui.engine.local import runtime

    torch.set_num_threads(1)
    print(f"bench_real_vocab ({load()}, {os.cpu_count()} cpus)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = str(write_tiny_qwen3(Path(tmp) / "qwen3"))
        tc = training_client(folder)
        data, shapes = batch(tc.get_tokenizer(), args.answer_tokens)
        trained = GROUPS * ANSWERS * args.answer_tokens
        positions = sum(len(t) - 1 for t, _ in shapes)
        print(
            f"fixture Qwen3 (vocab {tc.base.vocab_size}), LoRA rank {RANK}: {GROUPS} groups x "
            f"{ANSWERS} answers of {args.answer_tokens} tokens, {trained} trained tokens of "
            f"{positions} positions",
            flush=True,
        )
        plain = plain_loop(tc, shapes, args.plain_chunk)

        def local() -> None:
            tc.forward_backward(data, "importance_sampling").result()

        def on_thread() -> None:
            runtime.submit(plain).result()

        local(), on_thread()  # warm-up
        times: dict[str, list[float]] = {"local": [], "plain": []}
        cpu: dict[str, list[float]] = {"local": [], "plain": []}
        for _ in range(args.rounds):
            for name, fn in (("local", local), ("plain", on_thread)):
                start, start_cpu = time.perf_counter(), time.process_time()
                fn()
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
        t_local = statistics.median(times["local"])
        t_plain = statistics.median(times["plain"])
        print(
            f"forward_backward trained tokens/s: local {trained / t_local:7.0f} (goal >= 500)"
            f"  plain chunked loop ({args.plain_chunk} rows a chunk) {trained / t_plain:7.0f}"
            f"  ratio {t_plain / t_local:.2f}x (goal >= 1.0)  [{load()}]",
            flush=True,
        )
        # The work runs on one thread while the caller waits: the process's CPU time is that
        # thread's, which a loaded machine inflates far less than the wall clock.
        c_local, c_plain = statistics.median(cpu["local"]), statistics.median(cpu["plain"])
        print(
            f"  per CPU second: local {trained / c_local:7.0f}  plain {trained / c_plain:7.0f}"
            f"  ratio {c_plain / c_local:.2f}x",
            flush=True,
        )

        peaks = {}
        for case in ("load", "local", "plain"):
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--case",
                    case,
                    "--folder",
                    folder,
                    "--answer-tokens",
                    str(args.answer_tokens),
                    "--plain-chunk",
                    str(args.plain_chunk),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            peaks[case] = float(done.stdout.split()[-1])
        print(
            f"peak RSS (VmHWM, a process per case, 3 steps): local {peaks['local']:.0f} MB "
            f"(goal <= 1024)  plain chunked loop {peaks['plain']:.0f} MB  model loaded, "
            f"no step {peaks['load']:.0f} MB  [{load()}]",
            flush=True,
        )


if __name__ == "__main__":
    main()
