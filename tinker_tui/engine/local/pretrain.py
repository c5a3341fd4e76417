"""Pre-train the embedded model's base weights (reproducible): ``python -m tinker_tui.engine.local.pretrain``.

Why: LoRA adapts a model that already does something. On a random-init model this small,
low-rank adapters did not learn at all in 120 s where full fine-tuning did, so `tinker-tui/tiny-chat` ships weights
pre-trained here, on a corpus this module generates: short chats in the role-colon format
(``User: ...\\n\\nAssistant: ...\\n\\nUser:``) built from the tokenizer's word list, where the
assistant

* picks one of the listed words ("Answer with one word: red, blue or green. Is the sky big?"),
  uniformly at random, so no option is preferred and RL has something to learn;
* repeats words, names the first or last word of a list, counts, compares two numbers
  (answers yes or no correctly), greets, and says short sentences of random words.

Nothing is downloaded. The run is seeded, single-threaded and deterministic: on the same torch
build it reproduces the shipped file bit for bit (``--check`` compares instead of writing);
other builds or CPUs may differ in the last bits. It takes about 12 minutes on two CPU cores
(longer on a busy machine).

Options: ``--steps N`` (default 3000), ``--out PATH`` (default: the shipped file),
``--check`` (train, then compare with the shipped file instead of writing it).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tinker_tui.engine.local.base_model_names import DEFAULT_BASE_MODEL

if TYPE_CHECKING:
    import torch
from tinker_tui.engine.local._words import LOWER_WORDS

CORPUS_SEED = 1234
TRAIN_SEED = 4321
DEFAULT_STEPS = 3000
BATCH_SIZE = 48
PEAK_LR = 3e-3
FINAL_LR = 2e-4
WARMUP_STEPS = 150

_COLORS = "red orange yellow green blue purple pink brown black white gray gold silver".split()
_ANIMALS = (
    "dog cat bird fish horse cow pig sheep mouse rabbit lion tiger bear wolf fox deer "
    "monkey snake frog bee duck owl eagle"
).split()
_FOODS = (
    "apple banana orange grape lemon cherry peach pear potato tomato carrot onion rice "
    "bread cheese butter egg milk coffee tea juice soup cake cookie"
).split()
_NUMBER_WORDS = "one two three four five six seven eight nine ten".split()
_ADJECTIVES = (
    "good bad big small new old high low long short hot cold warm cool wet dry clean dirty "
    "empty full heavy light dark bright quiet loud quick slow fast rich poor safe happy sad "
    "right wrong ready open free real hard easy"
).split()
_NOUNS = [w for w in LOWER_WORDS if w.isalpha() and len(w) > 2][:900]
_VERBS = "swim run fly sing read write talk walk jump win stop move play work help open".split()
_AUX = ["Is", "Are", "Can", "Will", "Should", "Do", "Does", "Did", "Would", "Could"]
_REPLIES = {
    "Hello": "Hello! How can I help you?",
    "Hi": "Hi! What can I do for you?",
    "Hello there": "Hello! How can I help you today?",
    "Thank you": "You are welcome.",
    "Thanks": "You are welcome.",
    "Good morning": "Good morning! How are you?",
    "How are you?": "I am fine, thank you.",
    "Who are you?": "I am a small assistant.",
}
_YES_NO_SETS = [("yes", "no", "maybe"), ("yes", "no"), ("no", "yes"), ("maybe", "yes", "no")]


def _join_options(options: list[str]) -> str:
    if len(options) == 2:
        return f"{options[0]} or {options[1]}"
    return ", ".join(options[:-1]) + f" or {options[-1]}"


def _question(rng: random.Random) -> str:
    form = rng.randrange(5)
    noun, adj = rng.choice(_NOUNS), rng.choice(_ADJECTIVES)
    if form == 0:
        return f"{rng.choice(['Is', 'Was'])} the {noun} {adj}?"
    if form == 1:
        return f"{rng.choice(['Can', 'Will', 'Does'])} the {noun} {rng.choice(_VERBS)}?"
    if form == 2:
        return f"{rng.choice(_AUX)} you like the {noun}?"
    if form == 3:
        return f"{rng.choice(_AUX)} we {rng.choice(_VERBS)} {rng.choice(['now', 'today', 'here'])}?"
    return f"Which one is {rng.choice(['best', 'right', 'good', 'new'])}?"


def _choice(rng: random.Random) -> tuple[str, str]:
    kind = rng.random()
    if kind < 0.3:
        options = list(rng.choice(_YES_NO_SETS))
        if rng.random() < 0.3:
            rng.shuffle(options)
    else:
        pool = rng.choice([_COLORS, _ANIMALS, _FOODS, _NUMBER_WORDS, _NOUNS, _ADJECTIVES])
        options = rng.sample(pool, rng.choice([2, 3, 3, 4]))
    listed = _join_options(options)
    lead = rng.choice(
        [
            f"Answer with one word: {listed}.",
            f"Answer with one word: {listed}.",
            f"Pick one: {listed}.",
            f"Choose one word: {listed}.",
            f"Reply with {listed}.",
        ]
    )
    prompt = f"{lead} {_question(rng)}" if rng.random() < 0.85 else lead
    return prompt, rng.choice(options)


def _exchange(rng: random.Random) -> tuple[str, str]:
    r = rng.random()
    if r < 0.45:
        return _choice(rng)
    if r < 0.6:
        words = rng.sample(_NOUNS, rng.randint(1, 4))
        text = " ".join(words)
        return rng.choice([f"Say {text}.", f"Repeat after me: {text}", f"Repeat: {text}"]), text
    if r < 0.75:
        words = rng.sample(_NOUNS, rng.randint(2, 5))
        which = rng.choice(["first", "last"])
        answer = words[0] if which == "first" else words[-1]
        return f"What is the {which} word of: {' '.join(words)}?", answer
    if r < 0.83:
        n = rng.randint(0, 98)
        return rng.choice([f"What comes after {n}?", f"What number is after {n}?"]), str(n + 1)
    if r < 0.9:
        a, b = rng.sample(range(100), 2)
        more = rng.random() < 0.5
        question = f"Is {a} {'more' if more else 'less'} than {b}? Answer yes or no."
        return question, "yes" if (a > b) == more else "no"
    if r < 0.94:
        prompt = rng.choice(list(_REPLIES))
        return prompt, _REPLIES[prompt]
    noun = rng.choice(_NOUNS)
    words = rng.sample(_NOUNS, rng.randint(4, 10))
    sentence = " ".join(words).capitalize() + "."
    return f"Tell me about the {noun}.", sentence


def chat_corpus(seed: int = CORPUS_SEED) -> Iterator[str]:
    """An endless, seeded stream of documents: one to three exchanges, then ``User:``."""
    rng = random.Random(seed)
    while True:
        parts = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            prompt, answer = _exchange(rng)
            parts.append(f"User: {prompt}\n\nAssistant: {answer}\n\n")
        yield "".join(parts) + "User:"


def _lr(step: int, steps: int) -> float:
    if step < WARMUP_STEPS:
        return PEAK_LR * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)
    return FINAL_LR + 0.5 * (PEAK_LR - FINAL_LR) * (1 + math.cos(math.pi * progress))


def train(
    steps: int = DEFAULT_STEPS, log_every: int = 250
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Pre-train from the seeded random init; returns (state_dict without lm_head, metadata)."""
    import torch
    import torch.nn.functional as F

    from tinker_tui.engine.local.model import build_tiny_module
    from tinker_tui.engine.local.tokenizer import WordTokenizer

    torch.set_num_threads(1)
    torch.manual_seed(TRAIN_SEED)
    tokenizer = WordTokenizer(DEFAULT_BASE_MODEL)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    model = build_tiny_module(DEFAULT_BASE_MODEL, pretrained=False)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=PEAK_LR, betas=(0.9, 0.95), weight_decay=0.01
    )
    corpus = chat_corpus()
    digest = hashlib.sha256()
    started = time.perf_counter()
    recent: list[float] = []
    for step in range(steps):
        docs = [next(corpus) for _ in range(BATCH_SIZE)]
        for doc in docs:
            digest.update(doc.encode())
        ids = [tokenizer.encode(doc) + [eos] for doc in docs]
        width = max(len(x) for x in ids)
        batch = torch.full((len(ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.float32)
        for i, x in enumerate(ids):
            batch[i, : len(x)] = torch.tensor(x)
            mask[i, : len(x)] = 1.0
        logits = model(input_ids=batch[:, :-1]).logits
        losses = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="none"
        )
        weights = mask[:, 1:].reshape(-1)
        loss = (losses * weights).sum() / weights.sum()
        for group in optimizer.param_groups:
            group["lr"] = _lr(step, steps)
        optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)  # loss.backward(), typed
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        recent.append(float(loss.detach()))
        if log_every and ((step + 1) % log_every == 0 or step == 0):
            mean = sum(recent) / len(recent)
            recent.clear()
            elapsed = time.perf_counter() - started
            print(f"step {step + 1:5d}/{steps}  loss {mean:.3f}  {elapsed:6.1f}s", flush=True)
    model.eval()
    state = {
        k: v.detach().contiguous().clone()
        for k, v in model.state_dict().items()
        if k != "lm_head.weight"  # tied to the embedding
    }
    meta = {
        "base_model": DEFAULT_BASE_MODEL,
        "steps": str(steps),
        "batch_size": str(BATCH_SIZE),
        "corpus_seed": str(CORPUS_SEED),
        "train_seed": str(TRAIN_SEED),
        "corpus_sha256": digest.hexdigest(),
        "torch": torch.__version__,
    }
    return state, meta


def evaluate(state: dict[str, torch.Tensor]) -> dict[str, float]:
    """Next-token probabilities of the answers after "Answer with one word: <options>. <q>",
    averaged over questions: for yes/no/maybe (the example's options) each option's share, and
    for those and two other option sets the mass on the listed options (valid answers)."""
    import torch

    from tinker_tui.engine.local.model import build_tiny_module
    from tinker_tui.engine.local.tokenizer import WordTokenizer

    tokenizer = WordTokenizer(DEFAULT_BASE_MODEL)
    model = build_tiny_module(DEFAULT_BASE_MODEL, pretrained=False)
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    model.eval()
    questions = ["Is the sky blue?", "Can a cat swim?", "Will it rain tomorrow?", "Are you ready?"]
    option_sets = [("yes", "no", "maybe"), ("red", "blue", "green"), ("dog", "cat")]
    report: dict[str, float] = {}
    with torch.inference_mode():
        for options in option_sets:
            shares = torch.zeros(len(options))
            for q in questions:
                text = f"User: Answer with one word: {_join_options(list(options))}. {q}"
                ids = tokenizer.encode(text + "\n\nAssistant:")
                probs = torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1], -1)
                for k, option in enumerate(options):
                    shares[k] += probs[tokenizer.encode(" " + option)[0]] / len(questions)
            report[f"valid[{'/'.join(options)}]"] = round(float(shares.sum()), 3)
            if options[0] == "yes":
                for k, option in enumerate(options):
                    report[option] = round(float(shares[k] / shares.sum()), 3)
    return report


def save(state: dict[str, torch.Tensor], meta: dict[str, str], path: Path) -> str:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata=meta)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    from tinker_tui.engine.local.model import WEIGHTS_DIR, get_spec

    shipped = WEIGHTS_DIR / get_spec(DEFAULT_BASE_MODEL).weights_file
    parser = argparse.ArgumentParser(
        prog="python -m tinker_tui.engine.local.pretrain", description=__doc__
    )
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--out", type=Path, default=shipped)
    parser.add_argument("--check", action="store_true", help="compare with the shipped file")
    args = parser.parse_args(argv)
    state, meta = train(args.steps)
    print("next-token answer probabilities:", evaluate(state), flush=True)
    if args.check:
        import torch
        from safetensors.torch import load_file

        reference = load_file(str(shipped))
        same = set(reference) == set(state) and all(
            torch.equal(reference[k], state[k]) for k in state
        )
        print("identical to the shipped weights" if same else "DIFFERENT from the shipped weights")
        return 0 if same else 1
    digest = save(state, meta, args.out)
    print(f"wrote {args.out} (sha256 {digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
