"""The in-process OpenAI-compatible server that rollouts call.

FastAPI on uvicorn, in the same process and event loop as the pipeline, bound to
127.0.0.1 on a free port and guarded by a random per-run bearer token. It renders chat
messages to tokens with the policy's tinker-cookbook renderer, samples from the current
sampling client, and returns an OpenAI ChatCompletion. Each choice also carries the exact
token ids, their logprobs and the policy version that produced them (extension fields
`prompt_token_ids`, `token_ids`, `token_logprobs`, `policy_version`), so the trainer never
re-tokenizes text.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import tinker
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field


@dataclass
class SamplingDefaults:
    """Defaults for requests that leave them out; mutable so a live knob change applies to
    the next request."""

    temperature: float = 1.0
    max_tokens: int = 64


class PolicySource(Protocol):
    """What the server needs from the policy: its current sampler, renderer and version."""

    sampling_client: Any
    renderer: Any
    version: int


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    name: str | None = None


class ChatCompletionRequest(BaseModel):
    """The request fields this server honours; anything else is refused with a 400."""

    model_config = ConfigDict(extra="forbid")
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    n: int = Field(default=1, ge=1, le=64)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=0)
    stream: Literal[False] = False


def openai_error(status: int, message: str, *, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(
        status_code=status,
        content={"error": {"message": message, "type": kind, "param": param, "code": code}},
    )


def create_app(policy: PolicySource, *, model_name: str, token: str,
               defaults: SamplingDefaults, max_tokens_limit: int = 1024) -> FastAPI:
    app = FastAPI(title="tinker-tui policy server", docs_url=None, redoc_url=None)
    expected_auth = f"Bearer {token}"

    @app.middleware("http")
    async def require_token(request: Request, call_next: Any) -> Any:
        if request.headers.get("authorization") != expected_auth:
            return openai_error(401, "missing or wrong bearer token", kind="authentication_error",
                                code="invalid_api_key")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(loc) or None
        message = first.get("msg", "invalid request")
        if first.get("type") == "extra_forbidden":
            message = f"unsupported parameter: {param}"
        elif first.get("type") == "json_invalid":
            message = "request body is not valid JSON"
        return openai_error(400, message, param=param)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "policy_version": policy.version}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": model_name, "object": "model", "created": 0, "owned_by": "tinker-tui"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest) -> Any:
        if body.model != model_name:
            return openai_error(404, f"unknown model {body.model!r}; this run serves "
                                     f"{model_name!r}", param="model", code="model_not_found")
        max_tokens = body.max_completion_tokens or body.max_tokens or defaults.max_tokens
        if max_tokens > max_tokens_limit:
            return openai_error(400, f"max_tokens {max_tokens} exceeds this server's limit "
                                     f"of {max_tokens_limit}", param="max_tokens")
        renderer = policy.renderer
        sampling_client = policy.sampling_client
        version = policy.version
        messages = [m.model_dump(exclude_none=True) for m in body.messages]
        prompt = renderer.build_generation_prompt(messages)
        user_stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        params = tinker.SamplingParams(
            max_tokens=max_tokens,
            temperature=defaults.temperature if body.temperature is None else body.temperature,
            top_p=body.top_p,
            seed=body.seed,
            stop=list(renderer.get_stop_sequences()) + user_stop,
        )
        response = await sampling_client.sample(prompt=prompt, num_samples=body.n,
                                                sampling_params=params)
        prompt_tokens = prompt.to_ints()
        tokenizer = renderer.tokenizer
        choices = []
        completion_tokens = 0
        for index, sequence in enumerate(response.sequences):
            tokens = list(sequence.tokens)
            logprobs = [float(x) for x in (sequence.logprobs or [])]
            completion_tokens += len(tokens)
            message, _termination = renderer.parse_response(tokens)
            content = message.get("content", "")
            choices.append({
                "index": index,
                "message": {"role": "assistant",
                            "content": content if isinstance(content, str) else str(content)},
                "finish_reason": "stop" if sequence.stop_reason == "stop" else "length",
                "logprobs": _openai_logprobs(tokenizer, tokens, logprobs) if body.logprobs
                else None,
                "prompt_token_ids": prompt_tokens,
                "token_ids": tokens,
                "token_logprobs": logprobs,
                "policy_version": version,
            })
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": {"prompt_tokens": len(prompt_tokens), "completion_tokens": completion_tokens,
                      "total_tokens": len(prompt_tokens) + completion_tokens},
        }

    return app


def _openai_logprobs(tokenizer: Any, tokens: list[int], logprobs: list[float]) -> dict[str, Any]:
    content = []
    for token, logprob in zip(tokens, logprobs, strict=True):
        text = tokenizer.decode([token])
        content.append({"token": text, "logprob": logprob,
                        "bytes": list(text.encode("utf-8")), "top_logprobs": []})
    return {"content": content, "refusal": None}


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

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def token_hint(self) -> str:
        """The token as it may be shown: never in full."""
        return self.token[:4] + "…"

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
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
