"""OpenAI's Responses API (`POST /v1/responses`) on the chat-completions path.

A request's `instructions` and `input` items (messages, `function_call`,
`function_call_output`, `reasoning`) are translated into a `ChatCompletionRequest` and
sampled by the same handler, so tools render in the policy's own format and an echoed
output (reasoning, message and calls of one reply, as `input += response.output` sends
them) extends its sampled tokens exactly. The chat choice is written back as a Response:
a `reasoning` item (its text as `reasoning_text` content), a `message` item, and one
`function_call` item per call; or as the Responses stream's events.

Honoured: model, input, instructions, tools (function), tool_choice, parallel_tool_calls,
max_output_tokens, temperature, top_p, stream, store (nothing is stored: there is no
`previous_response_id`), text.format of type "text". Anything else is refused (400); an item
key whose value is null says nothing and is let through.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tinker_tui.engine.server.handler import Prepared, usage
from tinker_tui.engine.server.schema import ChatCompletionRequest, RequestError, validation_error


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ResponsesTool(_Strict):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamedFunction(_Strict):
    type: Literal["function"]
    name: str


class TextFormat(_Strict):
    type: Literal["text"]


class TextConfig(_Strict):
    format: TextFormat | None = None


class ResponsesRequest(_Strict):
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stream: bool | None = None
    store: bool | None = None
    text: TextConfig | None = None


def _parts_text(content: Any, kinds: set[str], where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(400, "content must be a string or a list of parts", param=where)
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise RequestError(
                400,
                f"unsupported content part type {str(kind)[:40]!r} (only {', '.join(sorted(kinds))})",
                param=f"{where}.{j}.type",
            )
        _only(part, {"type", "text", "annotations", "logprobs"}, f"{where}.{j}")
        out.append(str(part.get("text", "")))
    return "".join(out)


def _only(item: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(k for k in set(item) - allowed if item[k] is not None)
    if extra:
        raise RequestError(
            400, f"unsupported parameter: {where}.{extra[0][:40]}", param=f"{where}.{extra[0][:40]}"
        )
    if item.get("annotations"):
        raise RequestError(400, "annotations are not supported", param=f"{where}.annotations")


def to_chat(raw: bytes) -> tuple[ResponsesRequest, ChatCompletionRequest]:
    try:
        body = ResponsesRequest.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc) from None
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    items = [{"role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    pending: dict[str, Any] | None = None  # the assistant turn being put together

    def flush() -> None:
        nonlocal pending
        if pending is not None:
            if pending["content"] is None and not pending.get("tool_calls"):
                pending["content"] = ""
            messages.append(pending)
            pending = None

    def assistant() -> dict[str, Any]:
        nonlocal pending
        if pending is None:
            pending = {"role": "assistant", "content": None}
        return pending

    for i, item in enumerate(items):
        where = f"input.{i}"
        if not isinstance(item, dict):
            raise RequestError(400, "an input item must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            _only(item, {"type", "role", "content", "id", "status"}, where)
            role = item.get("role")
            if role == "assistant":
                text = _parts_text(item.get("content"), {"output_text"}, f"{where}.content")
                turn = assistant()
                if turn["content"] is not None or turn.get("tool_calls"):
                    flush()
                    turn = assistant()
                turn["content"] = text
            elif role in ("user", "system", "developer"):
                flush()
                text = _parts_text(item.get("content"), {"input_text"}, f"{where}.content")
                messages.append({"role": role, "content": text})
            else:
                raise RequestError(
                    400, f"unsupported role {str(role)[:40]!r}", param=f"{where}.role"
                )
        elif kind == "reasoning":
            _only(item, {"type", "id", "summary", "content", "encrypted_content", "status"}, where)
            if item.get("encrypted_content"):
                raise RequestError(
                    400, "encrypted reasoning is not supported", param=f"{where}.encrypted_content"
                )
            content = item.get("content") or item.get("summary") or []
            text = _parts_text(content, {"reasoning_text", "summary_text"}, f"{where}.content")
            if pending is not None:
                flush()
            assistant()["reasoning_content"] = text
        elif kind == "function_call":
            _only(item, {"type", "id", "call_id", "name", "arguments", "status"}, where)
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
                raise RequestError(
                    400, "a function_call needs call_id, name and arguments", param=where
                )
            assistant().setdefault("tool_calls", []).append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                }
            )
        elif kind == "function_call_output":
            _only(item, {"type", "id", "call_id", "output", "status"}, where)
            flush()
            output = _parts_text(item.get("output", ""), {"input_text"}, f"{where}.output")
            messages.append(
                {"role": "tool", "tool_call_id": str(item.get("call_id")), "content": output}
            )
        else:
            raise RequestError(
                400, f"unsupported input item type {str(kind)[:40]!r}", param=f"{where}.type"
            )
    flush()
    chat: dict[str, Any] = {"model": body.model, "messages": messages}
    if body.tools:
        chat["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description or "",
                    "parameters": t.parameters or {"type": "object", "properties": {}},
                    **({"strict": t.strict} if t.strict is not None else {}),
                },
            }
            for t in body.tools
        ]
    if isinstance(body.tool_choice, NamedFunction):
        chat["tool_choice"] = {"type": "function", "function": {"name": body.tool_choice.name}}
    elif body.tool_choice is not None:
        chat["tool_choice"] = body.tool_choice
    for name in ("parallel_tool_calls", "temperature", "top_p"):
        if getattr(body, name) is not None:
            chat[name] = getattr(body, name)
    if body.max_output_tokens is not None:
        chat["max_completion_tokens"] = body.max_output_tokens
    try:
        return body, ChatCompletionRequest.model_validate(chat)
    except ValidationError as exc:
        raise validation_error(exc) from None


def response(
    body: ResponsesRequest, choice: dict[str, Any], prepared: Prepared, *, status: str = ""
) -> dict[str, Any]:
    """The chat choice as a Response object, its token fields kept (extension fields)."""
    m = choice["message"]
    output: list[dict[str, Any]] = []
    if m.get("reasoning_content"):
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_{uuid.uuid4().hex}",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": m["reasoning_content"]}],
            }
        )
    if m.get("content") or not m.get("tool_calls"):
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex}",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": m.get("content") or "", "annotations": []}
                ],
            }
        )
    for call in m.get("tool_calls") or []:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex}",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    counted = usage(prepared, [choice])
    cut = choice["finish_reason"] == "length"
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status or ("incomplete" if cut else "completed"),
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": body.model,
        "instructions": body.instructions,
        "output": output,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "tool_choice": body.tool_choice.model_dump()
        if isinstance(body.tool_choice, NamedFunction)
        else body.tool_choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_output_tokens": body.max_output_tokens,
        "metadata": {},
        "usage": {
            "input_tokens": counted["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": counted["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": counted["total_tokens"],
        },
        "prompt_token_ids": choice["prompt_token_ids"],
        "token_ids": choice["token_ids"],
        "token_logprobs": choice["token_logprobs"],
        "policy_version": choice["policy_version"],
    }


def sse(done: dict[str, Any]) -> bytes:
    """The Response as the Responses stream's events (sampling returns whole replies, so each
    item's text is one delta)."""
    events: list[bytes] = []
    seq = 0

    def emit(kind: str, data: dict[str, Any]) -> None:
        nonlocal seq
        payload = json.dumps(
            {"type": kind, "sequence_number": seq, **data},
            separators=(",", ":"),
            ensure_ascii=False,
        )
        events.append(f"event: {kind}\ndata: {payload}\n\n".encode())
        seq += 1

    emit(
        "response.created",
        {"response": {**done, "status": "in_progress", "output": [], "incomplete_details": None}},
    )
    for i, item in enumerate(done["output"]):
        at = {"item_id": item["id"], "output_index": i}
        if item["type"] == "message":
            emit(
                "response.output_item.added",
                {"output_index": i, "item": {**item, "status": "in_progress", "content": []}},
            )
            part = item["content"][0]
            emit(
                "response.content_part.added",
                {**at, "content_index": 0, "part": {**part, "text": ""}},
            )
            emit(
                "response.output_text.delta",
                {**at, "content_index": 0, "delta": part["text"], "logprobs": []},
            )
            emit(
                "response.output_text.done",
                {**at, "content_index": 0, "text": part["text"], "logprobs": []},
            )
            emit("response.content_part.done", {**at, "content_index": 0, "part": part})
        elif item["type"] == "reasoning":
            emit("response.output_item.added", {"output_index": i, "item": {**item, "content": []}})
            text = item["content"][0]["text"]
            emit("response.reasoning_text.delta", {**at, "content_index": 0, "delta": text})
            emit("response.reasoning_text.done", {**at, "content_index": 0, "text": text})
        else:
            emit(
                "response.output_item.added",
                {"output_index": i, "item": {**item, "arguments": "", "status": "in_progress"}},
            )
            emit("response.function_call_arguments.delta", {**at, "delta": item["arguments"]})
            emit(
                "response.function_call_arguments.done",
                {**at, "name": item["name"], "arguments": item["arguments"]},
            )
        emit("response.output_item.done", {"output_index": i, "item": item})
    emit(
        "response.completed" if done["status"] == "completed" else "response.incomplete",
        {"response": done},
    )
    return b"".join(events)
