"""Hand-run learning sanity check for the local backend (not collected by pytest).

    python -m tests.local.learning_check [--warmup 30] [--warmup-lr 3e-3] [--seeds 3]
        [--groups 8] [--lr 3e-3] [--max-steps 300] [--lenient]

The yes/no/maybe example: reward maybe 1.0, no 0.75, yes 0.5, anything else 0; groups of 8
samples per prompt, advantage = reward - group mean, importance-sampling loss, Adam. Optional
cross-entropy warm-up on the three answers equally (no bias towards "maybe"). Prints the
seconds and steps until the mean reward of a step's samples reaches 0.9, and per-call timings.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import tinker

from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient

QUESTION = "Answer with one word: yes, no or maybe. Is the sky blue?"
REWARDS = {"maybe": 1.0, "no": 0.75, "yes": 0.5}


def reward_of(renderer, tokens: list[int], lenient: bool = False) -> float:
    """Strict: the parsed reply is exactly the answer. Lenient: its first word is."""
    message, _ = renderer.parse_response(tokens)
    content = message["content"] if isinstance(message["content"], str) else ""
    words = content.strip().lower().split()
    answer = (words[0] if words else "") if lenient else content.strip().lower()
    return REWARDS.get(answer.rstrip(".!"), 0.0)


async def run(
    seed: int,
    warmup: int,
    groups: int,
    lr: float,
    max_steps: int,
    warmup_lr: float = 3e-3,
    lenient: bool = False,
) -> dict:
    from tinker_cookbook.renderers import get_renderer

    service = LocalServiceClient(checkpoint_dir=tempfile.mkdtemp())
    tc = await service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL, seed=seed)
    tok = tc.get_tokenizer()
    renderer = get_renderer("role_colon", tok)
    prompt = renderer.build_generation_prompt([{"role": "user", "content": QUESTION}])
    prompt_ids = prompt.to_ints()
    params = tinker.SamplingParams(
        max_tokens=8, temperature=1.0, stop=renderer.get_stop_sequences(), seed=None
    )
    t0 = time.perf_counter()

    # Supervised warm-up: the three answers equally, in the renderer's own format.
    sup = []
    for answer in ("yes", "no", "maybe"):
        mi, weights = renderer.build_supervised_example(
            [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": answer}]
        )
        toks, w = mi.to_ints(), [float(x) for x in weights.tolist()]
        sup.append(
            tinker.Datum(
                model_input=tinker.ModelInput.from_ints(toks[:-1]),
                loss_fn_inputs={"target_tokens": toks[1:], "weights": w[1:]},
            )
        )
    for _ in range(warmup):
        fb = tc.forward_backward(sup, "cross_entropy")
        opt = tc.optim_step(tinker.AdamParams(learning_rate=warmup_lr))
        await fb
        await opt
    t_warm = time.perf_counter() - t0

    sample_times, train_times = [], []
    reached_at = None
    history = []
    for step in range(max_steps):
        sc = await tc.save_weights_and_get_sampling_client()
        ts = time.perf_counter()
        responses = await asyncio.gather(*[sc.sample(prompt, 8, params) for _ in range(groups)])
        sample_times.append((time.perf_counter() - ts) / groups)
        datums, rewards = [], []
        for resp in responses:
            rs = [reward_of(renderer, s.tokens, lenient) for s in resp.sequences]
            rewards += rs
            mean = sum(rs) / len(rs)
            for s, r in zip(resp.sequences, rs, strict=True):
                adv = r - mean
                full = prompt_ids + s.tokens
                n_prompt = len(prompt_ids) - 1
                datums.append(
                    tinker.Datum(
                        model_input=tinker.ModelInput.from_ints(full[:-1]),
                        loss_fn_inputs={
                            "target_tokens": full[1:],
                            "logprobs": [0.0] * n_prompt + list(s.logprobs),
                            "advantages": [0.0] * n_prompt + [adv] * len(s.tokens),
                        },
                    )
                )
        mean_reward = sum(rewards) / len(rewards)
        history.append(round(mean_reward, 2))
        if mean_reward >= 0.9:
            reached_at = (step, time.perf_counter() - t0)
            break
        tt = time.perf_counter()
        fb = tc.forward_backward(datums, "importance_sampling")
        opt = tc.optim_step(tinker.AdamParams(learning_rate=lr))
        await fb
        await opt
        train_times.append((time.perf_counter() - tt, len(datums)))
    return {
        "seed": seed,
        "warmup_s": round(t_warm, 2),
        "reached": reached_at,
        "history": history,
        "sample_s_per_group": statistics.median(sample_times),
        "train_s": statistics.median([t for t, _ in train_times]) if train_times else None,
        "train_rows": train_times[0][1] if train_times else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup-lr", type=float, default=3e-3)
    ap.add_argument("--lenient", action="store_true", help="reward the first word only")
    ap.add_argument("--max-steps", type=int, default=300)
    args = ap.parse_args()
    for seed in range(args.seeds):
        res = asyncio.run(
            run(
                seed,
                args.warmup,
                args.groups,
                args.lr,
                args.max_steps,
                args.warmup_lr,
                args.lenient,
            )
        )
        print(res, flush=True)


if __name__ == "__main__":
    main()
