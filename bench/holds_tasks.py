"""Tasks written for the learning-holds check (bench/bench_holds.py), not tuned to the engine:
a tool call, the same call forced by a named `tool_choice`, and a conversation of two turns.

* `TOOL_TASK`: "Call the tool paint with the color red, then say the word it returns." The
  tool `paint(color)` answers with a word (red -> fire, green -> grass, ...). Reward: 0.25 for
  a call of paint, 0.25 more when its color is the one asked for, 0.5 more when the reply
  after the tool's answer is that word. No call: 0.
* `NAMED_TOOL_TASK`: the same, the first turn sent with `tool_choice` naming paint (so the
  reply is always a call; the color and the reply are what is learned).
* `MULTI_TURN_TASK`: "Repeat after me: W1", then "Now repeat: W2"; 0.5 for each reply that
  is exactly its word.

Each has a format warm-up (the shapes of the replies, with colors and words drawn at random:
it teaches the format, not the answers) and no settings of its own beyond that: the check runs
them with the run's defaults, or the settings it is given.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from tinker_tui import Scenario, Task, Trajectory
from tinker_tui.engine.server.tools import TOOL_RESULT, format_text_tool_call, text_tool_section

ANSWERS = {
    "red": "fire",
    "green": "grass",
    "blue": "sea",
    "white": "snow",
    "black": "night",
    "gold": "sun",
}
COLORS = tuple(ANSWERS)
TOOL = {
    "type": "function",
    "function": {
        "name": "paint",
        "description": "Returns the word of a color.",
        "parameters": {
            "type": "object",
            "properties": {"color": {"type": "string", "enum": list(COLORS)}},
            "required": ["color"],
        },
    },
}
NAMED = {"type": "function", "function": {"name": "paint"}}


def tool_prompt(color: str) -> str:
    return f"Call the tool paint with the color {color}, then say the word it returns."


def _color_scenarios(rng: random.Random) -> Iterator[Scenario]:
    index = 0
    while True:
        color = rng.choice(COLORS)
        yield Scenario(id=f"{color}-{index}", data=color)
        index += 1


def _as_dict(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        out["tool_calls"] = [c.model_dump(exclude_none=True) for c in message.tool_calls]
    return out


def _color_of(call: Any) -> Any:
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except (TypeError, ValueError):
        return None
    return arguments.get("color") if isinstance(arguments, dict) else None


def _tool_rollout(named: bool):  # type: ignore[no-untyped-def]
    async def rollout(client: Any, model: str, scenario: Scenario) -> Trajectory:
        color = scenario.data
        messages: list[dict[str, Any]] = [{"role": "user", "content": tool_prompt(color)}]
        extra = {"tool_choice": NAMED} if named else {}
        first = await client.chat.completions.create(
            model=model, messages=messages, tools=[TOOL], max_tokens=48, **extra
        )
        choices = [first.choices[0]]
        message = first.choices[0].message
        calls = [c for c in message.tool_calls or [] if c.function.name == "paint"]
        messages.append(_as_dict(message))
        if not calls:
            return Trajectory.from_choices(choices, reward=0.0, messages=messages)
        asked = _color_of(calls[0])
        answer = ANSWERS.get(asked, "unknown") if isinstance(asked, str) else "unknown"
        reward = 0.25 + (0.25 if asked == color else 0.0)
        messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": answer})
        second = await client.chat.completions.create(
            model=model, messages=messages, tools=[TOOL], max_tokens=6, tool_choice="none"
        )
        choices.append(second.choices[0])
        reply = (second.choices[0].message.content or "").strip().strip(".!").lower()
        messages.append({"role": "assistant", "content": second.choices[0].message.content})
        if answer != "unknown" and reply == answer:
            reward += 0.5
        return Trajectory.from_choices(choices, reward=reward, messages=messages)

    return rollout


def _tool_warmup(seed: int = 5) -> tuple[tuple[dict[str, str], ...], ...]:
    """Both turns' shapes, as the policy server renders them for the embedded model's text
    tool protocol: a call of paint with a random color, and a reply that is a random word
    (never the tool's answer: the warm-up shows the format, not the task)."""
    rng = random.Random(seed)
    system = {"role": "system", "content": text_tool_section([TOOL["function"]])}
    words = sorted(set(ANSWERS.values()))
    examples = []
    for _ in range(48):
        color = rng.choice(COLORS)
        called = rng.choice(COLORS)
        user = {"role": "user", "content": tool_prompt(color)}
        call = {"role": "assistant", "content": format_text_tool_call("paint", {"color": called})}
        examples.append((system, user, call))
        result = {
            "role": "user",
            "content": TOOL_RESULT.format(name="paint", content=ANSWERS[called]),
        }
        examples.append(
            (system, user, call, result, {"role": "assistant", "content": rng.choice(words)})
        )
    return tuple(examples)


TOOL_TASK = Task(
    name="paint_tool",
    scenarios=_color_scenarios,
    rollout=_tool_rollout(False),
    warmup=_tool_warmup(),
)
NAMED_TOOL_TASK = Task(
    name="paint_tool_named",
    scenarios=_color_scenarios,
    rollout=_tool_rollout(True),
    warmup=_tool_warmup(),
)

WORDS = ("tree", "fish", "house", "river", "music", "bird", "water", "book", "horse", "ship")


def _pair_scenarios(rng: random.Random) -> Iterator[Scenario]:
    index = 0
    while True:
        first, second = rng.sample(WORDS, 2)
        yield Scenario(id=f"{first}-{second}-{index}", data=(first, second))
        index += 1


async def _repeat_rollout(client: Any, model: str, scenario: Scenario) -> Trajectory:
    messages: list[dict[str, Any]] = []
    choices = []
    reward = 0.0
    for lead, word in zip(("Repeat after me:", "Now repeat:"), scenario.data, strict=True):
        messages.append({"role": "user", "content": f"{lead} {word}"})
        completion = await client.chat.completions.create(
            model=model, messages=messages, max_tokens=6
        )
        choice = completion.choices[0]
        choices.append(choice)
        text = choice.message.content or ""
        messages.append({"role": "assistant", "content": text})
        reward += 0.5 if text.strip().strip(".!").lower() == word else 0.0
    return Trajectory.from_choices(choices, reward=reward, messages=messages)


def _repeat_warmup(seed: int = 6) -> tuple[tuple[dict[str, str], ...], ...]:
    """The two turns' shapes with random one-word replies (not the words asked for)."""
    rng = random.Random(seed)
    examples = []
    for _ in range(48):
        first, second = rng.sample(WORDS, 2)
        turn = (
            {"role": "user", "content": f"Repeat after me: {first}"},
            {"role": "assistant", "content": rng.choice(WORDS)},
        )
        examples.append(turn)
        examples.append(
            (
                *turn,
                {"role": "user", "content": f"Now repeat: {second}"},
                {"role": "assistant", "content": rng.choice(WORDS)},
            )
        )
    return tuple(examples)


MULTI_TURN_TASK = Task(
    name="repeat_two_turns",
    scenarios=_pair_scenarios,
    rollout=_repeat_rollout,
    warmup=_repeat_warmup(),
)
