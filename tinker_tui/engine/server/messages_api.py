"""Anthropic's Messages API (`POST /v1/messages`) on the chat-completions path.

A request is translated into a `ChatCompletionRequest` (system text, `tool_use` blocks as
tool calls, `tool_result` blocks as tool messages, `thinking` blocks as reasoning, tools by
their `input_schema`) and sampled by the same handler, so it renders with the policy's own
tool format and an echoed reply extends its sampled tokens exactly; the chat choice is then
written back as a Message (or its server-sent events). A `tool_use` block's `input` is a
JSON object, so the arguments text the model wrote is remembered by call id and given back
when the same input is echoed: the echoed turn matches its sampled tokens.

Honoured: model, max_tokens, messages, system, tools, tool_choice (auto, any, tool, none,
disable_parallel_tool_use), temperature, top_p, stop_sequences, stream, metadata (kept by
nobody). Anything else is refused with Anthropic's error shape (a block key whose value is
null, as a client's dumped block carries, says nothing and is let through).
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tinker_tui.engine.server.handler import Prepared, usage
from tinker_tui.engine.server.schema import ChatCompletionRequest, RequestError, validation_error

_ERROR_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class MessagesTool(_Strict):
    name: str
    description: str = ""
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None


class MessagesToolChoice(_Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class MessagesMessage(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class MessagesRequest(_Strict):
    model: str
    max_tokens: int = Field(ge=1)
    messages: list[MessagesMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[MessagesTool] | None = None
    tool_choice: MessagesToolChoice | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    metadata: dict[str, Any] | None = None


def error_body(exc: RequestError) -> dict[str, Any]:
    kind = _ERROR_KINDS.get(exc.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": exc.message}}


def _blocks_text(blocks: Any, where: str) -> str:
    """The text of a `str` or a list of text blocks (a system prompt, a tool result)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise RequestError(400, "expected a string or a list of text blocks", param=where)
    parts = []
    for j, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise RequestError(
                400,
                f"unsupported block type {str(kind)[:40]!r} here: only text blocks",
                param=f"{where}.{j}",
            )
        _only(block, {"type", "text", "citations"}, f"{where}.{j}")
        parts.append(str(block.get("text", "")))
    return "".join(parts)


def _only(block: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(k for k in set(block) - allowed if block[k] is not None)
    if extra:
        raise RequestError(400, f"unsupported key {extra[0][:40]!r} in a block", param=where)
    if block.get("citations"):
        raise RequestError(400, "citations are not supported", param=f"{where}.citations")


class MessagesTranslator:
    """Requests in, chat requests out; chat choices in, Messages out. Remembers the
    arguments text of the calls it returned (by call id), so an echoed `tool_use` is the
    call as sampled."""

    def __init__(self, size: int = 8192) -> None:
        self._arguments: OrderedDict[str, str] = OrderedDict()
        self.size = size

    def request(self, raw: bytes) -> tuple[MessagesRequest, ChatCompletionRequest]:
        try:
            body = MessagesRequest.model_validate_json(raw)
        except ValidationError as exc:
            raise validation_error(exc) from None
        messages: list[dict[str, Any]] = []
        if body.system is not None:
            messages.append({"role": "system", "content": _blocks_text(body.system, "system")})
        for i, m in enumerate(body.messages):
            messages.extend(self._message(m, f"messages.{i}"))
        chat: dict[str, Any] = {
            "model": body.model,
            "messages": messages,
            "max_tokens": body.max_tokens,
        }
        if body.tools:
            chat["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                }
                for t in body.tools
            ]
        choice = body.tool_choice
        if choice is not None:
            if choice.type == "tool":
                if not choice.name:
                    raise RequestError(
                        400, "tool_choice of type 'tool' needs a name", param="tool_choice.name"
                    )
                chat["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
            elif body.tools:
                chat["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[
                    choice.type
                ]
            if choice.disable_parallel_tool_use and body.tools:
                chat["parallel_tool_calls"] = False
        for name in ("temperature", "top_p"):
            if getattr(body, name) is not None:
                chat[name] = getattr(body, name)
        if body.stop_sequences:
            chat["stop"] = body.stop_sequences
        try:
            return body, ChatCompletionRequest.model_validate(chat)
        except ValidationError as exc:
            raise validation_error(exc) from None

    def _message(self, m: MessagesMessage, where: str) -> list[dict[str, Any]]:
        if isinstance(m.content, str):
            return [{"role": m.role, "content": m.content}]
        if m.role == "assistant":
            text, reasoning, calls = [], [], []
            for j, block in enumerate(m.content):
                at, kind = f"{where}.content.{j}", block.get("type")
                if kind == "text":
                    _only(block, {"type", "text", "citations"}, at)
                    text.append(str(block.get("text", "")))
                elif kind == "thinking":
                    _only(block, {"type", "thinking", "signature"}, at)
                    reasoning.append(str(block.get("thinking", "")))
                elif kind == "tool_use":
                    _only(block, {"type", "id", "name", "input", "caller"}, at)
                    calls.append(self._call(block, at))
                else:
                    raise RequestError(
                        400,
                        f"unsupported block type {str(kind)[:40]!r} in an assistant "
                        "message (text, thinking, tool_use)",
                        param=f"{at}.type",
                    )
            out: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
            if calls:
                out["tool_calls"] = calls
            if reasoning:
                out["reasoning_content"] = "".join(reasoning)
            if out["content"] is None and not calls:
                out["content"] = ""
            return [out]
        results, text = [], []
        for j, block in enumerate(m.content):
            at, kind = f"{where}.content.{j}", block.get("type")
            if kind == "text":
                _only(block, {"type", "text", "citations"}, at)
                text.append(str(block.get("text", "")))
            elif kind == "tool_result":
                _only(block, {"type", "tool_use_id", "content", "is_error"}, at)
                content = _blocks_text(block.get("content", ""), f"{at}.content")
                if block.get("is_error"):
                    content = f"Error: {content}"
                results.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(block.get("tool_use_id")),
                        "content": content,
                    }
                )
            else:
                raise RequestError(
                    400,
                    f"unsupported block type {str(kind)[:40]!r} in a user message "
                    "(text, tool_result)",
                    param=f"{at}.type",
                )
        return results + ([{"role": "user", "content": "".join(text)}] if text else [])

    def _call(self, block: dict[str, Any], where: str) -> dict[str, Any]:
        call_id, name, given = block.get("id"), block.get("name"), block.get("input")
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise RequestError(400, "a tool_use block needs an id and a name", param=where)
        if not isinstance(given, dict):
            raise RequestError(
                400, "a tool_use block's input must be an object", param=f"{where}.input"
            )
        arguments = self._arguments.get(call_id)
        if arguments is None or _loads(arguments) != given:
            arguments = json.dumps(given, ensure_ascii=False)
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    def message(self, choice: dict[str, Any], prepared: Prepared, model: str) -> dict[str, Any]:
        """The chat choice as a Message, its token fields kept (extension fields)."""
        m = choice["message"]
        content: list[dict[str, Any]] = []
        if m.get("reasoning_content"):
            content.append(
                {"type": "thinking", "thinking": m["reasoning_content"], "signature": ""}
            )
        if m.get("content"):
            content.append({"type": "text", "text": m["content"]})
        for call in m.get("tool_calls") or []:
            arguments = call["function"]["arguments"]
            parsed = _loads(arguments)
            self._arguments[call["id"]] = arguments
            if len(self._arguments) > self.size:
                self._arguments.popitem(last=False)
            content.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "input": parsed if isinstance(parsed, dict) else {},
                }
            )
        counted = usage(prepared, [choice])
        return {
            "id": f"msg_{uuid.uuid4().hex}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": _STOP_REASONS.get(choice["finish_reason"], "end_turn"),
            "stop_sequence": None,
            "usage": {
                "input_tokens": counted["prompt_tokens"],
                "output_tokens": counted["completion_tokens"],
            },
            "prompt_token_ids": choice["prompt_token_ids"],
            "token_ids": choice["token_ids"],
            "token_logprobs": choice["token_logprobs"],
            "policy_version": choice["policy_version"],
        }


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def sse(message: dict[str, Any]) -> bytes:
    """The Message as Anthropic's server-sent events (sampling returns whole replies, so
    each block is one delta)."""
    events: list[bytes] = []

    def emit(kind: str, data: dict[str, Any]) -> None:
        payload = json.dumps({"type": kind, **data}, separators=(",", ":"), ensure_ascii=False)
        events.append(f"event: {kind}\ndata: {payload}\n\n".encode())

    tokens = {
        k: message[k] for k in ("prompt_token_ids", "token_ids", "token_logprobs", "policy_version")
    }
    start = {k: v for k, v in message.items() if k not in tokens}
    emit(
        "message_start",
        {
            "message": {
                **start,
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 0},
            }
        },
    )
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            emit("content_block_start", {"index": i, "content_block": {"type": "text", "text": ""}})
            emit(
                "content_block_delta",
                {"index": i, "delta": {"type": "text_delta", "text": block["text"]}},
            )
        elif block["type"] == "thinking":
            emit(
                "content_block_start",
                {
                    "index": i,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            )
            emit(
                "content_block_delta",
                {"index": i, "delta": {"type": "thinking_delta", "thinking": block["thinking"]}},
            )
            emit(
                "content_block_delta",
                {"index": i, "delta": {"type": "signature_delta", "signature": ""}},
            )
        else:
            emit(
                "content_block_start",
                {
                    "index": i,
                    "content_block": {
                        "type": "tool_use",
                        "id": block["id"],
                        "name": block["name"],
                        "input": {},
                    },
                },
            )
            emit(
                "content_block_delta",
                {
                    "index": i,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(block["input"], ensure_ascii=False),
                    },
                },
            )
        emit("content_block_stop", {"index": i})
    emit(
        "message_delta",
        {
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
            **tokens,
        },
    )
    emit("message_stop", {})
    return b"".join(events)
