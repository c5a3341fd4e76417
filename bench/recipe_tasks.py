"""A tool task written for the recipe comparison (bench/bench_recipes.py), not tuned to either
recipe: find a prize with a lookup tool, over several turns, and say what it is.

`LOCKER_TOOL_TASK`: "A prize is in one of 9 lockers. Call open with a locker number, then say
the prize." The tool `open(locker)` answers `empty`, or `the prize is WORD` for the one locker
that holds it. The model may open up to 3 lockers (a call per turn, each answer sent back as a
`tool` message) and then, with `tool_choice = none`, says the prize. Reward: 0.4 for opening
the right locker, 0.6 more when the reply is the prize's word. No call scores 0.

The locker that holds the prize is the same in every scenario (`LOCKER`); the prize's word is
drawn per scenario (an animal), so it can only come from the tool's answer. Why a fixed
locker: the embedded model did not learn to copy a number from the prompt into a call's
arguments. A calculator written first ("What is 3 plus 8? Call add with a and b, then say the
result"; 0.2 for a call, up to 0.4 for its arguments, 0.4 for saying the tool's answer) learned
to say the tool's answer within 30 steps (reward 0.3 -> 0.6), but its arguments stayed at
chance for 40-60 steps (numbers 1 to 9 or 1 to 4, with either reward weighting): the policy
settled on one pair of numbers whatever it was asked, every group's rewards turned equal, and
the no-learning-signal check stopped the run. A fixed locker is learned from the rewards, as
`binary_prefix_tool` learns its fixed secret; reading the prize from the tool's answer is
learned as the calculator's answer was.

The format warm-up shows the shapes of the turns with lockers drawn at random, answers from
random decoy lockers and replies that are a random animal other than the prize: it teaches
the format, not where the prize is or what to say. Each rollout records `calls`, `found` and
`said_prize`, so a run shows which part it learned.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from tinker_tui import Scenario, Task, Trajectory
from tinker_tui.engine.server.tools import TOOL_RESULT, format_text_tool_call, text_tool_section

LOCKERS = 9
#: The locker that holds the prize, in every scenario.
LOCKER = 7
MAX_OPENS = 3
PRIZES = (
    "dog cat bird fish horse cow pig sheep mouse rabbit lion tiger bear wolf fox deer "
    "monkey snake frog bee duck owl eagle"
).split()
PROMPT = (
    f"A prize is in one of {LOCKERS} lockers. Call open with a locker number, then say the prize."
)
TOOL = {
    "type": "function",
    "function": {
        "name": "open",
        "description": "Opens a locker and says what is in it.",
        "parameters": {
            "type": "object",
            "properties": {"locker": {"type": "integer", "minimum": 1, "maximum": LOCKERS}},
            "required": ["locker"],
        },
    },
}


def tool_answer(locker: Any, prize: str, holds: int = LOCKER) -> str:
    return f"the prize is {prize}" if locker == holds else "empty"


def _scenarios(rng: random.Random) -> Iterator[Scenario]:
    index = 0
    while True:
        prize = rng.choice(PRIZES)
        yield Scenario(id=f"{prize}-{index}", data=prize)
        index += 1


def _eval_scenarios() -> list[Scenario]:
    return [Scenario(id=f"eval-{prize}", data=prize) for prize in PRIZES[::3]]


def _as_dict(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        out["tool_calls"] = [c.model_dump(exclude_none=True) for c in message.tool_calls]
    return out


def _locker(call: Any) -> int | None:
    """The call's locker when it is a whole number, else None."""
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except (TypeError, ValueError):
        return None
    locker = arguments.get("locker") if isinstance(arguments, dict) else None
    if isinstance(locker, str) and locker.strip().isdigit():
        locker = int(locker)
    return locker if type(locker) is int else None


async def locker_rollout(client: Any, model: str, scenario: Scenario) -> Trajectory:
    prize = scenario.data
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    choices = []
    calls = 0
    found = False
    for _ in range(MAX_OPENS):
        completion = await client.chat.completions.create(
            model=model, messages=messages, tools=[TOOL], max_tokens=40
        )
        choices.append(completion.choices[0])
        message = completion.choices[0].message
        messages.append(_as_dict(message))
        opens = [c for c in message.tool_calls or [] if c.function.name == "open"]
        locker = _locker(opens[0]) if opens else None
        if locker is None:
            break
        calls += 1
        answer = tool_answer(locker, prize)
        messages.append({"role": "tool", "tool_call_id": opens[0].id, "content": answer})
        if locker == LOCKER:
            found = True
            break
    if not calls:
        return Trajectory.from_choices(
            choices, reward=0.0, messages=messages, calls=0.0, found=0.0, said_prize=0.0
        )
    final = await client.chat.completions.create(
        model=model, messages=messages, tools=[TOOL], max_tokens=6, tool_choice="none"
    )
    choices.append(final.choices[0])
    reply = final.choices[0].message.content
    messages.append({"role": "assistant", "content": reply})
    said = float((reply or "").strip().rstrip(".!").strip().lower() == prize)
    return Trajectory.from_choices(
        choices,
        reward=0.4 * found + 0.6 * said,
        messages=messages,
        calls=float(calls),
        found=float(found),
        said_prize=said,
    )


def _warmup(seed: int = 9) -> tuple[tuple[dict[str, str], ...], ...]:
    """The turns' shapes as the policy server renders them for the embedded model's text tool
    protocol: calls of open with distinct random lockers, answered as if a random decoy
    locker held a random prize (half the conversations find it, so that both a call after
    `empty` and a reply after the prize are shown), then a reply that is an animal other than
    that prize. One example per assistant turn: the warm-up trains an example's last one."""
    rng = random.Random(seed)
    system = {"role": "system", "content": text_tool_section([TOOL["function"]])}
    user = {"role": "user", "content": PROMPT}
    examples: list[tuple[dict[str, str], ...]] = []
    for _ in range(48):
        opened = rng.sample(range(1, LOCKERS + 1), MAX_OPENS)
        if rng.random() < 0.5:
            found_at = rng.randrange(MAX_OPENS)
            decoy, opened = opened[found_at], opened[: found_at + 1]
        else:
            decoy = rng.choice([n for n in range(1, LOCKERS + 1) if n not in opened])
        prize = rng.choice(PRIZES)
        conversation = [system, user]
        for locker in opened:
            call = format_text_tool_call("open", {"locker": locker})
            conversation.append({"role": "assistant", "content": call})
            answer = tool_answer(locker, prize, holds=decoy)
            conversation.append(
                {"role": "user", "content": TOOL_RESULT.format(name="open", content=answer)}
            )
        reply = rng.choice([p for p in PRIZES if p != prize])
        conversation.append({"role": "assistant", "content": reply})
        examples += [
            tuple(conversation[: end + 1])
            for end, turn in enumerate(conversation)
            if turn["role"] == "assistant"
        ]
    return tuple(examples)


LOCKER_TOOL_TASK = Task(
    name="locker_tool",
    scenarios=_scenarios,
    rollout=locker_rollout,
    eval_scenarios=_eval_scenarios,
    warmup=_warmup(),
    # Once the locker is learned, a group earns 0.4 in every member until a sample says the
    # prize (no variance, no gradient): a plateau, not a collapse, so pause only if no group
    # at all has variance (as binary_prefix_tool does).
    settings={"max_steps": 100, "zero_variance_pause_rate": 1.0},
    backend_settings={"local": {"warmup_steps": 80, "groups_per_step": 8}},
)
