"""The agent that `subprocess_agent` runs as a program of its own: it talks to the policy
through Anthropic's Messages API with the official `anthropic` client, which reads its address
and key from ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY (as any agent pointed at a proxy does),
and prints its two answers, one a line. It never sees token ids or `choices`.

    python subprocess_agent_program.py MODEL N
"""

from __future__ import annotations

import sys
from typing import Any

import anthropic


def main() -> None:
    model, number = sys.argv[1], int(sys.argv[2])
    client = anthropic.Anthropic(max_retries=0)
    history: list[Any] = [{"role": "user", "content": f"What comes after {number}?"}]
    first = client.messages.create(model=model, max_tokens=8, messages=history)
    # The reply goes back as history, blocks and all: the server knows it by its sampled
    # tokens, so both turns train as one sequence.
    history.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
    history.append({"role": "user", "content": "And the one after that?"})
    second = client.messages.create(model=model, max_tokens=8, messages=history)
    for reply in (first, second):
        print("".join(b.text for b in reply.content if b.type == "text").replace("\n", " "))


if __name__ == "__main__":
    main()
