"""The policy server's app: FastAPI routes behind the bearer token, and `PolicyServer`,
which runs them on uvicorn on 127.0.0.1 in the run's own event loop.

Endpoints: `GET /health`, `GET /v1/models`, `GET /v1/models/{model}`,
`POST /v1/chat/completions` (plain, or streamed as server-sent events), and the same
completions in two other wire formats, translated onto it: OpenAI's Responses API
(`POST /v1/responses`, `responses_api`) and Anthropic's Messages API (`POST /v1/messages`,
`messages_api`). Every path also answers under `/r/<key>/`, which files what is sampled under
the trajectory `key` (`capture`); a key that is not open is refused (404). The model is the run's
policy by its name, or `NAME@STEP` for the policy of an earlier step while it is still kept.
The random per-run token is compared in constant time and never logged;
`PolicyServer.token_hint` is the only form of it to show.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from tinker_tui.engine.errors import TinkerTuiError
from tinker_tui.engine.loopback_http import (
    REQUEST_TIMEOUT,
    BearerAuth,
    BodyTooLarge,
    LoopbackServer,
    read_body,
)
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import messages_api, responses_api
from tinker_tui.engine.server.capture import PREFIX, Captures
from tinker_tui.engine.server.coalesce import SampleCoalescer
from tinker_tui.engine.server.coalescing_client import (
    ClientCoalescingStats,
    coalescing_http_client,
)
from tinker_tui.engine.server.handler import (
    ChatHandler,
    PolicySource,
    Prepared,
    ServesEarlierVersions,
    usage,
)
from tinker_tui.engine.server.schema import ChatCompletionRequest, RequestError, validation_error

if TYPE_CHECKING:
    import openai

logger = logging.getLogger(__name__)

#: The largest request body accepted; a bigger one is refused (413) before it is parsed.
MAX_BODY_BYTES = 8 * 1024 * 1024
T = TypeVar("T")


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _event_stream(body: bytes | str) -> Response:
    """A whole answer as server-sent events (every wire format streams this way)."""
    return Response(body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def openai_error(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    kind: str = "invalid_request_error",
) -> Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return Response(_dumps(body), status_code=status, media_type="application/json")


def _sse(
    body: ChatCompletionRequest, choices: list[dict[str, Any]], prepared: Prepared, model: str
) -> bytes:
    """The whole completion as server-sent `chat.completion.chunk` events (sampling returns
    complete sequences, so every chunk is ready at once)."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    events: list[bytes] = []

    def emit(choice_list: list[dict[str, Any]], **extra: Any) -> None:
        events.append(b"data: " + _dumps({**base, "choices": choice_list, **extra}) + b"\n\n")

    for c in choices:
        message = c["message"]
        i = c["index"]
        emit(
            [
                {
                    "index": i,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
        )
        if message.get("reasoning_content"):
            emit(
                [
                    {
                        "index": i,
                        "delta": {"reasoning_content": message["reasoning_content"]},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            )
        if message.get("content") or c["logprobs"]:
            emit(
                [
                    {
                        "index": i,
                        "delta": {"content": message.get("content") or ""},
                        "logprobs": c["logprobs"],
                        "finish_reason": None,
                    }
                ]
            )
        for k, call in enumerate(message.get("tool_calls") or []):
            emit(
                [
                    {
                        "index": i,
                        "delta": {"tool_calls": [{"index": k, **call}]},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            )
        emit(
            [
                {
                    "index": i,
                    "delta": {},
                    "logprobs": None,
                    "finish_reason": c["finish_reason"],
                    "prompt_token_ids": c["prompt_token_ids"],
                    "token_ids": c["token_ids"],
                    "token_logprobs": c["token_logprobs"],
                    "policy_version": c["policy_version"],
                    "sequence_id": c.get("sequence_id", ""),
                }
            ]
        )
    if body.stream_options is not None and body.stream_options.include_usage:
        emit([], usage=usage(prepared, choices))
    events.append(b"data: [DONE]\n\n")
    return b"".join(events)


#: Where `CapturePrefix` leaves the key of the trajectory a request is filed under, and the
#: key's opening it came in under (`Captures.opening`).
CAPTURE_KEY = "tinker_tui.capture_key"
CAPTURE_OPENING = "tinker_tui.capture_opening"


class CapturePrefix:
    """Pure ASGI middleware: a path under `/r/<key>/` is served as the path after it, with the
    key left in the scope (`CAPTURE_KEY`) for the routes to file their replies under; a key
    that is not open is refused (404) before anything is sampled."""

    def __init__(self, app: ASGIApp, *, captures: Captures) -> None:
        self.app = app
        self.captures = captures

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            found = PREFIX.match(scope["path"])
            if found is not None:
                key, rest = found.groups()
                opening = self.captures.opening(key)
                if opening is None:
                    message = (
                        f"no trajectory is open under key {key!r} (it finished, or never began)"
                    )
                    refusal = (
                        Response(
                            _dumps(messages_api.error_body(RequestError(404, message))),
                            status_code=404,
                            media_type="application/json",
                        )
                        if rest.endswith("/messages")
                        else openai_error(404, message, code="not_found")
                    )
                    await refusal(scope, receive, send)
                    return
                scope = {
                    **scope,
                    "path": rest,
                    "raw_path": rest.encode(),
                    CAPTURE_KEY: key,
                    CAPTURE_OPENING: opening,
                }
        await self.app(scope, receive, send)


class ClientGone(TinkerTuiError):
    """The client closed its connection before its completion was ready."""


async def _until_disconnected(receive: Receive) -> None:
    """Returns when the client goes away (the body is already read, so the only message
    still to come is the disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """`await work`, cancelled (and ClientGone raised) if the client disconnects first:
    sampling that nobody waits for any more must not hold up the requests after it."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_until_disconnected(request.receive))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})  # let the cancellation reach the sampler
        gone.cancel()
    if task.cancelled():
        raise ClientGone()
    return task.result()


def create_app(
    session: PolicySource,
    *,
    model_name: str,
    token: str,
    defaults: SamplingDefaults,
    max_tokens_limit: int = 1024,
    max_body_bytes: int = MAX_BODY_BYTES,
    context_length: int | None = None,
    coalescer: SampleCoalescer | None = None,
    captures: Captures | None = None,
) -> FastAPI:
    app = FastAPI(title="tinker-tui policy server", docs_url=None, redoc_url=None, openapi_url=None)
    captures = captures if captures is not None else Captures()
    app.add_middleware(CapturePrefix, captures=captures)
    app.add_middleware(
        BearerAuth,
        token=token,
        api_key_header=b"x-api-key",
        refusal=lambda: openai_error(
            401,
            "missing or wrong bearer token",
            kind="authentication_error",
            code="invalid_api_key",
        ),
    )
    source: PolicySource = coalescer if coalescer is not None else session
    handler = ChatHandler(
        source,
        model_name=model_name,
        defaults=defaults,
        max_tokens_limit=max_tokens_limit,
        context_length=context_length,
    )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        return openai_error(
            exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else None
        )

    def model_entry(name: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "tinker-tui",
        }
        if session.renderer is not None:
            # How tools reach this model: in its own format ("native"), or in the server's
            # text protocol ("text"), so a rollout can choose its prompts.
            native = handler.renderer_info(session.renderer).native_tools
            entry["tool_calls"] = "native" if native else "text"
        return entry

    def model_names() -> list[str]:
        older = (
            [f"{model_name}@{v}" for v in session.available_versions()]
            if isinstance(session, ServesEarlierVersions)
            else []
        )
        return [model_name, *older]

    @app.get("/health")
    async def health() -> Response:
        return Response(
            _dumps({"status": "ok", "policy_version": session.version}),
            media_type="application/json",
        )

    @app.get("/v1/models")
    async def models() -> Response:
        return Response(
            _dumps({"object": "list", "data": [model_entry(n) for n in model_names()]}),
            media_type="application/json",
        )

    @app.get("/v1/models/{model:path}")
    async def model(model: str) -> Response:
        if model not in model_names():
            return openai_error(
                404, f"unknown model {model!r}", param="model", code="model_not_found"
            )
        return Response(_dumps(model_entry(model)), media_type="application/json")

    async def sample(request: Request, parse: Any) -> tuple[Any, list[dict[str, Any]], Prepared]:
        """Read and translate the body (`parse(raw) -> (request, chat request)`), sample it
        on the chat path (with its trajectory's sampling defaults, if it has its own), and
        file the choices under the request's trajectory, if any."""
        try:
            raw = await read_body(request, max_body_bytes)
        except BodyTooLarge as exc:
            raise RequestError(413, str(exc), code="request_too_large") from None
        original, body = parse(raw)
        key = request.scope.get(CAPTURE_KEY)
        defaults = captures.defaults_for(key) if key is not None else None
        choices, prepared, _version = await unless_client_leaves(
            request, handler.complete(body, defaults)
        )
        if key is not None:
            captures.record(key, choices, opening=request.scope.get(CAPTURE_OPENING))
        return original, choices, prepared

    async def served(what: str, request: Request, parse: Any, answer: Any, error: Any) -> Response:
        """`sample`, then `answer(original, choices, prepared)`; a refusal as `error`
        builds it, a client gone as 499, a bug as 500 (never taking the server down)."""
        try:
            original, choices, prepared = await sample(request, parse)
        except RequestError as exc:
            return error(exc)  # type: ignore[no-any-return]
        except (ClientDisconnect, ClientGone) as exc:
            logger.debug(
                "%s: the client went away %s",
                what,
                "while sampling; sampling cancelled"
                if isinstance(exc, ClientGone)
                else "before its request was whole",
            )
            return Response(status_code=499)  # nobody reads it
        except Exception as exc:  # a bug here must not take the server down
            logger.exception("%s failed", what)
            return error(  # type: ignore[no-any-return]
                RequestError(500, f"internal error: {type(exc).__name__}", kind="server_error")
            )
        return answer(original, choices, prepared)  # type: ignore[no-any-return]

    def openai_refusal(exc: RequestError) -> Response:
        return openai_error(exc.status, exc.message, param=exc.param, code=exc.code, kind=exc.kind)

    def parse_chat(raw: bytes) -> tuple[ChatCompletionRequest, ChatCompletionRequest]:
        try:
            body = ChatCompletionRequest.model_validate_json(raw)
        except ValidationError as exc:
            raise validation_error(exc) from None
        return body, body

    def answer_chat(
        body: ChatCompletionRequest, choices: list[dict[str, Any]], prepared: Prepared
    ) -> Response:
        if body.stream:
            return _event_stream(_sse(body, choices, prepared, body.model))
        payload = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": choices,
            "usage": usage(prepared, choices),
        }
        return Response(_dumps(payload), media_type="application/json")

    async def chat_completions(request: Request) -> Response:
        return await served("chat completion", request, parse_chat, answer_chat, openai_refusal)

    def answer_responses(
        body: responses_api.ResponsesRequest,
        choices: list[dict[str, Any]],
        prepared: Prepared,
    ) -> Response:
        done = responses_api.response(body, choices[0], prepared)
        if body.stream:
            return _event_stream(responses_api.sse(done))
        return Response(_dumps(done), media_type="application/json")

    async def responses(request: Request) -> Response:
        return await served(
            "response", request, responses_api.to_chat, answer_responses, openai_refusal
        )

    translator = messages_api.MessagesTranslator()

    def answer_messages(
        body: messages_api.MessagesRequest,
        choices: list[dict[str, Any]],
        prepared: Prepared,
    ) -> Response:
        message = translator.message(choices[0], prepared, body.model)
        if body.stream:
            return _event_stream(messages_api.sse(message))
        return Response(_dumps(message), media_type="application/json")

    def anthropic_refusal(exc: RequestError) -> Response:
        return Response(
            _dumps(messages_api.error_body(exc)),
            status_code=exc.status,
            media_type="application/json",
        )

    async def messages(request: Request) -> Response:
        return await served(
            "message", request, translator.request, answer_messages, anthropic_refusal
        )

    # A plain Starlette route: the body is parsed and validated here, so FastAPI's
    # per-request dependency solving would be pure overhead on the hot path.
    app.add_route("/v1/chat/completions", chat_completions, methods=["POST"])
    app.add_route("/v1/responses", responses, methods=["POST"])
    app.add_route("/v1/messages", messages, methods=["POST"])
    return app


class PolicyServer:
    """Runs the app on 127.0.0.1 in the current event loop; start() returns once it listens."""

    def __init__(
        self,
        session: PolicySource,
        *,
        model_name: str,
        token: str | None = None,
        defaults: SamplingDefaults | None = None,
        max_tokens_limit: int = 1024,
        max_body_bytes: int = MAX_BODY_BYTES,
        context_length: int | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
        coalesce_window: float = 0.0,
        group_size: int | None = None,
    ) -> None:
        self.model_name = model_name
        #: Coalesces a group's equal requests into one sampling call (`coalesce`); a batch
        #: of `group_size` samples (a whole group) goes without waiting out the window.
        self.coalescer = SampleCoalescer(session, window=coalesce_window, full_at=group_size)
        self.token = token or secrets.token_urlsafe(24)
        self.defaults = defaults or SamplingDefaults()
        #: The trajectories open for capture: a rollout's requests under `/r/<key>/` are
        #: filed under its key (`capture`).
        self.captures = Captures()
        self.app = create_app(
            session,
            model_name=model_name,
            token=self.token,
            defaults=self.defaults,
            max_tokens_limit=max_tokens_limit,
            max_body_bytes=max_body_bytes,
            context_length=context_length,
            coalescer=self.coalescer,
            captures=self.captures,
        )
        self._server = LoopbackServer(
            self.app, name="policy-server", request_timeout=request_timeout
        )
        self._clients: list[openai.AsyncOpenAI] = []
        #: What each client's coalescing did (`client()`), for benches and tests.
        self.client_coalescing: list[ClientCoalescingStats] = []

    @property
    def port(self) -> int | None:
        return self._server.port

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
        """Listen on 127.0.0.1; returns once the server accepts requests."""
        await self._server.start()
        self.captures.root = f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        """Close the clients `client()` made, then stop listening. A client left to the
        garbage collector closes its connections on a loop that may be gone by then."""
        clients, self._clients = self._clients, []
        try:
            for client in clients:
                await client.close()
        finally:
            await self._server.stop()

    def client(self) -> openai.AsyncOpenAI:
        """An `openai.AsyncOpenAI` client pointed at this server, with the run's token;
        closed when the server stops. With coalescing on, a group's equal requests leave it
        as one HTTP request (`coalescing_client`; its stats in `client_coalescing`), held
        half the server's window: what it sends arrives while the server's batch, opened
        by a request it passed through at once (streamed, seeded), is still open."""
        import openai

        http_client = None
        if self.coalescer.window > 0:
            http_client, transport = coalescing_http_client(
                self.coalescer.window / 2, full_at=self.coalescer.full_at
            )
            self.client_coalescing.append(transport.stats)
        client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self.token,
            max_retries=0,
            timeout=120.0,
            http_client=http_client,
        )
        self._clients.append(client)
        return client
