"""A tinker-cookbook `Renderer` that renders with the tokenizer's own chat template.

For a Hugging Face model folder run on the local backend (``--base-model /path/to/model``)
there is no cookbook renderer written for it, but its tokenizer carries the chat template the
model was trained with. `ChatTemplateRenderer` renders conversations with
``tokenizer.apply_chat_template`` and parses sampled responses by cutting at the model's
end-of-turn token (found by rendering a probe conversation) or its end-of-sequence token.

Use `renderer_for_tokenizer(tokenizer)`: the chat-template renderer when the tokenizer has a
chat template, otherwise the cookbook's ``role_colon`` renderer.

Supervised examples are built by rendering growing prefixes of the conversation: the tokens a
message adds are its span, and an assistant message's span after its generation prompt is
what it trains on (cut after its end-of-turn token). Templates that rewrite history (strip
reasoning from earlier turns, say) do not have such prefixes; for them only the last assistant
message can be trained, and other `TrainOnWhat` modes raise `RendererError`. Messages are
text only (text parts are joined, thinking parts are passed as `reasoning_content`; tool
calls are not rendered).
"""

from __future__ import annotations

from typing import Any

import tinker
import torch
from tinker_cookbook.exceptions import RendererError
from tinker_cookbook.renderers.base import (
    Message,
    ParseTermination,
    RenderContext,
    RenderedMessage,
    Renderer,
    Role,
    TrainOnWhat,
    get_text_content,
)

__all__ = ["ChatTemplateRenderer", "renderer_for_tokenizer"]

_PROBE = "zqxjkv"


def _ids(encoded: Any) -> list[int]:
    """apply_chat_template's token output as a flat list (it may be a dict or nested)."""
    if hasattr(encoded, "keys") and "input_ids" in encoded:
        encoded = encoded["input_ids"]
    if hasattr(encoded, "tolist"):
        encoded = encoded.tolist()
    encoded = list(encoded)
    if encoded and isinstance(encoded[0], list):
        encoded = encoded[0]
    return [int(t) for t in encoded]


class ChatTemplateRenderer(Renderer):
    """Renders with ``tokenizer.apply_chat_template``; parses at the end-of-turn token."""

    def __init__(self, tokenizer: Any, stop_token_ids: list[int] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise RendererError(
                f"{type(tokenizer).__name__} has no chat template; use renderer_for_tokenizer, "
                "which falls back to role_colon"
            )
        super().__init__(tokenizer)
        self._end_of_turn = self._find_end_of_turn()
        eos = getattr(tokenizer, "eos_token_id", None)
        self._eos = None if eos is None else int(eos)
        if stop_token_ids is not None:
            stops = [int(t) for t in stop_token_ids]
        else:
            stops = [t for t in (self._end_of_turn, self._eos) if t is not None]
        if not stops:
            raise RendererError("the tokenizer has neither an end-of-turn nor an EOS token")
        self._stops = list(dict.fromkeys(stops))

    def __reduce__(self) -> tuple[Any, ...]:
        return (ChatTemplateRenderer, (self.tokenizer, self._stops))

    # -- template access --------------------------------------------------------------------
    @staticmethod
    def _hf_message(message: Message) -> dict[str, str]:
        """The message as a template reads it; reasoning (thinking parts) as
        `reasoning_content`, which thinking templates render or drop as they were trained."""
        out = {"role": message["role"], "content": get_text_content(message)}
        content = message["content"]
        if isinstance(content, list):
            thinking = "".join(p["thinking"] for p in content if p["type"] == "thinking")
            if thinking:
                out["reasoning_content"] = thinking
        return out

    def _render(self, messages: list[Message], add_generation_prompt: bool) -> list[int]:
        if not messages:
            return []
        try:
            encoded = self.tokenizer.apply_chat_template(
                [self._hf_message(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                tokenize=True,
                return_dict=False,
            )
        except Exception as exc:
            raise RendererError(f"the chat template failed to render: {exc}") from exc
        return _ids(encoded)

    def _find_end_of_turn(self) -> int | None:
        """The first special token the template writes after an assistant message's text."""
        try:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}],
                tokenize=False,
            )
        except Exception:
            return None
        if not isinstance(text, str) or _PROBE not in text:
            return None
        after = text.split(_PROBE, 1)[1]
        special = set(getattr(self.tokenizer, "all_special_ids", []) or [])
        added = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
        special |= {int(i) for i, tok in added.items() if getattr(tok, "special", False)}
        for token in self.tokenizer.encode(after, add_special_tokens=False):
            if token in special:
                return int(token)
        return None

    # -- Renderer interface -----------------------------------------------------------------
    @property
    def has_extension_property(self) -> bool:
        return False

    def get_stop_sequences(self) -> list[int]:
        """The end-of-turn token and the EOS token (token ids)."""
        return list(self._stops)

    def render_message(self, message: Message, ctx: RenderContext) -> RenderedMessage:
        """The message rendered alone by the template (as output; no separate header). The
        conversation-level methods below do not use it: templates render whole chats."""
        tokens = self._render([message], add_generation_prompt=False)
        return RenderedMessage(header=None, output=[tinker.EncodedTextChunk(tokens=tokens)])

    def build_generation_prompt(
        self, messages: list[Message], role: Role = "assistant", prefill: str | None = None
    ) -> tinker.ModelInput:
        if role != "assistant":
            raise RendererError("chat templates only open assistant turns for generation")
        tokens = self._render(messages, add_generation_prompt=True)
        if prefill:
            tokens += self.tokenizer.encode(prefill, add_special_tokens=False)
        return tinker.ModelInput.from_ints(tokens)

    def build_supervised_example(
        self,
        messages: list[Message],
        train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE,
    ) -> tuple[tinker.ModelInput, torch.Tensor]:
        full = self._render(messages, add_generation_prompt=False)
        spans = self._message_spans(messages, full)
        weights = [0.0] * len(full)
        if spans is None:
            if (
                train_on_what
                not in (
                    TrainOnWhat.LAST_ASSISTANT_MESSAGE,
                    TrainOnWhat.LAST_ASSISTANT_TURN,
                )
                or not messages
                or messages[-1]["role"] != "assistant"
            ):
                raise RendererError(
                    "this chat template rewrites earlier turns, so only the last assistant "
                    f"message can be trained (asked: {train_on_what})"
                )
            prompt = self._render(messages[:-1], add_generation_prompt=True)
            if full[: len(prompt)] != prompt:
                raise RendererError(
                    "the chat template's generation prompt is not a prefix of "
                    "the rendered conversation"
                )
            self._weigh_output(weights, full, len(prompt), len(full))
            return tinker.ModelInput.from_ints(full), torch.tensor(weights)

        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        for i, (message, (start, body, end)) in enumerate(zip(messages, spans, strict=True)):
            is_assistant = message["role"] == "assistant"
            match train_on_what:
                case TrainOnWhat.LAST_ASSISTANT_MESSAGE:
                    trained = is_assistant and i == len(messages) - 1
                case TrainOnWhat.LAST_ASSISTANT_TURN:
                    trained = is_assistant and i > last_user
                case TrainOnWhat.ALL_ASSISTANT_MESSAGES:
                    trained = is_assistant
                case TrainOnWhat.ALL_MESSAGES | TrainOnWhat.ALL_TOKENS:
                    trained = True
                case TrainOnWhat.ALL_USER_AND_SYSTEM_MESSAGES:
                    trained = message["role"] in ("user", "system")
                case TrainOnWhat.CUSTOMIZED:
                    trained = bool(message.get("trainable", False))
                case _:
                    raise RendererError(f"Unknown train_on_what: {train_on_what}")
            if not trained:
                continue
            if train_on_what == TrainOnWhat.ALL_TOKENS:
                weights[start:end] = [1.0] * (end - start)
            elif is_assistant:
                self._weigh_output(weights, full, body, end)
            else:
                weights[body:end] = [1.0] * (end - body)
        if train_on_what == TrainOnWhat.ALL_TOKENS:
            weights = [1.0] * len(full)
        return tinker.ModelInput.from_ints(full), torch.tensor(weights)

    def _message_spans(
        self, messages: list[Message], full: list[int]
    ) -> list[tuple[int, int, int]] | None:
        """Per message (start, body start, end) in `full`, or None if prefixes do not nest.

        The body of an assistant message starts after its generation prompt."""
        spans: list[tuple[int, int, int]] = []
        start = 0
        for i, message in enumerate(messages):
            end_tokens = self._render(messages[: i + 1], add_generation_prompt=False)
            if full[: len(end_tokens)] != end_tokens or len(end_tokens) < start:
                return None
            body = start
            if message["role"] == "assistant":
                prompt = self._render(messages[:i], add_generation_prompt=True)
                if full[: len(prompt)] != prompt:
                    return None
                body = max(start, len(prompt))
            spans.append((start, body, len(end_tokens)))
            start = len(end_tokens)
        return spans

    def _weigh_output(self, weights: list[float], full: list[int], body: int, end: int) -> None:
        """Weight an assistant message's tokens through its first stop token."""
        stop_at = end
        for j in range(body, end):
            if full[j] in self._stops:
                stop_at = j + 1
                break
        weights[body:stop_at] = [1.0] * (stop_at - body)

    def parse_response(self, response: list[int]) -> tuple[Message, ParseTermination]:
        """The text before the first stop token; STOP_SEQUENCE at the end-of-turn token, EOS at
        the end-of-sequence token, MALFORMED when neither came (truncated)."""
        cut = next((i for i, t in enumerate(response) if t in self._stops), None)
        if cut is None:
            text = self.tokenizer.decode(response, skip_special_tokens=True)
            return Message(role="assistant", content=text.strip()), ParseTermination.MALFORMED
        text = self.tokenizer.decode(response[:cut], skip_special_tokens=True)
        termination = (
            ParseTermination.STOP_SEQUENCE
            if response[cut] == self._end_of_turn or self._end_of_turn is None
            else ParseTermination.EOS
        )
        return Message(role="assistant", content=text.strip()), termination


def renderer_for_tokenizer(tokenizer: Any) -> Renderer:
    """The renderer for a local model's tokenizer: its chat template when it has one, else
    tinker-cookbook's ``role_colon``."""
    if getattr(tokenizer, "chat_template", None):
        return ChatTemplateRenderer(tokenizer)
    from tinker_cookbook.renderers import get_renderer

    return get_renderer("role_colon", tokenizer)
