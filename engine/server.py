"""The in-process OpenAI-compatible server that rollouts call.

FastAPI on uvicorn, in the same process and event loop as the pipeline, bound to
127.0.0.1 on a free port and guarded by a random per-run bearer token (compared in constant
time, never logged; `PolicyServer.token_hint` is the only form of it to show).

Endpoints: `GET /health`, `GET /v1/models`, `GET /v1/models/{model}` and
`POST /v1/chat/completions` (plain, or streamed as server-sent events). The model is the run's
policy by its name, or `NAME@STEP` for the policy of an earlier step while it is still kept.

Every request parameter is honoured or refused with an OpenAI-shaped 4xx error, never
silently dropped: model, messages (system, developer, user, assistant with tool_calls, tool),
n, temperature, top_p, max_tokens / max_completion_tokens, stop, seed, logprobs /
top_logprobs, tools / tool_choice (auto, none, required, or a named function) /
parallel_tool_calls, stream / stream_options.include_usage, and the no-op values
frequency_penalty = presence_penalty = 0 and response_format = {"type": "text"}.

Each choice also carries the exact token ids, their logprobs and the policy version that
produced them, so the trainer never re-tokenizes text (extension fields, on the choice):
`prompt_token_ids` (the rendered prompt, including any prefilled tokens), `token_ids` (the
sampled tokens), `token_logprobs`, `policy_version`. When streaming they arrive on each
choice's final chunk (the one with a finish_reason).

Tools. A renderer with native tool support (Qwen3, Llama 3, gpt-oss, ... in tinker-cookbook)
renders the tool specs and parses tool calls in the model's own format. A renderer without it
(role_colon, which the embedded model uses) gets the text protocol: the tool specs go into the
system message (one JSON object per line after `TOOLS_HEADER`), and a tool call is a JSON
object `{"name": "<tool>", "arguments": {...}}` in the reply; the rest of the reply is the
content. tool_choice "required" and a named function are enforced by prefilling the start
of that JSON object (text protocol only; native renderers refuse them with a 400). Tool
results reach the model as user messages, `TOOL_RESULT` (role_colon's replies end at
"\n\nUser:", so the next prompt then extends exactly what was sampled).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import tinker
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from tinker_tui.engine.retry import BackendTimeoutError

logger = logging.getLogger(__name__)

#: The first line of the system-message section that lists tools (text protocol).
TOOLS_HEADER = "You can call these tools (one JSON object each):"
TOOLS_INSTRUCTION = ('To call a tool, write a JSON object on a line of its own: '
                     '{"name": "<tool name>", "arguments": {<arguments>}}')
#: How a tool result reaches the model in the text protocol: as a user message.
TOOL_RESULT = "Tool {name} returned: {content}"
MAX_N = 128
MAX_STOP = 16
MAX_TOP_LOGPROBS = 20


@dataclass
class SamplingDefaults:
    """Defaults for requests that leave them out; mutable so a live knob change applies to
    the next request."""

    temperature: float = 1.0
    max_tokens: int = 64


class PolicySource(Protocol):
    """What the server needs from the policy (`engine.backend.Policy` is one)."""

    renderer: Any
    version: int

    async def sample(self, prompt: tinker.ModelInput, num_samples: int,
                     sampling_params: tinker.SamplingParams, *, version: int | None = None,
                     top_logprobs: int = 0) -> tuple[tinker.SampleResponse, int]: ...


# ---------------------------------------------------------------------------- request
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class FunctionCallParam(_Strict):
    name: str
    arguments: str


class ToolCallParam(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallParam


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCallParam] | None = None
    tool_call_id: str | None = None
    # Fields an echoed-back response message may carry; only their empty values are accepted.
    refusal: None = None
    function_call: None = None
    audio: None = None
    annotations: list[Any] | None = None
    reasoning_content: str | None = None


class FunctionParam(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    strict: bool | None = None


class ToolParam(_Strict):
    type: Literal["function"]
    function: FunctionParam


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_Strict):
    include_usage: bool = False


class ResponseFormat(_Strict):
    type: str


class ChatCompletionRequest(_Strict):
    """The request fields this server honours; anything else is refused with a 400."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    n: int = Field(default=1, ge=1, le=MAX_N)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[ToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    response_format: ResponseFormat | None = None


class RequestError(Exception):
    """A request the server refuses; becomes an OpenAI-shaped error response."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def openai_error(status: int, message: str, *, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error") -> Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return Response(_dumps(body), status_code=status, media_type="application/json")


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "function-after"}


def _param(loc: Sequence[Any]) -> str | None:
    """`messages.0.content` from a pydantic error location, without the tags pydantic adds
    for union members (`str`, `list[...]`, `NamedToolChoice`, ...)."""
    parts = [str(p) for p in loc if isinstance(p, int) or not (
        str(p) in _TYPE_TAGS or "[" in str(p) or str(p)[:1].isupper())]
    return ".".join(parts) or None


def _validation_error(exc: ValidationError) -> RequestError:
    errors = exc.errors(include_url=False)
    first = errors[0] if errors else {}
    loc = list(first.get("loc", ()))
    param = _param(loc)
    kind = first.get("type", "")
    if kind == "json_invalid":
        return RequestError(400, "request body is not valid JSON")
    if kind == "extra_forbidden":
        return RequestError(400, f"unsupported parameter: {param}", param=param)
    if kind == "missing":
        return RequestError(400, f"missing required parameter: {param}", param=param)
    if not loc:
        return RequestError(400, "the request body must be a JSON object")
    message = first.get("msg", "invalid request")
    return RequestError(400, f"invalid value for {param}: {message}" if param else message,
                        param=param)


# ---------------------------------------------------------------------------- tools
def text_tool_section(tools: Sequence[dict[str, Any]]) -> str:
    """The system-message text that offers tools to a renderer without native tool support."""
    lines = [json.dumps({"name": t["name"], "description": t["description"],
                         "parameters": t["parameters"]}, ensure_ascii=False) for t in tools]
    return "\n".join([TOOLS_HEADER, *lines, TOOLS_INSTRUCTION])


def format_text_tool_call(name: str, arguments: Any) -> str:
    """A tool call in the text protocol, as the model is asked to write it."""
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


def parse_text_tool_calls(text: str, tool_names: Sequence[str], *,
                          limit: int | None = None) -> tuple[str, list[tuple[str, str]]]:
    """Split a reply into content and tool calls written in the text protocol.

    A tool call is a JSON object with a `name` among `tool_names` and an `arguments` object
    (or a string holding one; missing means {}), and no other keys. Returns the rest of the
    text (stripped) and the calls as (name, arguments as a JSON string), at most `limit`."""
    decoder = json.JSONDecoder()
    calls: list[tuple[str, str]] = []
    spans: list[tuple[int, int]] = []
    names = set(tool_names)
    position = 0
    while limit is None or len(calls) < limit:
        start = text.find("{", position)
        if start < 0:
            break
        try:
            obj, end = decoder.raw_decode(text, start)
        except ValueError:
            position = start + 1
            continue
        arguments = obj.get("arguments", {}) if isinstance(obj, dict) else None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = None
        if (isinstance(obj, dict) and obj.get("name") in names and isinstance(arguments, dict)
                and set(obj) <= {"name", "arguments"}):
            calls.append((obj["name"], json.dumps(arguments, ensure_ascii=False)))
            spans.append((start, end))
            position = end
        else:
            position = start + 1
    if not spans:
        return text.strip(), []
    pieces, last = [], 0
    for start, end in spans:
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    content = "\n".join(p.strip() for p in pieces if p.strip())
    return content, calls


def _supports_native_tools(renderer: Any) -> bool:
    try:
        renderer.create_conversation_prefix_with_tools(
            [{"name": "probe", "description": "", "parameters": {"type": "object"}}], "")
    except NotImplementedError:
        return False
    except Exception:
        return True  # it tried: tool support exists, the probe was just odd
    return True


def _content_prefix(renderer: Any) -> str:
    """The text a renderer puts between an assistant header and its content (" " for
    role_colon), which a prefill must start with to render like a sampled reply."""
    from tinker_cookbook.renderers import RenderContext

    marker = "QQmarkerQQ"
    try:
        rendered = renderer.render_message({"role": "assistant", "content": marker},
                                           RenderContext(idx=1, is_last=True))
        tokens = [t for chunk in rendered.output for t in getattr(chunk, "tokens", [])]
        text = renderer.tokenizer.decode(tokens)
    except Exception:
        return ""
    return text.split(marker, 1)[0] if marker in text else ""


@dataclass
class _RendererInfo:
    native_tools: bool
    content_prefix: str
    string_stops: bool
    stops: list[Any]


@dataclass
class _Prepared:
    """A request turned into what the sampler and the response builder need."""

    prompt: tinker.ModelInput
    prompt_tokens: list[int]
    prefill_tokens: list[int]
    prefill_text: str
    tool_names: list[str] = field(default_factory=list)
    tool_mode: Literal["off", "text", "native"] = "off"
    parse_tools: bool = False
    tool_limit: int | None = None


class _ToolTextCache:
    """The exact reply text behind tool calls the server returned, by their call ids, so an
    assistant message echoed back renders as the tokens that were sampled (text protocol)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, ...], tuple[str, list[tuple[str, str]], str]] = \
            OrderedDict()

    def put(self, ids: tuple[str, ...], content: str, calls: list[tuple[str, str]],
            raw: str) -> None:
        self._items[ids] = (content, calls, raw)
        if len(self._items) > self.size:
            self._items.popitem(last=False)

    def get(self, ids: tuple[str, ...], content: str, calls: list[tuple[str, str]]) -> str | None:
        item = self._items.get(ids)
        if item is None:
            return None
        cached_content, cached_calls, raw = item
        same_calls = len(calls) == len(cached_calls) and all(
            a[0] == b[0] and _json_equal(a[1], b[1]) for a, b in zip(calls, cached_calls,
                                                                    strict=True))
        return raw if same_calls and content.strip() == cached_content.strip() else None


def _json_equal(a: str, b: str) -> bool:
    try:
        return json.loads(a) == json.loads(b)
    except ValueError:
        return a == b


# ---------------------------------------------------------------------------- the app
class _BearerAuth:
    """Pure ASGI middleware: every HTTP request needs `Authorization: Bearer <token>`."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = b""
            for key, value in scope["headers"]:
                if key == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self.expected):
                response = openai_error(401, "missing or wrong bearer token",
                                        kind="authentication_error", code="invalid_api_key")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _ChatHandler:
    def __init__(self, policy: PolicySource, *, model_name: str, defaults: SamplingDefaults,
                 max_tokens_limit: int) -> None:
        self.policy = policy
        self.model_name = model_name
        self.defaults = defaults
        self.max_tokens_limit = max_tokens_limit
        self.tool_texts = _ToolTextCache()
        # Rendered prompts by request signature: a group's rollouts send the same messages.
        self._prepared: OrderedDict[tuple[Any, ...], _Prepared] = OrderedDict()
        self.prepared_cache_size = 512
        self._renderer_info: tuple[Any, _RendererInfo] | None = None

    # -- model and renderer -----------------------------------------------------------
    def resolve_version(self, model: str) -> int | None:
        if model == self.model_name:
            return None
        name, sep, step = model.rpartition("@")
        if sep and name == self.model_name and step.isdigit():
            return int(step)
        raise RequestError(404, f"unknown model {model!r}; this run serves {self.model_name!r} "
                                f"(or {self.model_name}@STEP for an earlier policy)",
                           param="model", code="model_not_found")

    def renderer_info(self, renderer: Any) -> _RendererInfo:
        cached = self._renderer_info
        if cached is not None and cached[0] is renderer:
            return cached[1]
        stops = list(renderer.get_stop_sequences())
        info = _RendererInfo(native_tools=_supports_native_tools(renderer),
                             content_prefix=_content_prefix(renderer),
                             string_stops=all(isinstance(s, str) for s in stops), stops=stops)
        self._renderer_info = (renderer, info)
        self._prepared.clear()
        return info

    # -- messages -----------------------------------------------------------------------
    def prepare(self, body: ChatCompletionRequest, renderer: Any) -> _Prepared:
        info = self.renderer_info(renderer)
        tools = [{"name": t.function.name, "description": t.function.description,
                  "parameters": t.function.parameters or {"type": "object", "properties": {}}}
                 for t in body.tools or []]
        for i, tool in enumerate(body.tools or []):
            if tool.function.strict:
                raise RequestError(400, "strict function schemas need constrained decoding, "
                                        "which this server does not offer",
                                   param=f"tools.{i}.function.strict")
        names = [t["name"] for t in tools]
        if len(set(names)) != len(names):
            raise RequestError(400, "tool names must be unique", param="tools")
        choice = body.tool_choice
        if choice is not None and not tools:
            raise RequestError(400, "tool_choice needs tools", param="tool_choice")
        if body.parallel_tool_calls is not None and not tools:
            raise RequestError(400, "parallel_tool_calls needs tools", param="parallel_tool_calls")
        choice = choice or ("auto" if tools else "none")
        forced_name: str | None = None
        if isinstance(choice, NamedToolChoice):
            forced_name = choice.function.name
            if forced_name not in names:
                raise RequestError(400, f"tool_choice names {forced_name!r}, which is not "
                                        f"among the tools", param="tool_choice")
        mode: Literal["off", "text", "native"] = "off"
        if tools:
            mode = "native" if info.native_tools else "text"
        if mode == "native" and (choice == "required" or forced_name):
            raise RequestError(400, "tool_choice 'required' or a named function needs a "
                                    "prefilled tool call, which this server offers only for "
                                    "renderers without native tool support; use 'auto'",
                               param="tool_choice")
        messages = self._convert_messages(body.messages, mode, tools, renderer)
        prefill = ""
        if mode == "text" and choice == "required":
            prefill = info.content_prefix + '{"name": "'
        elif mode == "text" and forced_name:
            prefill = info.content_prefix + f'{{"name": {json.dumps(forced_name)}, "arguments": '
        try:
            prompt = renderer.build_generation_prompt(messages, prefill=prefill or None)
        except RequestError:
            raise
        except Exception as exc:
            raise RequestError(400, f"cannot render these messages with the policy's "
                                    f"renderer: {type(exc).__name__}: {exc}",
                               param="messages") from None
        prompt_tokens = prompt.to_ints()
        prefill_tokens = (renderer.tokenizer.encode(prefill, add_special_tokens=False)
                          if prefill else [])
        return _Prepared(prompt=prompt, prompt_tokens=prompt_tokens,
                         prefill_tokens=prefill_tokens,
                         prefill_text=prefill[len(info.content_prefix):] if prefill else "",
                         tool_names=names, tool_mode=mode,
                         parse_tools=mode != "off" and choice != "none",
                         tool_limit=1 if body.parallel_tool_calls is False else None)

    def _convert_messages(self, messages: Sequence[ChatMessage], mode: str,
                          tools: list[dict[str, Any]], renderer: Any) -> list[dict[str, Any]]:
        from tinker_cookbook.renderers import ToolCall

        out: list[dict[str, Any]] = []
        call_names: dict[str, str] = {}
        for i, m in enumerate(messages):
            where = f"messages.{i}"
            text = self._text(m, where)
            role = "system" if m.role == "developer" else m.role
            if m.annotations:
                raise RequestError(400, "message annotations are not supported",
                                   param=f"{where}.annotations")
            if m.reasoning_content:
                raise RequestError(400, "reasoning_content in a request message is not "
                                        "supported", param=f"{where}.reasoning_content")
            if m.name is not None and role != "tool":
                raise RequestError(400, "name is supported on tool messages only",
                                   param=f"{where}.name")
            if m.tool_calls is not None and role != "assistant":
                raise RequestError(400, "only assistant messages carry tool_calls",
                                   param=f"{where}.tool_calls")
            if m.tool_call_id is not None and role != "tool":
                raise RequestError(400, "only tool messages carry tool_call_id",
                                   param=f"{where}.tool_call_id")
            if text is None and not (role == "assistant" and m.tool_calls):
                raise RequestError(400, f"{m.role} messages need content",
                                   param=f"{where}.content")
            message: dict[str, Any] = {"role": role, "content": text or ""}
            if role == "assistant" and m.tool_calls:
                for call in m.tool_calls:
                    call_names[call.id] = call.function.name
                if mode == "native":
                    message["tool_calls"] = [ToolCall(id=c.id, function=ToolCall.FunctionBody(
                        name=c.function.name, arguments=c.function.arguments))
                        for c in m.tool_calls]
                else:
                    message["content"] = self._assistant_text(text or "", m.tool_calls)
            if role == "tool":
                if m.tool_call_id is None:
                    raise RequestError(400, "tool messages need tool_call_id",
                                       param=f"{where}.tool_call_id")
                name = m.name or call_names.get(m.tool_call_id)
                if mode != "native":
                    # A renderer without a tool format (role_colon stops at "\n\nUser:")
                    # hears tool results from the user, so the next prompt extends the
                    # sampled tokens.
                    message = {"role": "user", "content": TOOL_RESULT.format(
                        name=name or "tool", content=text or "")}
                else:
                    message["tool_call_id"] = m.tool_call_id
                    if name is not None:
                        message["name"] = name
            out.append(message)
        if mode == "text":
            section = text_tool_section(tools)
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{section}"
                          if out[0]["content"] else section}
            else:
                out.insert(0, {"role": "system", "content": section})
        elif mode == "native":
            from tinker_cookbook.renderers import get_text_content

            system = ""
            if out and out[0]["role"] == "system":
                system = get_text_content(out.pop(0))
            prefix = renderer.create_conversation_prefix_with_tools(tools, system)
            out = list(prefix) + out
        return out

    @staticmethod
    def _text(m: ChatMessage, where: str) -> str | None:
        if m.content is None or isinstance(m.content, str):
            return m.content
        parts = []
        for j, part in enumerate(m.content):
            if part.get("type") != "text" or not isinstance(part.get("text"), str) \
                    or set(part) - {"type", "text"}:
                raise RequestError(400, f"unsupported content part (only text parts are "
                                        f"supported): {str(part.get('type'))[:40]!r}",
                                   param=f"{where}.content.{j}")
            parts.append(part["text"])
        return "".join(parts)

    def _assistant_text(self, content: str, tool_calls: Sequence[ToolCallParam]) -> str:
        """An assistant message with tool calls in the text protocol: the exact text that was
        sampled when the server made these calls, else a canonical rendering."""
        calls = [(c.function.name, c.function.arguments) for c in tool_calls]
        raw = self.tool_texts.get(tuple(c.id for c in tool_calls), content, calls)
        if raw is not None:
            return raw
        lines = [content] if content else []
        for name, arguments in calls:
            try:
                parsed = json.loads(arguments)
            except ValueError:
                parsed = arguments
            lines.append(format_text_tool_call(name, parsed))
        return "\n".join(lines)

    # -- sampling -----------------------------------------------------------------------
    async def complete(self, body: ChatCompletionRequest) -> tuple[list[dict[str, Any]],
                                                                    _Prepared, int]:
        version = self.resolve_version(body.model)
        max_tokens = body.max_completion_tokens or body.max_tokens or self.defaults.max_tokens
        if max_tokens > self.max_tokens_limit:
            param = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
            raise RequestError(400, f"max_tokens {max_tokens} exceeds this server's limit of "
                                    f"{self.max_tokens_limit}", param=param)
        if body.top_logprobs and not body.logprobs:
            raise RequestError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(body, name) not in (None, 0, 0.0):
                raise RequestError(400, f"unsupported parameter: {name} (only 0 is supported)",
                                   param=name)
        if body.response_format is not None and body.response_format.type != "text":
            raise RequestError(400, f"unsupported parameter: response_format of type "
                                    f"{body.response_format.type!r} (only 'text')",
                               param="response_format")
        if body.stream_options is not None and not body.stream:
            raise RequestError(400, "stream_options needs stream=true", param="stream_options")
        user_stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        if len(user_stop) > MAX_STOP or any(not s for s in user_stop):
            raise RequestError(400, f"stop must be at most {MAX_STOP} non-empty strings",
                               param="stop")
        renderer = self.policy.renderer
        info = self.renderer_info(renderer)
        key = _signature(body)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self.prepare(body, renderer)
            self._prepared[key] = prepared
            if len(self._prepared) > self.prepared_cache_size:
                self._prepared.popitem(last=False)
        else:
            self._prepared.move_to_end(key)
        if info.string_stops:
            stop: list[Any] = info.stops + user_stop
        else:
            stop = info.stops  # token ids; user strings are applied to the samples below
        params = tinker.SamplingParams(
            max_tokens=max_tokens,
            temperature=self.defaults.temperature if body.temperature is None
            else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            seed=body.seed,
            stop=stop or None,
        )
        response, used_version = await self._sample(prepared.prompt, body.n, params, version,
                                                    body.top_logprobs or 0)
        choices = [self._choice(i, seq, prepared, body, used_version, user_stop, renderer)
                   for i, seq in enumerate(response.sequences)]
        return choices, prepared, used_version

    async def _sample(self, prompt: tinker.ModelInput, n: int, params: tinker.SamplingParams,
                      version: int | None, top_logprobs: int) -> tuple[Any, int]:
        from tinker_tui.engine.policy import UnknownVersionError

        policy = self.policy
        try:
            if hasattr(policy, "sample"):
                return await policy.sample(prompt, n, params, version=version,
                                           top_logprobs=top_logprobs)
            # A bare policy object: its current sampling client only.
            if version not in (None, policy.version):
                raise UnknownVersionError(f"policy version {version} is not available")
            extra = {"topk_sample_logprobs": top_logprobs} if top_logprobs else {}
            used = policy.version
            result = await policy.sampling_client.sample(prompt=prompt, num_samples=n,
                                                         sampling_params=params, **extra)
            return result, used
        except UnknownVersionError as exc:
            raise RequestError(404, str(exc), param="model", code="model_not_found") from None
        except (tinker.BadRequestError, tinker.UnprocessableEntityError) as exc:
            raise RequestError(400, f"the sampler refused this request: {exc}") from None
        except tinker.RateLimitError as exc:
            raise RequestError(429, f"the backend is rate limited: {exc}",
                               kind="rate_limit_error") from None
        except (BackendTimeoutError, tinker.TinkerError) as exc:
            raise RequestError(503, f"the backend is unavailable: {type(exc).__name__}: {exc}",
                               kind="server_error") from None

    def _choice(self, index: int, sequence: Any, prepared: _Prepared,
                body: ChatCompletionRequest, version: int, user_stop: list[str],
                renderer: Any) -> dict[str, Any]:
        tokens = list(sequence.tokens)
        logprobs = [float(x) for x in (sequence.logprobs or [])]
        topk = getattr(sequence, "topk_logprobs", None) if body.top_logprobs else None
        finish = "stop" if sequence.stop_reason == "stop" else "length"
        tokenizer = renderer.tokenizer
        if user_stop and not self.renderer_info(renderer).string_stops:
            cut = _stop_cut(tokenizer, tokens, user_stop)
            if cut is not None:
                tokens, logprobs, finish = tokens[:cut], logprobs[:cut], "stop"
                topk = topk[:cut] if topk else topk
        message, _ = renderer.parse_response(prepared.prefill_tokens + tokens)
        content, reasoning = _text_and_thinking(message.get("content", ""))
        if prepared.prefill_tokens and not content.startswith(prepared.prefill_text):
            content = prepared.prefill_text + content  # a renderer that dropped the prefill
        for s in user_stop:
            at = content.find(s)
            if at >= 0:
                content, finish = content[:at], "stop"
        out_message: dict[str, Any] = {"role": "assistant", "content": content}
        calls: list[tuple[str, str]] = []
        ids: list[str] = []
        if prepared.parse_tools and prepared.tool_mode == "text":
            rest, calls = parse_text_tool_calls(content, prepared.tool_names,
                                                limit=prepared.tool_limit)
            if calls:
                ids = [_call_id() for _ in calls]
                self.tool_texts.put(tuple(ids), rest, calls, content)
                out_message["content"] = rest or None
        elif prepared.parse_tools and prepared.tool_mode == "native":
            native = list(message.get("tool_calls") or [])[:prepared.tool_limit]
            calls = [(c.function.name, c.function.arguments) for c in native]
            ids = [c.id or _call_id() for c in native]
            if calls and not content:
                out_message["content"] = None
        if calls:
            out_message["tool_calls"] = [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": arguments}}
                for call_id, (name, arguments) in zip(ids, calls, strict=True)]
            finish = "tool_calls"
        if reasoning:
            out_message["reasoning_content"] = reasoning
        return {
            "index": index,
            "message": out_message,
            "finish_reason": finish,
            "logprobs": _openai_logprobs(tokenizer, tokens, logprobs, topk) if body.logprobs
            else None,
            "prompt_token_ids": prepared.prompt_tokens,
            "token_ids": tokens,
            "token_logprobs": logprobs,
            "policy_version": version,
        }


def _signature(body: ChatCompletionRequest) -> tuple[Any, ...]:
    """Everything `prepare` reads from a request: equal signatures render equal prompts."""
    messages = tuple(
        (m.role, m.content if m.content is None or isinstance(m.content, str)
         else json.dumps(m.content, sort_keys=True), m.name, m.tool_call_id,
         tuple((c.id, c.function.name, c.function.arguments) for c in m.tool_calls)
         if m.tool_calls is not None else None,
         json.dumps(m.annotations) if m.annotations is not None else None, m.reasoning_content)
        for m in body.messages)
    tools = tuple((t.function.name, t.function.description,
                   json.dumps(t.function.parameters, sort_keys=True), t.function.strict)
                  for t in body.tools) if body.tools is not None else None
    choice = body.tool_choice
    named = ("function", choice.function.name) if isinstance(choice, NamedToolChoice) else choice
    return messages, tools, named, body.parallel_tool_calls


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _text_and_thinking(content: Any) -> tuple[str, str]:
    if isinstance(content, str):
        return content, ""
    text = "".join(p.get("text", "") for p in content if p.get("type") == "text")
    thinking = "".join(p.get("thinking", "") for p in content if p.get("type") == "thinking")
    return text, thinking


def _stop_cut(tokenizer: Any, tokens: list[int], stops: list[str]) -> int | None:
    """How many tokens to keep so the sample ends with the token completing the first stop
    string (for renderers whose own stops are token ids, so the sampler could not apply
    strings); None if no stop string occurs."""
    text = tokenizer.decode(tokens)
    if not any(s in text for s in stops):
        return None
    for i in range(1, len(tokens) + 1):
        if any(s in tokenizer.decode(tokens[:i]) for s in stops):
            return i
    return None


def _openai_logprobs(tokenizer: Any, tokens: list[int], logprobs: list[float],
                     topk: Any) -> dict[str, Any]:
    content = []
    for position, (token, logprob) in enumerate(zip(tokens, logprobs, strict=True)):
        text = tokenizer.decode([token])
        top = []
        if topk and position < len(topk) and topk[position]:
            for alt, alt_logprob in topk[position]:
                alt_text = tokenizer.decode([int(alt)])
                top.append({"token": alt_text, "logprob": float(alt_logprob),
                            "bytes": list(alt_text.encode("utf-8"))})
        content.append({"token": text, "logprob": logprob,
                        "bytes": list(text.encode("utf-8")), "top_logprobs": top})
    return {"content": content, "refusal": None}


def _usage(prepared: _Prepared, choices: list[dict[str, Any]]) -> dict[str, int]:
    completion = sum(len(c["token_ids"]) for c in choices)
    prompt = len(prepared.prompt_tokens)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _sse(body: ChatCompletionRequest, choices: list[dict[str, Any]], prepared: _Prepared,
         model: str) -> bytes:
    """The whole completion as server-sent `chat.completion.chunk` events (sampling returns
    complete sequences, so every chunk is ready at once)."""
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}
    events: list[bytes] = []

    def emit(choice_list: list[dict[str, Any]], **extra: Any) -> None:
        events.append(b"data: " + _dumps({**base, "choices": choice_list, **extra}) + b"\n\n")

    for c in choices:
        message = c["message"]
        i = c["index"]
        emit([{"index": i, "delta": {"role": "assistant", "content": ""},
               "logprobs": None, "finish_reason": None}])
        if message.get("reasoning_content"):
            emit([{"index": i, "delta": {"reasoning_content": message["reasoning_content"]},
                   "logprobs": None, "finish_reason": None}])
        if message.get("content") or c["logprobs"]:
            emit([{"index": i, "delta": {"content": message.get("content") or ""},
                   "logprobs": c["logprobs"], "finish_reason": None}])
        for k, call in enumerate(message.get("tool_calls") or []):
            emit([{"index": i, "delta": {"tool_calls": [{"index": k, **call}]},
                   "logprobs": None, "finish_reason": None}])
        emit([{"index": i, "delta": {}, "logprobs": None, "finish_reason": c["finish_reason"],
               "prompt_token_ids": c["prompt_token_ids"], "token_ids": c["token_ids"],
               "token_logprobs": c["token_logprobs"], "policy_version": c["policy_version"]}])
    if body.stream_options is not None and body.stream_options.include_usage:
        emit([], usage=_usage(prepared, choices))
    events.append(b"data: [DONE]\n\n")
    return b"".join(events)


def create_app(policy: PolicySource, *, model_name: str, token: str,
               defaults: SamplingDefaults, max_tokens_limit: int = 1024) -> FastAPI:
    app = FastAPI(title="tinker-tui policy server", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.add_middleware(_BearerAuth, token=token)
    handler = _ChatHandler(policy, model_name=model_name, defaults=defaults,
                           max_tokens_limit=max_tokens_limit)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        return openai_error(exc.status_code, str(exc.detail),
                            code="not_found" if exc.status_code == 404 else None)

    def model_entry(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": 0, "owned_by": "tinker-tui"}

    def model_names() -> list[str]:
        versions = getattr(policy, "available_versions", None)
        older = [f"{model_name}@{v}" for v in versions()] if versions is not None else []
        return [model_name, *older]

    @app.get("/health")
    async def health() -> Response:
        return Response(_dumps({"status": "ok", "policy_version": policy.version}),
                        media_type="application/json")

    @app.get("/v1/models")
    async def models() -> Response:
        return Response(_dumps({"object": "list",
                                "data": [model_entry(n) for n in model_names()]}),
                        media_type="application/json")

    @app.get("/v1/models/{model:path}")
    async def model(model: str) -> Response:
        if model not in model_names():
            return openai_error(404, f"unknown model {model!r}", param="model",
                                code="model_not_found")
        return Response(_dumps(model_entry(model)), media_type="application/json")

    async def chat_completions(request: Request) -> Response:
        try:
            try:
                body = ChatCompletionRequest.model_validate_json(await request.body())
            except ValidationError as exc:
                raise _validation_error(exc) from None
            choices, prepared, _version = await handler.complete(body)
        except RequestError as exc:
            return openai_error(exc.status, exc.message, param=exc.param, code=exc.code,
                                kind=exc.kind)
        except Exception as exc:  # a bug here must not take the server down
            logger.exception("chat completion failed")
            return openai_error(500, f"internal error: {type(exc).__name__}",
                                kind="server_error")
        if body.stream:
            return Response(_sse(body, choices, prepared, body.model),
                            media_type="text/event-stream",
                            headers={"Cache-Control": "no-cache"})
        payload = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": choices,
            "usage": _usage(prepared, choices),
        }
        return Response(_dumps(payload), media_type="application/json")

    # A plain Starlette route: the body is parsed and validated here, so FastAPI's
    # per-request dependency solving would be pure overhead on the hot path.
    app.add_route("/v1/chat/completions", chat_completions, methods=["POST"])
    return app


class _EmbeddedUvicorn(uvicorn.Server):
    """uvicorn that leaves signal handling to the application that embeds it."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        yield


class PolicyServer:
    """Runs the app on 127.0.0.1 in the current event loop; start() returns once it listens."""

    def __init__(self, policy: PolicySource, *, model_name: str, token: str | None = None,
                 defaults: SamplingDefaults | None = None,
                 max_tokens_limit: int = 1024) -> None:
        self.model_name = model_name
        self.token = token or secrets.token_urlsafe(24)
        self.defaults = defaults or SamplingDefaults()
        self.app = create_app(policy, model_name=model_name, token=self.token,
                              defaults=self.defaults, max_tokens_limit=max_tokens_limit)
        self.port: int | None = None
        self._server: _EmbeddedUvicorn | None = None
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"PolicyServer({self.model_name!r}, port={self.port}, token={self.token_hint})"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def token_hint(self) -> str:
        """The token as it may be shown: never in full."""
        return self.token[:4] + "…"

    async def start(self) -> None:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says
        # TCP, and accepted sockets inherit it. Without it every response waits out Nagle's
        # algorithm against the client's delayed ACK: about 40 ms per request.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        # Loopback only: no proxy in front, so no proxy-header rewriting per request.
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                backlog=1024, proxy_headers=False)
        self._server = _EmbeddedUvicorn(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="policy-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._server = None

    def client(self) -> Any:
        """An `openai.AsyncOpenAI` client pointed at this server, with the run's token."""
        import openai

        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.token, max_retries=0,
                                  timeout=120.0)
