"""Replies this server sampled, put back into later prompts as their exact tokens.

An agent sends each reply back as history in its next request. Rendering that history again
re-encodes the reply's text: whitespace the parser trimmed, a tokenization the model chose
that is not the canonical one (" a" + "b" where the encoder writes " ab"), an end token other
than the renderer's own all come out different, the next prompt no longer extends the tokens
that were sampled, and the turns train as separate sequences. So every reply is remembered
by the exact tokens that came before it (the prompt it was sampled from, its prefill left
out) and the message the server returned; when a request's history holds that message after
those same tokens, its tokens are the sampled ones, not a rendering of its text. The
conversation is rendered message by message (as tinker-cookbook's renderers build a
generation prompt) so that the tokens before each message are known while rendering it.

An edited reply (other text, other calls, other reasoning) matches nothing and is rendered
from its text, as a real edit should be. Renderers that render whole conversations at once
(a folder's own chat template) cannot be spliced and render as before.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tinker

from tinker_tui.engine.rendering import cookbook_private

#: An assistant message as the server returned it: (content, ((name, arguments), ...)).
MessageKey = tuple[str, tuple[tuple[str, str], ...]]


def message_key(content: str | None, calls: Sequence[tuple[str, str]]) -> MessageKey:
    return (content or "", tuple((name, arguments) for name, arguments in calls))


def _digest(tokens: Sequence[int]) -> bytes:
    return hashlib.blake2b(array("q", tokens).tobytes(), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Sampled:
    tokens: array[int]  # of "q": compact, as thousands of replies are kept
    reasoning: str


class SampledTurns:
    """The replies sampled lately (at most `size`), by the tokens before them and their
    message."""

    def __init__(self, size: int = 8192) -> None:
        self.size = size
        self._items: OrderedDict[tuple[bytes, MessageKey], Sampled] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def put(
        self, before: Sequence[int], key: MessageKey, tokens: Sequence[int], reasoning: str = ""
    ) -> None:
        item = (_digest(before), key)
        self._items[item] = Sampled(array("q", tokens), reasoning)
        self._items.move_to_end(item)
        if len(self._items) > self.size:
            self._items.popitem(last=False)

    def get(
        self, before: Sequence[int], key: MessageKey, reasoning: str | None
    ) -> list[int] | None:
        """The sampled tokens of this message after `before`; `reasoning` None matches any
        (agents often drop it from history), else it must be the reasoning returned."""
        found = self._items.get((_digest(before), key))
        if found is None or (reasoning is not None and reasoning != found.reasoning):
            return None
        return found.tokens.tolist()


def splices(renderer: Any) -> bool:
    """Whether `renderer` builds prompts message by message (the cookbook's own loop), so a
    sampled reply can take a message's place."""
    from tinker_cookbook.renderers.base import Renderer

    return (
        isinstance(renderer, Renderer)
        and type(renderer).build_generation_prompt is Renderer.build_generation_prompt
    )


def build_prompt(
    renderer: Any,
    messages: list[Any],
    keys: Sequence[MessageKey | None],
    reasonings: Sequence[str | None],
    turns: SampledTurns,
    ends: Sequence[int],
) -> tinker.ModelInput:
    """The generation prompt of `messages`, as `renderer.build_generation_prompt` builds it,
    except that an assistant message with a key whose sampled tokens `turns` holds after the
    tokens so far is those tokens (and the renderer's end of turn if they lack an end).
    Needs `splices(renderer)`."""
    from tinker_cookbook.renderers.base import RenderContext

    tokens: list[int] = cookbook_private.bos_tokens(renderer)
    chunks: list[Any] = []  # non-text chunks (images) keep their place
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    turn_start = cookbook_private.last_assistant_turn_start(renderer, messages)
    ends_set = set(ends)

    def add(chunk: Any) -> None:
        if isinstance(chunk, tinker.EncodedTextChunk):
            tokens.extend(chunk.tokens)
        else:
            flush()
            chunks.append(chunk)

    def flush() -> None:
        if tokens:
            chunks.append(tinker.EncodedTextChunk(tokens=list(tokens)))
            tokens.clear()

    so_far: list[int] = list(tokens)  # every token so far, for the lookups
    for idx, message in enumerate(messages):
        ctx = RenderContext(
            idx=idx,
            is_last=idx == len(messages) - 1,
            prev_message=messages[idx - 1] if idx > 0 else None,
            next_message=messages[idx + 1] if idx + 1 < len(messages) else None,
            last_user_index=last_user,
            in_last_assistant_turn=idx >= turn_start,
        )
        rendered = renderer.render_message(message, ctx)
        header = rendered.header
        if header is not None and getattr(header, "tokens", None) != []:
            add(header)
            so_far.extend(getattr(header, "tokens", []))
        key = keys[idx]
        sampled = (
            turns.get(so_far, key, reasonings[idx]) if key is not None and len(turns) else None
        )
        if sampled is not None:
            if not sampled or sampled[-1] not in ends_set:
                own = [t for c in rendered.output for t in getattr(c, "tokens", [])]
                stop = next((i for i, t in enumerate(own) if t in ends_set), None)
                if stop is not None:
                    sampled = sampled + own[stop:]
            add(tinker.EncodedTextChunk(tokens=sampled))
            so_far.extend(sampled)
            continue
        for chunk in rendered.output:
            if isinstance(chunk, tinker.EncodedTextChunk) and not chunk.tokens:
                continue
            add(chunk)
            so_far.extend(getattr(chunk, "tokens", []))
    suffix = cookbook_private.generation_suffix(
        renderer,
        "assistant",
        RenderContext(
            idx=len(messages),
            is_last=True,
            prev_message=messages[-1] if messages else None,
            last_user_index=last_user,
            in_last_assistant_turn=True,
        ),
    )
    tokens.extend(suffix)
    flush()
    return tinker.ModelInput(chunks=chunks)
