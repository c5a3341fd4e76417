"""The local backend against plain torch, and the example against a baseline tree, in one run
(ratios are what to read: the machine is shared, absolute numbers are noisy; candidate and
baseline alternate round by round, and the load average is printed with the figures).

    python bench/bench_local.py [--model NAME_OR_FOLDER] [--rounds 5]
                                [--example-seeds 0,1,2] [--baseline REF] [--skip-example]

1. Sampling tokens/s: `LocalSamplingClient.sample` (32 samples x 32 tokens of one prompt, no
   early stop) vs a plain decoding loop on the same weights (a fresh copy of the model holding
   the merged LoRA weights, its KV cache, Gumbel-max sampling, no logprobs).
2. Training tokens/s: `forward_backward` (cross_entropy, 32 datums x 64 tokens, every position
   weighted; random tokens, all distinct, so nothing is shared) + `optim_step` vs a plain
   torch loop with the same model and LoRA: a fresh copy
   of the model whose adapted linears are wrapped in textbook LoRA modules
   (``base(x) + scale * B(A(x))``, same rank, alpha, layers and starting weights), summed
   cross entropy, backward, `torch.optim.AdamW`. Goal >= 1.0x. Also printed: the same plain
   loop run through the backend's own LoRA layers (what the backend adds on top of them), and
   both again on an RL-shaped batch (groups of 8 sharing a 40-token prompt), which the
   backend packs by shared prefixes.
3. Concurrency: 32 concurrent `sample` calls (1 sample x 16 tokens each, unseeded) vs the same
   32 calls one after another. The batched path must be faster.
4. Snapshot memory: 150 steps of (snapshot sampler, sample, train, drop the old sampler); RSS
   and live sampling clients at step 30 and step 150 (no growth expected).
5. The example: `tinker-tui run example --no-ui --seed S` in a child process, per seed:
   seconds from launching the command to the first step with mean reward >= 0.9 (goal <= 10 s
   on two idle cores), to step 1, and to the end; its peak RSS (goal <= 400 MB); the reward
   curve. Each seed runs cold (a fresh store) and then warm (again in the same store, where
   the format warm-up's saved result is reused). With `--baseline REF` (a git commit, e.g.
   `main`) the same runs of that tree's code alternate with this tree's, and the ratios
   (cold) are printed.

6. `--curves example,binary_prefix_tool,next_number` instead: each example's learning curve
   per seed, timed from launching the command (the README's tables): first step, when the
   k-step mean reward passes the example's bar, k-step means at given seconds, the end, and
   the evaluations.

`--model` takes the embedded name (default) or a Hugging Face model folder (then the plain
baselines load that folder with transformers, on CUDA when present).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tinker  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient, lora  # noqa: E402

PROMPT = "User: Answer with one word: yes, no or maybe. Is the sky blue?\n\nAssistant:"
STEP_RE = re.compile(r"step\s+(\d+)/\d+\s+reward\s+([\d.]+|nan)")


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def alternate(a, b, rounds: int) -> tuple[float, float]:
    """Median seconds of `a` and of `b`, run in turns (a, b, a, b, ...) after one warm-up
    call each, so a change in the machine's load hits both alike."""
    a(), b()
    ta, tb = [], []
    for _ in range(rounds):
        for fn, times in ((a, ta), (b, tb)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(ta), statistics.median(tb)


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


# -- plain torch baselines ----------------------------------------------------------------------
def fresh_module(base) -> torch.nn.Module:
    """A new copy of the base model with plain `nn.Linear` layers (no backend wrappers)."""
    if base.embedded:
        try:
            from tinker_tui.engine.local.model import build_runtime_module as build
        except ImportError:  # a baseline tree that runs the transformers model
            from tinker_tui.engine.local.model import build_tiny_module as build
        module = build(base.name)
    else:
        from transformers import AutoModelForCausalLM

        module = AutoModelForCausalLM.from_pretrained(
            base.name, local_files_only=True, dtype=base.dtype
        )
    return module.to(base.device).eval().requires_grad_(False)


class TextbookLoRA(torch.nn.Module):
    """``base(x) + scale * B(A(x))`` with A and B as parameters: LoRA as usually written."""

    def __init__(self, base: torch.nn.Linear, a: torch.Tensor, b: torch.Tensor, scale: float):
        super().__init__()
        self.base = base
        self.lora_A = torch.nn.Parameter(a.detach().clone())
        self.lora_B = torch.nn.Parameter(b.detach().clone())
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scale


def with_textbook_lora(module: torch.nn.Module, adapter: lora.Adapter) -> list[torch.Tensor]:
    """Wrap the adapted linears of `module` (same names as the backend's) in `TextbookLoRA`
    holding a copy of `adapter`; returns the trainable parameters."""
    params: list[torch.Tensor] = []
    for name, (a, b) in adapter.weights.items():
        parent_name, _, child = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        wrapped = TextbookLoRA(getattr(parent, child), a, b, adapter.scale)
        setattr(parent, child, wrapped)
        params += [wrapped.lora_A, wrapped.lora_B]
    return params


def bench_sampling(tc, prompt_ids: list[int], rounds: int) -> dict[str, float]:
    device = tc.base.device
    rows, length = 32, 32
    sampler = tc.save_weights_and_get_sampling_client().result()
    prompt = tinker.ModelInput.from_ints(prompt_ids)
    params = tinker.SamplingParams(max_tokens=length, temperature=1.0, stop=[])

    def local() -> None:
        sampler.sample(prompt, rows, params).result()

    plain = fresh_module(tc.base)
    merged = tc.adapter.merge(tc.base.layers)
    plain.load_state_dict({f"{n}.weight": w for n, w in merged.items()}, strict=False)
    generator = torch.Generator(device=device).manual_seed(0)
    try:
        from tinker_tui.engine.local.generation import new_cache
    except ImportError:  # a baseline tree without it

        def new_cache(model):
            from transformers import DynamicCache

            return DynamicCache()

    @torch.inference_mode()
    def plain_loop() -> None:
        x = torch.tensor([prompt_ids] * rows, device=device)
        cache = new_cache(plain)
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

    from tinker_tui.engine.local import runtime

    t_local, t_plain = alternate(local, lambda: runtime.submit(plain_loop).result(), rounds)
    tokens = rows * length
    return {"local": tokens / t_local, "plain": tokens / t_plain, "ratio": t_plain / t_local}


def training_sequences(
    vocab: int, shared: bool, rows: int = 32, length: int = 64
) -> list[list[int]]:
    """`rows` random token sequences of `length` + 1 (seeded): all distinct from the first
    token, or in groups of 8 that share their first 40 tokens (an RL batch's shape: samples
    of one prompt)."""
    import random

    rng = random.Random(0)
    draw = lambda n: [rng.randrange(3, vocab) for _ in range(n)]  # noqa: E731
    if not shared:
        return [draw(length + 1) for _ in range(rows)]
    seqs = []
    for _ in range(rows // 8):
        prompt = draw(40)
        seqs += [prompt + draw(length + 1 - 40) for _ in range(8)]
    return seqs


def bench_training(tc, seqs: list[list[int]], rounds: int) -> dict[str, float]:
    base, adapter = tc.base, tc.adapter
    device = base.device
    rows, length = len(seqs), len(seqs[0]) - 1
    data = [
        tinker.Datum(
            model_input=tinker.ModelInput.from_ints(s[:-1]),
            loss_fn_inputs={"target_tokens": s[1:], "weights": [1.0] * length},
        )
        for s in seqs
    ]
    adam = tinker.AdamParams(learning_rate=1e-5)
    x = torch.tensor([s[:-1] for s in seqs], device=device)
    y = torch.tensor([s[1:] for s in seqs], device=device)

    def local() -> None:
        fb = tc.forward_backward(data, "cross_entropy")
        tc.optim_step(adam).result()
        fb.result()

    def plain_step(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        logits = module(input_ids=x).logits.float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        sync(device)

    adamw = {"lr": 1e-5, "betas": (0.9, 0.95), "eps": 1e-12, "weight_decay": 0.0}
    # 1. textbook LoRA on a fresh copy of the model
    plain = fresh_module(base)
    plain_params = with_textbook_lora(plain, adapter)
    plain_optimizer = torch.optim.AdamW(plain_params, **adamw)

    def textbook() -> None:
        plain_step(plain, plain_optimizer)

    # 2. the same loop through the backend's own LoRA layers (a copy of the adapter)
    own_adapter = adapter.snapshot()
    own_params = []
    for name, (a, b) in own_adapter.weights.items():
        pa, pb = torch.nn.Parameter(a), torch.nn.Parameter(b)
        own_adapter.weights[name] = (pa, pb)
        own_params += [pa, pb]
    own_optimizer = torch.optim.AdamW(own_params, **adamw)

    def own_layers() -> None:
        with lora.activate(base.layers, own_adapter):
            plain_step(base.module, own_optimizer)

    # All three run on the backend's torch thread, so thread settings are the same.
    from tinker_tui.engine.local import runtime

    def on_torch_thread(fn):
        return lambda: runtime.submit(fn).result()

    t_local, t_plain = alternate(local, on_torch_thread(textbook), rounds)
    t_local2, t_own = alternate(local, on_torch_thread(own_layers), rounds)
    tokens = rows * length
    return {
        "local": tokens / t_local,
        "plain": tokens / t_plain,
        "ratio": t_plain / t_local,
        "local2": tokens / t_local2,
        "own": tokens / t_own,
        "own_ratio": t_own / t_local2,
    }


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

    await concurrent()
    await serial()
    tc_, ts = [], []
    for _ in range(rounds):
        for fn, times in ((concurrent, tc_), (serial, ts)):
            start = time.perf_counter()
            await fn()
            times.append(time.perf_counter() - start)
    t_conc, t_serial = statistics.median(tc_), statistics.median(ts)
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


# -- the example, from the command line -----------------------------------------------------------
def baseline_tree(ref: str, into: Path) -> Path:
    """The code of commit `ref`, importable as `tinker_tui` from the returned folder (put it
    first on PYTHONPATH: it takes precedence over this tree's editable install)."""
    tree = into / "tree"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    shim = into / "shim" / "tinker_tui"
    shim.mkdir(parents=True)
    (shim / "__init__.py").symlink_to(tree / "tinker_tui" / "__init__.py")
    for folder in ("app", "engine", "examples"):
        (shim / folder).symlink_to(tree / folder)
    return shim.parent


class PeakRSS:
    """The peak resident memory of a child process (VmHWM), read while it runs.

    Not getrusage/wait4: Linux carries the parent's peak over a fork and exec into the
    child's ``ru_maxrss``, so a child of this (large) process would report at least this
    process's size. VmHWM belongs to the child's own address space."""

    def __init__(self, pid: int) -> None:
        import threading

        self.path = f"/proc/{pid}/status"
        self.peak_kb = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            with open(self.path) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        self.peak_kb = max(self.peak_kb, int(line.split()[1]))
        except (OSError, ValueError):
            pass

    def _poll(self) -> None:
        while not self._done.wait(0.1):
            self._read()

    def stop(self) -> float:
        """Call before reaping the child (its /proc entry goes then); returns MB."""
        self._read()
        self._done.set()
        self._thread.join()
        return self.peak_kb / 1024


def run_example(seed: int, pythonpath: Path | None = None, store: Path | None = None) -> dict:
    """`tinker-tui run example --no-ui --seed S` in a child: times since launch per step. In
    a fresh store (cold), or in `store` (where an identical warm-up may already be saved)."""
    # This checkout's code (or the baseline tree's), not whatever the environment installed:
    # the child starts in another folder.
    env = {**os.environ, "CI": "1", "PYTHONPATH": str(pythonpath or ROOT)}
    with tempfile.TemporaryDirectory() as fresh:
        tmp = str(store) if store is not None else fresh
        start = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tinker_tui.app.cli",
                "run",
                "example",
                "--no-ui",
                "--seed",
                str(seed),
                "--db",
                f"{tmp}/run.db",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp,
            env=env,
        )
        assert proc.stdout is not None
        peak = PeakRSS(proc.pid)
        steps: list[tuple[int, float, float]] = []
        for line in proc.stdout:
            m = STEP_RE.search(line)
            if m:
                steps.append((int(m.group(1)), float(m.group(2)), time.perf_counter() - start))
        peak_mb = peak.stop()
        status = proc.wait()
        total = time.perf_counter() - start
        err = proc.stderr.read() if proc.stderr else ""
    first = next(((s, t) for s, r, t in steps if r >= 0.9), (None, None))
    return {
        "exit_code": status,
        "stderr": err[-500:],
        "peak_rss_mb": peak_mb,
        "first_ge_0.9_step": first[0],
        "first_ge_0.9_s": first[1],
        "step1_s": steps[0][2] if steps else None,
        "rewards": [r for _, r, _ in steps],
        "steps": len(steps),
        "total_s": total,
    }


def describe(tag: str, seed: int, e: dict) -> str:
    curve = " ".join(f"{r:.2f}" for r in e["rewards"][:12])
    first = (
        "never"
        if e["first_ge_0.9_s"] is None
        else f"step {e['first_ge_0.9_step']} at {e['first_ge_0.9_s']:.1f} s"
    )
    step1 = "-" if e["step1_s"] is None else f"{e['step1_s']:.1f} s"
    return (
        f"  {tag:9} seed {seed}: exit {e['exit_code']}, reward >= 0.9: {first}, "
        f"step 1 at {step1}, {e['steps']} steps in {e['total_s']:.1f} s, "
        f"peak RSS {e['peak_rss_mb']:.0f} MB; rewards {curve} ..."
    )


def bench_example(seeds: list[int], baseline: str | None) -> None:
    """Per seed: the baseline (if any), this tree cold (a fresh store), and this tree again
    in the same store ("warm": it may reuse the saved warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        trees: list[tuple[str, Path | None]] = [("candidate", None)]
        if baseline:
            trees.insert(0, (f"{baseline}", baseline_tree(baseline, Path(tmp))))
        results: dict[str, list[dict]] = {tag: [] for tag, _ in trees}
        results["warm"] = []
        print(f"example ({load()}):", flush=True)
        for seed in seeds:
            store = Path(tmp) / f"store-{seed}"
            store.mkdir()
            runs = [(tag, path, store if tag == "candidate" else None) for tag, path in trees]
            for tag, path, where in [*runs, ("warm", None, store)]:
                e = run_example(seed, path, where)
                results[tag].append(e)
                print(describe(tag, seed, e) + f"  [{load()}]", flush=True)
                if e["exit_code"] != 0:
                    print("    stderr: " + e["stderr"].replace("\n", "\n    "), flush=True)

    def med(tag: str, key: str) -> float | None:
        values = [e[key] for e in results[tag] if e[key] is not None]
        return statistics.median(values) if values else None

    for tag in [t for t, _ in trees] + ["warm"]:
        first, peak = med(tag, "first_ge_0.9_s"), med(tag, "peak_rss_mb")
        print(
            f"example {tag}: median first step >= 0.9 at "
            f"{'never' if first is None else f'{first:.1f} s'} from the command (goal <= 10), "
            f"step 1 at {med(tag, 'step1_s'):.1f} s, total {med(tag, 'total_s'):.1f} s, "
            f"peak RSS {peak:.0f} MB (goal <= 400)",
            flush=True,
        )
    if baseline:
        a, b = "candidate", trees[0][0]
        for key, what in (
            ("first_ge_0.9_s", "time to reward >= 0.9"),
            ("step1_s", "time to step 1"),
            ("peak_rss_mb", "peak RSS"),
        ):
            x, y = med(a, key), med(b, key)
            if x and y:
                print(f"example {what}: candidate / {b} = {x / y:.2f}", flush=True)


# -- learning curves of the examples (the README's tables) -----------------------------------------
#: Per example: (k, bar) -- the first step whose k-step mean reward passes the bar (a number, or
#: a function of the first step's reward) -- and the times (s) at which k-step means are shown.
CURVES = {
    "example": (3, 0.9, ()),
    "binary_prefix_tool": (5, lambda first: 1.5 * first, (60, 120, 180, 300)),
    "next_number": (10, None, (30,)),
}


def run_curve(name: str, seed: int) -> dict:
    """`tinker-tui run NAME --no-ui --seed S` to the end; its metrics file, timed from the
    launch of the command."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        launched = time.time()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tinker_tui.app.cli",
                "run",
                name,
                "--no-ui",
                "--seed",
                str(seed),
                "--db",
                f"{tmp}/run.db",
            ],
            capture_output=True,
            text=True,
            cwd=tmp,
            env={**os.environ, "CI": "1", "PYTHONPATH": str(ROOT)},
        )
        total = time.time() - launched
        events = [
            json.loads(line)
            for path in Path(tmp).glob("*.metrics.jsonl")
            for line in path.read_text().splitlines()
        ]
    steps = [
        (e["step"], e["time"] - launched, e["reward/mean"])
        for e in events
        if e["event"] == "step" and e.get("reward/mean") is not None
    ]
    evals = [(e["step"], e["eval/reward_mean"]) for e in events if e["event"] == "eval"]
    return {
        "exit_code": proc.returncode,
        "steps": steps,
        "evals": evals,
        "total_s": total,
        "stderr": proc.stderr[-500:],
    }


def describe_curve(name: str, seed: int, c: dict) -> str:
    k, bar, times = CURVES.get(name, (1, 1.0, ()))  # a task file: when a step scores 1
    steps = c["steps"]
    if not steps:
        return f"  {name} seed {seed}: exit {c['exit_code']}, no steps; {c['stderr']}"
    rewards = [r for _, _, r in steps]
    parts = [f"first step {rewards[0]:.2f} at {steps[0][1]:.0f} s"]
    if bar is not None:
        threshold = bar(rewards[0]) if callable(bar) else bar
        hit = next(
            (
                i
                for i in range(len(rewards))
                if i + 1 >= k and sum(rewards[i + 1 - k : i + 1]) / k >= threshold
            ),
            None,
        )
        parts.append(
            f"{k}-step mean >= {threshold:.2f}: "
            + ("never" if hit is None else f"{steps[hit][1]:.0f} s (step {steps[hit][0]})")
        )
    for t in times:
        window = [r for _, s_, r in steps if s_ <= t][-k:]
        value = (
            "(done)"
            if c["total_s"] < t
            else "(no step yet)"
            if not window
            else f"{sum(window) / len(window):.2f}"
        )
        parts.append(f"{k}-step mean at {t} s: {value}")
    parts.append(f"end {rewards[-1]:.2f} at {steps[-1][1]:.0f} s (step {steps[-1][0]})")
    parts.append("evals " + ", ".join(f"{s_}: {v:.2f}" for s_, v in c["evals"]))
    return f"  {name} seed {seed}: " + "; ".join(parts)


def bench_curves(names: list[str], seeds: list[int]) -> None:
    for name in names:
        print(f"{name} ({load()}):", flush=True)
        for seed in seeds:
            print(describe_curve(name, seed, run_curve(name, seed)) + f"  [{load()}]", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=DEFAULT_BASE_MODEL)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--example-seeds", default="0,1,2", help="seeds of the example runs (comma-separated)"
    )
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also run the example with the code of this git commit, alternating",
    )
    parser.add_argument("--skip-example", action="store_true")
    parser.add_argument("--only-example", action="store_true")
    parser.add_argument(
        "--curves",
        metavar="NAMES",
        help="only: the learning curves of these examples (comma-separated, "
        "e.g. example,binary_prefix_tool,next_number), per seed",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"bench_local ({load()}, {os.cpu_count()} cpus)", flush=True)
    seeds = [int(s) for s in args.example_seeds.split(",") if s.strip()]
    if args.curves:
        bench_curves([n.strip() for n in args.curves.split(",") if n.strip()], seeds)
        return

    if not args.only_example:
        with tempfile.TemporaryDirectory() as tmp:
            service = LocalServiceClient(checkpoint_dir=tmp)
            tokenizer_probe = service.create_sampling_client(base_model=args.model).result()
            tokenizer = tokenizer_probe.get_tokenizer()
            prompt_ids = tokenizer.encode(PROMPT)
            tc = trained_client(service, args.model, prompt_ids + tokenizer.encode(" maybe"))
            print(f"model {args.model} on {tc.base.device}, LoRA rank 32", flush=True)

            s = bench_sampling(tc, prompt_ids, args.rounds)
            print(
                f"sampling  tokens/s: local {s['local']:9.0f}  plain {s['plain']:9.0f}  "
                f"ratio {s['ratio']:.2f}x  [{load()}]",
                flush=True,
            )
            for shared, what in (
                (False, "32 distinct sequences x 64 tokens"),
                (True, "4 groups of 8 sharing 40 of 64 tokens, packed"),
            ):
                t = bench_training(tc, training_sequences(tc.base.vocab_size, shared), args.rounds)
                goal = "" if shared else " (goal >= 1.0)"
                print(
                    f"training, {what}:\n"
                    f"  tokens/s: local {t['local']:9.0f}  plain (textbook LoRA) "
                    f"{t['plain']:9.0f}  ratio {t['ratio']:.2f}x{goal}\n"
                    f"  tokens/s: local {t['local2']:9.0f}  plain loop through the backend's "
                    f"own LoRA layers {t['own']:9.0f}  ratio {t['own_ratio']:.2f}x  "
                    f"[{load()}]",
                    flush=True,
                )
            c = asyncio.run(bench_concurrency(tc, prompt_ids, args.rounds))
            print(
                f"32 sample calls: concurrent {c['concurrent_s']:.3f}s  serial "
                f"{c['serial_s']:.3f}s  batched speedup {c['speedup']:.1f}x",
                flush=True,
            )
            m = bench_snapshot_memory(service, args.model, prompt_ids)
            (rss30, live30), (rss150, live150) = m[30], m[150]
            print(
                f"snapshots: RSS {rss30:.0f} MB at step 30, {rss150:.0f} MB at step 150 "
                f"(growth {rss150 - rss30:+.1f} MB); live sampling clients {live30} -> "
                f"{live150}",
                flush=True,
            )
    if not args.skip_example:
        bench_example(seeds, args.baseline)


if __name__ == "__main__":
    main()
