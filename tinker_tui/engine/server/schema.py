"""What a chat-completion request may hold, and how a refused request is described.

The pydantic models are strict and forbid extra keys, so every field this server honours is
listed here and anything else is refused with an OpenAI-shaped 400 (never silently dropped).
`RequestError` is the one way the handler refuses a request; the app turns it into the
OpenAI error body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tinker_tui.engine.errors import TinkerTuiError

MAX_N = 128
MAX_STOP = 16
MAX_TOP_LOGPROBS = 20


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
    #: On a policy with a thinking switch only (`engine.rendering.thinking_switch`).
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = (
        None
    )


class RequestError(TinkerTuiError):
    """A request the server refuses; becomes an OpenAI-shaped error response."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "function-after"}


def _param(loc: Sequence[Any]) -> str | None:
    """`messages.0.content` from a pydantic error location, without the tags pydantic adds
    for union members (`str`, `list[...]`, `NamedToolChoice`, ...)."""
    parts = [
        str(p)
        for p in loc
        if isinstance(p, int) or not (str(p) in _TYPE_TAGS or "[" in str(p) or str(p)[:1].isupper())
    ]
    return ".".join(parts) or None


def validation_error(exc: ValidationError) -> RequestError:
    errors = exc.errors(include_url=False)
    first: Mapping[str, Any] = errors[0] if errors else {}
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
    return RequestError(
        400, f"invalid value for {param}: {message}" if param else message, param=param
    )
