"""binary_prefix_tool: find a hidden 30-bit string through a tool, over several turns.

The model is told a bit string is hidden and gets one tool, ``make_guess(guess)``. Each call
answers how many leading bits of the guess are right (a guess that is not only 0s and 1s
scores 0 and is told so); the answer goes back to the model and it guesses again, up to
``max_turns`` guesses. The reward is the best common-prefix length of the episode (0 to 30);
every turn is trained with the episode's advantage.

How the tool is called depends on what the policy's renderer can do, and the rollout asks the
server once (`native_tool_calls`):

* a renderer with native tool calls (Qwen3, on Tinker or from a local folder): the request carries
  ``tools=[make_guess]``, the call comes back in ``message.tool_calls`` and its answer goes
  back as a ``tool`` message;
* a renderer without them (``role_colon``, the embedded model's): a short plain-text protocol
  -- the reply *is* the guess (``0110...``, or ``make_guess(0110...)``) and the answer comes
  back as a user message. (The server's generic text tool protocol would work too, but its
  tool description makes every prompt about ten times longer, which a CPU pays for on every
  step.) The format warm-up (local backend only) shows this protocol with random guesses and
  answers against random decoys: it never shows the secret.

Secrets. ``TASK`` hides one fixed 30-bit secret, the same in every scenario
(``secret_pool=1``): across the run the policy can learn it, and within an episode it can use
the tool's answers. That is what lets the tiny embedded model improve measurably: with a fresh
random secret per scenario nothing can be learned except reading the feedback, which a
two-layer model trained for minutes does not. ``TASK_RANDOM_SECRETS`` draws a fresh secret
per scenario (``secret_pool=0``, 8 guesses): a test of using the feedback, for a real model on
Tinker (``tinker-tui run examples/binary_prefix_tool.py:TASK_RANDOM_SECRETS --backend tinker
--base-model Qwen/Qwen3.6-35B-A3B``). ``make_task(bits=..., secret_pool=...,
max_turns=...)`` builds other variants.

Settings. Locally: 30 warm-up steps and a learning rate of 1e-3 (the engine's 3e-3 learns
faster at first, then collapses the 30-token answers into invalid guesses). On Tinker: no
warm-up (Qwen3 knows how to call a tool) and 4e-5, a usual LoRA RL rate for a 4B model.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Iterator
from typing import Any

from tinker_tui import Scenario, Task, Trajectory

TOOL_NAME = "make_guess"


def tool_spec(bits: int) -> dict[str, Any]:
    """The OpenAI tool definition of make_guess."""
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "Returns how many leading bits of the guess are right.",
            "parameters": {
                "type": "object",
                "properties": {
                    "guess": {"type": "string", "description": f"{bits} bits, each 0 or 1"}
                },
                "required": ["guess"],
            },
        },
    }


def prompt_for(bits: int, secret_index: int | None, *, native: bool) -> str:
    which = "" if secret_index is None else f" Secret number {secret_index}."
    how = (
        "Call the tool make_guess with your guess."
        if native
        else f"Reply with your guess only: {bits} bits, each 0 or 1."
    )
    return f"A string of {bits} bits is hidden.{which} Find it with make_guess. {how}"


_TEXT_CALL = re.compile(r"make_guess\(\s*[\"']?([^\"')]*)[\"']?\s*\)")


def text_guess(reply: str) -> str:
    """The guess in a plain-text reply: the reply itself, or the argument of make_guess(...)."""
    reply = reply.strip()
    match = _TEXT_CALL.fullmatch(reply)
    return (match.group(1) if match else reply).strip()


def common_prefix(guess: str, secret: str) -> int:
    n = 0
    for a, b in zip(guess, secret, strict=False):
        if a != b:
            break
        n += 1
    return n


def make_guess(guess: Any, secret: str) -> tuple[int, str]:
    """The tool: (score, answer text). Score = common prefix length of a 0/1 guess, else 0."""
    if not isinstance(guess, str) or not guess or set(guess) - {"0", "1"}:
        return 0, f"invalid guess: use only 0 and 1 ({len(secret)} bits)"
    k = common_prefix(guess, secret)
    return k, f"{k} leading bits right" + (": found it" if k == len(secret) else "")


def _guess_of(call: Any) -> Any:
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except (TypeError, ValueError):
        return None
    return arguments.get("guess") if isinstance(arguments, dict) else None


def _as_dict(message: Any) -> dict[str, Any]:
    """The assistant message as the server returned it, to send back next turn."""
    out: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        out["tool_calls"] = [c.model_dump(exclude_none=True) for c in message.tool_calls]
    return out


_native: dict[str, asyncio.Future[bool]] = {}


async def native_tool_calls(client: Any, model: str) -> bool:
    """Does the policy's renderer have native tool calls? Asked once per server and model.

    The policy server says so in its model entry (``tool_calls``: "native" or "text");
    a server that does not say gets the plain-text protocol, which works anywhere."""
    key = f"{client.base_url}|{model}"
    probe = _native.get(key)
    if probe is None:
        probe = _native[key] = asyncio.ensure_future(_probe(client, model))
    try:
        return await asyncio.shield(probe)
    except Exception:
        _native.pop(key, None)  # ask again next time
        raise


async def _probe(client: Any, model: str) -> bool:
    entry = await client.models.retrieve(model)
    return (getattr(entry, "model_extra", None) or {}).get("tool_calls") == "native"


def make_task(
    *,
    bits: int = 30,
    secret_pool: int = 1,
    max_turns: int = 3,
    seed: int = 2024,
    name: str = "binary_prefix_tool",
) -> Task:
    """A binary-prefix task. secret_pool: how many fixed secrets (scenarios name theirs), or 0
    for a fresh random secret per scenario; max_turns: guesses per episode."""
    pool_rng = random.Random(seed)
    pool = ["".join(pool_rng.choice("01") for _ in range(bits)) for _ in range(secret_pool)]
    tools = [tool_spec(bits)]

    def scenarios(rng: random.Random) -> Iterator[Scenario]:
        index = 0
        while True:
            if pool:
                j = rng.randrange(len(pool))
                yield Scenario(
                    id=f"secret{j}-{index}", data=(j if len(pool) > 1 else None, pool[j])
                )
            else:
                secret = "".join(rng.choice("01") for _ in range(bits))
                yield Scenario(id=f"random-{index}", data=(None, secret))
            index += 1

    def eval_scenarios() -> list[Scenario]:
        if pool:
            return [
                Scenario(id=f"eval-secret{j}-{k}", data=(j if len(pool) > 1 else None, s))
                for j, s in enumerate(pool)
                for k in range(max(1, 8 // len(pool)))
            ]
        rng = random.Random(seed + 7)
        return [
            Scenario(
                id=f"eval-random-{k}", data=(None, "".join(rng.choice("01") for _ in range(bits)))
            )
            for k in range(8)
        ]

    async def rollout(client: Any, model: str, scenario: Scenario) -> Trajectory:
        secret_index, secret = scenario.data
        native = await native_tool_calls(client, model)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": prompt_for(bits, secret_index, native=native)}
        ]
        choices, best, calls = [], 0, 0
        for _ in range(max_turns):
            if native:
                completion = await client.chat.completions.create(
                    model=model, messages=messages, tools=tools, max_tokens=256
                )
            else:
                completion = await client.chat.completions.create(
                    model=model, messages=messages, max_tokens=bits + 8
                )
            choice = completion.choices[0]
            choices.append(choice)
            message = choice.message
            messages.append(_as_dict(message))
            if not native:
                calls += 1
                score, answer = make_guess(text_guess(message.content or ""), secret)
                best = max(best, score)
                messages.append({"role": "user", "content": f"make_guess: {answer}"})
            else:
                guesses = [c for c in message.tool_calls or [] if c.function.name == TOOL_NAME]
                if not guesses:
                    messages.append(
                        {"role": "user", "content": f"Call {TOOL_NAME} with your guess."}
                    )
                for call in guesses:
                    calls += 1
                    score, answer = make_guess(_guess_of(call), secret)
                    best = max(best, score)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": answer})
            if best == bits:
                break
        return Trajectory.from_choices(
            choices, reward=float(best), messages=messages, tool_calls=float(calls)
        )

    return Task(
        name=name,
        scenarios=scenarios,
        rollout=rollout,
        eval_scenarios=eval_scenarios,
        warmup=text_warmup(bits, max_turns, pool, seed),
        # A policy that has memorised a prefix answers it in every member of a group
        # (no variance, no gradient) until a lucky sample finds the next bit: a
        # plateau, not a collapse, so pause only if no group at all has variance.
        settings={"max_steps": 150, "eval_every": 25, "zero_variance_pause_rate": 1.0},
        backend_settings={
            "local": {"warmup_steps": 30, "learning_rate": 1e-3},
            "tinker": {"learning_rate": 4e-5, "max_steps": 60},
        },
    )


def text_warmup(
    bits: int, max_turns: int, pool: list[str], seed: int
) -> tuple[tuple[dict[str, str], ...], ...]:
    """Format examples of the plain-text protocol: random guesses, answered against random
    decoys, so the secret is never shown (and no bit is preferred)."""
    rng = random.Random(seed + 1)
    examples = []
    for _ in range(96):
        decoy = "".join(rng.choice("01") for _ in range(bits))
        index = rng.randrange(len(pool)) if len(pool) > 1 else None
        conversation = [{"role": "user", "content": prompt_for(bits, index, native=False)}]
        turns = rng.randint(1, max_turns)
        for turn in range(turns):
            guess = "".join(rng.choice("01") for _ in range(bits))
            conversation.append({"role": "assistant", "content": guess})
            if turn < turns - 1:
                answer = make_guess(guess, decoy)[1]
                conversation.append({"role": "user", "content": f"make_guess: {answer}"})
        examples.append(tuple(conversation))
    return tuple(examples)


TASK = make_task()
TASK_RANDOM_SECRETS = make_task(secret_pool=0, max_turns=8, name="binary_prefix_tool_random")
