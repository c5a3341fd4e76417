"""Forced tool calls for renderers with a tool format of their own (Qwen3, Llama 3, ...).

tool_choice "required" or a named function prefills the renderer's own call opening after the
one assistant header the generation prompt already ends with: for Qwen3
``<tool_call>\\n{"name": "NAME", "arguments":`` (named) or ``<tool_call>\\n{"name": "``
(required). The opening is found by rendering a call with marker name and arguments through
the renderer (`call_opening`), so every family gets its own, and it is cut back to where the
tokens of a whole call break (a prefill ending inside a token the model writes, as
``"arguments": `` before `` {``, leaves it a continuation it never saw).

Where the backend samples in this process, the rest of the reply is also kept to one whole
call (`FramedCallConstraint`): the frame's opening text, then the JSON call within the tool's
schema (`engine.server.tool_call_constraint`), then the frame's closing text (Qwen3:
``\\n</tool_call>``), and then only the end of the turn. A family whose calls are not a
``{"name": ..., "arguments": ...}`` object in a text frame gets the prefill alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tinker_tui.engine.server.tool_call_constraint import ToolCallConstraint, Verdict
from tinker_tui.engine.server.tools import longest_prefix_of

_NAME = "qqzname"
_ARGS = {"qqzarg": 1}


def _rendered_call(renderer: Any, name: str) -> tuple[list[int], str] | None:
    """The tokens and text a renderer writes for an assistant turn that is one call of
    `name` with the marker arguments (its end-of-turn token left out)."""
    from tinker_cookbook.renderers import RenderContext, ToolCall

    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            ToolCall(
                id="call_0", function=ToolCall.FunctionBody(name=name, arguments=json.dumps(_ARGS))
            )
        ],
    }
    try:
        rendered = renderer.render_message(message, RenderContext(idx=1, is_last=True))
    except Exception:
        return None
    tokens = [t for chunk in rendered.output for t in getattr(chunk, "tokens", [])]
    stops = set(_int_stops(renderer))
    while tokens and tokens[-1] in stops:
        tokens.pop()
    return tokens, renderer.tokenizer.decode(tokens)


def _int_stops(renderer: Any) -> list[int]:
    try:
        return [s for s in renderer.get_stop_sequences() if isinstance(s, int)]
    except Exception:
        return []


def call_opening(
    renderer: Any, forced_name: str | None, first_name: str
) -> tuple[str, list[int]] | None:
    """The prefill of a forced call (text, tokens), or None if the renderer writes no call
    this way. `forced_name` None: tool_choice "required" (the opening up to the name)."""
    name = forced_name or first_name
    rendered = _rendered_call(renderer, name if forced_name else _NAME)
    if rendered is None:
        return None
    tokens, text = rendered
    marker = json.dumps(_ARGS) if forced_name else _NAME
    at = text.find(marker)
    if at <= 0:
        return None
    wanted = text[:at]
    if forced_name is None:
        # the whole call of a real tool: tokens that break where the model's would
        whole = _rendered_call(renderer, first_name)
        if whole is None:
            return None
        tokens = whole[0]
    return longest_prefix_of(renderer.tokenizer, tokens, wanted)


def call_frame(renderer: Any, name: str) -> tuple[str, str] | None:
    """The text a renderer writes around a call's JSON object (Qwen3: ``<tool_call>\\n``
    and ``\\n</tool_call>``), or None if its calls are not such an object."""
    rendered = _rendered_call(renderer, name)
    if rendered is None:
        return None
    text = rendered[1]
    for payload in (
        json.dumps({"name": name, "arguments": _ARGS}),
        json.dumps({"name": name, "arguments": _ARGS}, ensure_ascii=False),
    ):
        at = text.find(payload)
        if at >= 0:
            return text[:at], text[at + len(payload) :]
    return None


@dataclass(frozen=True, slots=True)
class FramedCallConstraint:
    """The reply (prefill included) is `opening`, one call within `inner`, `closing`, and then
    the end of the turn: `check` says "end" once the frame is closed, when only an end token
    may come (see `engine.local.generation`)."""

    opening: str
    inner: ToolCallConstraint
    closing: str
    #: The renderer's end of turn, which the sampler writes once the frame is closed.
    end_token: int | None = None

    def start(self, text: str) -> FramedScan:
        scan = FramedScan(self)
        scan.feed(text)
        return scan

    def check(self, text: str) -> Verdict | str:
        return self.start(text).verdict

    def completion(self, scan: FramedScan) -> str | None:
        """The shortest text that closes the call and its frame (`call_completion`)."""
        from tinker_tui.engine.server.call_completion import completion

        return completion(scan)


class FramedScan:
    """The scan of a framed call so far (`feed` returns the verdict, as `ScanState`'s)."""

    __slots__ = ("constraint", "head", "inner", "tail", "verdict")

    def __init__(self, constraint: FramedCallConstraint) -> None:
        self.constraint = constraint
        self.head = ""  # the part of the opening written so far
        self.inner: Any = None  # the JSON call's scan, once the opening is whole
        self.tail = ""  # the part of the closing written so far
        self.verdict: str = "continue"

    def copy(self) -> FramedScan:
        other = FramedScan.__new__(FramedScan)
        other.constraint, other.head, other.tail = self.constraint, self.head, self.tail
        other.inner = self.inner.copy() if self.inner is not None else None
        other.verdict = self.verdict
        return other

    def feed(self, text: str) -> str:
        if self.verdict == "reject":
            return "reject"
        c = self.constraint
        if self.inner is None:
            take = min(len(text), len(c.opening) - len(self.head))
            self.head += text[:take]
            text = text[take:]
            if not c.opening.startswith(self.head):
                self.verdict = "reject"
                return "reject"
            if self.head == c.opening:
                self.inner = c.inner.start("")
        if self.inner is not None and text and self.inner.verdict != "done":
            # hand the JSON scanner characters until its call is whole
            for i, ch in enumerate(text):
                if self.inner.feed(ch) == "reject":
                    self.verdict = "reject"
                    return "reject"
                if self.inner.verdict == "done":
                    text = text[i + 1 :]
                    break
            else:
                text = ""
        if text:
            if self.inner is None or self.inner.verdict != "done":
                self.verdict = "reject"
                return "reject"
            self.tail += text
            if not c.closing.startswith(self.tail):
                self.verdict = "reject"
                return "reject"
        done = self.inner is not None and self.inner.verdict == "done" and self.tail == c.closing
        self.verdict = "end" if done else "continue"
        return self.verdict
