"""The chat handler: a validated request becomes prompt tokens, a sampling call and choices.

Messages are rendered with the policy's renderer (tools by `engine.server.tools`), sampled
through the policy (`PolicySource`), and every choice carries the exact token ids, their
logprobs and the policy version that produced them, so the trainer never re-tokenizes text.
Everything it refuses is a `RequestError`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast, runtime_checkable

import tinker

from tinker_tui.engine.backend.retry import BackendInterrupted, BackendTimeoutError
from tinker_tui.engine.rendering.thinking_switch import NoThinkingSwitch, ThinkingSwitch
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server.native_calls import FramedCallConstraint, call_frame, call_opening
from tinker_tui.engine.server.sampled_turns import (
    MessageKey,
    SampledTurns,
    build_prompt,
    message_key,
    splices,
)
from tinker_tui.engine.server.schema import (
    MAX_STOP,
    ChatCompletionRequest,
    ChatMessage,
    NamedToolChoice,
    RequestError,
    ToolCallParam,
)
from tinker_tui.engine.server.tool_call_constraint import ToolCallConstraint
from tinker_tui.engine.server.tools import (
    TOOL_RESULT,
    ToolTextCache,
    content_prefix,
    forced_call_prefill,
    format_text_tool_call,
    parse_text_tool_calls,
    supports_native_tools,
    text_tool_section,
)

#: Requests whose messages hold more characters than this are rendered and tokenized on a
#: worker thread, so the event loop never waits for them.
OFF_LOOP_CHARS = 4096
#: Renderers whose facts are kept: the policy's and its thinking switch's other one.
RENDERERS_KEPT = 2

if TYPE_CHECKING:
    from tinker_cookbook.renderers import Message


class PolicySource(Protocol):
    """What the server needs from the policy (`engine.backend.session.BackendSession` is one;
    so are the views of it that coalesce requests or cross to the engine loop, read-only)."""

    @property
    def renderer(self) -> Any: ...

    @property
    def version(self) -> int: ...

    @property
    def end_tokens(self) -> Sequence[int]:
        """Every end token the model declares (its EOS, generation_config's eos_token_id
        list), which end a sample as the renderer's own stops do."""
        ...

    async def sample(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        *,
        version: int | None = None,
        top_logprobs: int = 0,
        constraint: Any = None,
        constraint_prefix: str = "",
    ) -> tuple[tinker.SampleResponse, int]: ...


@runtime_checkable
class ServesEarlierVersions(Protocol):
    """A policy that serves its earlier versions too (`model@STEP`), as `BackendSession` does
    from its sampler checkpoints."""

    def available_versions(self) -> list[int]: ...


@dataclass
class RendererInfo:
    """What the handler needs to know about the policy's renderer (found once per renderer)."""

    native_tools: bool
    content_prefix: str
    string_stops: bool
    stops: list[Any]
    #: Token ids that end a sample (the renderer's stops and the model's end tokens); empty
    #: for a renderer whose stops are strings.
    end_tokens: list[int] = field(default_factory=list)
    #: Whether a sampled reply can take its message's place in a prompt (`sampled_turns`).
    splices: bool = False
    #: The most tokens a prompt may have (None: unknown, the sampler alone decides).
    context_length: int | None = None
    #: The most characters one token stands for (None until a large prompt needs it).
    max_token_chars: int | None = None


@dataclass
class Prepared:
    """A request turned into what the sampler and the response builder need."""

    prompt: tinker.ModelInput
    prompt_tokens: list[int]
    prefill_tokens: list[int]
    prefill_text: str
    tool_names: list[str] = field(default_factory=list)
    tool_mode: Literal["off", "text", "native"] = "off"
    parse_tools: bool = False
    tool_limit: int | None = None
    #: For a forced tool call: the shape the reply's text must keep (applied where the
    #: backend samples in this process), starting from the prefill's text.
    constraint: ToolCallConstraint | None = None
    constraint_prefix: str = ""
    #: tool_choice "required" or a named function: the reply is one call (of
    #: `tool_names`) and nothing else, so a parsed call comes back without content.
    forced: bool = False


class ChatHandler:
    def __init__(
        self,
        session: PolicySource,
        *,
        model_name: str,
        defaults: SamplingDefaults,
        max_tokens_limit: int,
        context_length: int | None = None,
    ) -> None:
        self.session = session
        self.model_name = model_name
        self.defaults = defaults
        self.max_tokens_limit = max_tokens_limit
        #: The policy's context in tokens; None: the tokenizer's `model_max_length`, if set.
        self.context_length = context_length
        self.tool_texts = ToolTextCache()
        self.sampled_turns = SampledTurns()
        # Rendered prompts by request signature: a group's rollouts send the same messages.
        self._prepared: OrderedDict[tuple[Any, ...], Prepared] = OrderedDict()
        self.prepared_cache_size = 512
        # By renderer: the policy's, and the one a `reasoning_effort` switches to.
        self._renderer_info: dict[int, tuple[Any, RendererInfo]] = {}
        self.thinking = ThinkingSwitch()

    # -- model and renderer -----------------------------------------------------------
    def resolve_version(self, model: str) -> int | None:
        if model == self.model_name:
            return None
        name, sep, step = model.rpartition("@")
        if sep and name == self.model_name and step.isascii() and step.isdigit():
            return int(step)
        raise RequestError(
            404,
            f"unknown model {model!r}; this run serves {self.model_name!r} "
            f"(or {self.model_name}@STEP for an earlier policy)",
            param="model",
            code="model_not_found",
        )

    def renderer_info(self, renderer: Any) -> RendererInfo:
        cached = self._renderer_info.get(id(renderer))
        if cached is not None and cached[0] is renderer:
            return cached[1]
        stops = list(renderer.get_stop_sequences())
        string_stops = all(isinstance(s, str) for s in stops)
        ends = (
            []
            if string_stops
            else list(dict.fromkeys([*stops, *(int(t) for t in self.session.end_tokens)]))
        )
        info = RendererInfo(
            native_tools=supports_native_tools(renderer),
            content_prefix=content_prefix(renderer),
            string_stops=string_stops,
            stops=stops,
            end_tokens=ends,
            splices=not string_stops and splices(renderer),
            context_length=self.context_length or _tokenizer_context_length(renderer.tokenizer),
        )
        if len(self._renderer_info) >= RENDERERS_KEPT:  # a new policy renderer: start over
            self._renderer_info.clear()
            self._prepared.clear()
        self._renderer_info[id(renderer)] = (renderer, info)
        return info

    # -- messages -----------------------------------------------------------------------
    def prepare(self, body: ChatCompletionRequest, renderer: Any) -> Prepared:
        info = self.renderer_info(renderer)
        tools: list[dict[str, Any]] = [
            {
                "name": t.function.name,
                "description": t.function.description,
                "parameters": t.function.parameters or {"type": "object", "properties": {}},
            }
            for t in body.tools or []
        ]
        for i, tool in enumerate(body.tools or []):
            if tool.function.strict:
                raise RequestError(
                    400,
                    "strict function schemas need constrained decoding, "
                    "which this server does not offer",
                    param=f"tools.{i}.function.strict",
                )
        names = [t.function.name for t in body.tools or []]
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
                raise RequestError(
                    400,
                    f"tool_choice names {forced_name!r}, which is not among the tools",
                    param="tool_choice",
                )
        elif choice == "required" and len(names) == 1:
            # One tool: "required" is that tool named, so the prefill covers its name too
            # and a tight max_tokens holds the same call a named choice does.
            forced_name = names[0]
        mode: Literal["off", "text", "native"] = "off"
        if tools:
            mode = "native" if info.native_tools else "text"
        messages, keys, reasonings = self._convert_messages(body.messages, mode, tools, renderer)
        prefill, prefill_tokens = "", list[int]()
        constraint: Any = None
        forced = choice == "required" or forced_name is not None
        allowed = tuple([forced_name] if forced_name else names)
        if mode == "text" and forced:
            prefill, prefill_tokens = forced_call_prefill(
                renderer.tokenizer, info.content_prefix, names, forced_name
            )
            constraint = ToolCallConstraint.for_tools(tools, allowed)
        elif mode == "native" and forced:
            opening = call_opening(renderer, forced_name, names[0])
            if opening is None or not opening[1]:
                raise RequestError(
                    400,
                    "tool_choice 'required' or a named function needs "
                    "the start of a tool call in the renderer's format, "
                    "and this renderer writes none this server can "
                    "find; use 'auto'",
                    param="tool_choice",
                )
            prefill, prefill_tokens = opening
            frame = call_frame(renderer, allowed[0])
            if frame is not None:
                end = next((int(t) for t in info.stops if isinstance(t, int)), None)
                constraint = FramedCallConstraint(
                    frame[0], ToolCallConstraint.for_tools(tools, allowed), frame[1], end_token=end
                )
        try:
            if info.splices:
                prompt = build_prompt(
                    renderer, messages, keys, reasonings, self.sampled_turns, info.end_tokens
                )
            else:
                prompt = renderer.build_generation_prompt(messages)
        except RequestError:
            raise
        except Exception as exc:
            raise RequestError(
                400,
                f"cannot render these messages with the policy's "
                f"renderer: {type(exc).__name__}: {exc}",
                param="messages",
            ) from None
        if prefill_tokens:
            prompt = tinker.ModelInput(
                chunks=[*prompt.chunks, tinker.EncodedTextChunk(tokens=prefill_tokens)]
            )
        prompt_tokens = prompt.to_ints()
        if info.context_length is not None and len(prompt_tokens) >= info.context_length:
            raise _too_long(info.context_length, f"these messages are {len(prompt_tokens)} tokens")
        # The text a reply's content starts with (native calls: none, the prefill is part
        # of the call the renderer parses).
        prefill_text = (
            ""
            if mode == "native"
            else prefill[len(info.content_prefix) :]
            if prefill.startswith(info.content_prefix)
            else prefill.lstrip()
        )
        return Prepared(
            prompt=prompt,
            prompt_tokens=prompt_tokens,
            prefill_tokens=prefill_tokens,
            prefill_text=prefill_text,
            tool_names=list(allowed) if forced else names,
            tool_mode=mode,
            parse_tools=mode != "off" and choice != "none",
            tool_limit=1 if body.parallel_tool_calls is False or forced else None,
            forced=forced,
            constraint=constraint,
            constraint_prefix=prefill,
        )

    def prepare_large(self, body: ChatCompletionRequest, renderer: Any) -> Prepared:
        """`prepare` for a large request, on a worker thread: a prompt that cannot fit the
        context is refused from its length in characters, before any of it is tokenized."""
        info = self.renderer_info(renderer)
        if info.context_length is not None:
            if info.max_token_chars is None:
                info.max_token_chars = _max_token_chars(renderer.tokenizer)
            if info.max_token_chars:
                fewest, chars = _fewest_tokens(body, info.max_token_chars)
                if fewest >= info.context_length:
                    raise _too_long(
                        info.context_length,
                        f"these messages are at least {fewest} tokens ({chars} characters)",
                    )
        return self.prepare(body, renderer)

    def _convert_messages(
        self, messages: Sequence[ChatMessage], mode: str, tools: list[dict[str, Any]], renderer: Any
    ) -> tuple[list[dict[str, Any]], list[MessageKey | None], list[str | None]]:
        """The messages for the renderer, and per message its key among sampled replies
        (assistant messages) and the reasoning it carries."""
        from tinker_cookbook.renderers import TextPart, ThinkingPart, ToolCall
        from tinker_cookbook.renderers.role_colon import RoleColonRenderer

        out: list[dict[str, Any]] = []
        keys: list[MessageKey | None] = []
        reasonings: list[str | None] = []
        # The calls a tool message may answer: those of the assistant message before it
        # (with only tool messages between), as OpenAI requires.
        open_calls: dict[str, str] = {}
        for i, m in enumerate(messages):
            where = f"messages.{i}"
            text = self._text(m, where)
            role = "system" if m.role == "developer" else m.role
            if m.annotations:
                raise RequestError(
                    400, "message annotations are not supported", param=f"{where}.annotations"
                )
            if m.reasoning_content is not None and role != "assistant":
                raise RequestError(
                    400,
                    "only assistant messages carry reasoning_content",
                    param=f"{where}.reasoning_content",
                )
            if m.name is not None and role != "tool":
                raise RequestError(
                    400, "name is supported on tool messages only", param=f"{where}.name"
                )
            if m.tool_calls is not None and role != "assistant":
                raise RequestError(
                    400, "only assistant messages carry tool_calls", param=f"{where}.tool_calls"
                )
            if m.tool_call_id is not None and role != "tool":
                raise RequestError(
                    400, "only tool messages carry tool_call_id", param=f"{where}.tool_call_id"
                )
            if text is None and not (role == "assistant" and m.tool_calls):
                raise RequestError(400, f"{m.role} messages need content", param=f"{where}.content")
            message: dict[str, Any] = {"role": role, "content": text or ""}
            if m.reasoning_content and not isinstance(renderer, RoleColonRenderer):
                # As the renderer renders history: Qwen3-Instruct drops it, a thinking
                # template may keep it (role_colon has no place for it and drops it).
                message["content"] = [
                    ThinkingPart(type="thinking", thinking=m.reasoning_content),
                    TextPart(type="text", text=text or ""),
                ]
            keys.append(
                message_key(
                    text, [(c.function.name, c.function.arguments) for c in m.tool_calls or []]
                )
                if role == "assistant"
                else None
            )
            reasonings.append(m.reasoning_content)
            if role != "tool":
                open_calls = {}
            if role == "assistant" and m.tool_calls:
                open_calls = {call.id: call.function.name for call in m.tool_calls}
                if mode == "native":
                    message["tool_calls"] = [
                        ToolCall(
                            id=c.id,
                            function=ToolCall.FunctionBody(
                                name=c.function.name, arguments=c.function.arguments
                            ),
                        )
                        for c in m.tool_calls
                    ]
                else:
                    message["content"] = self._assistant_text(text or "", m.tool_calls)
                    keys[-1] = None  # the text protocol has its own exact replies
            if role == "tool":
                if m.tool_call_id is None:
                    raise RequestError(
                        400, "tool messages need tool_call_id", param=f"{where}.tool_call_id"
                    )
                if m.tool_call_id not in open_calls:
                    raise RequestError(
                        400,
                        f"tool_call_id {m.tool_call_id[:64]!r} answers no "
                        "tool call of the assistant message before it "
                        "(a tool message must follow the assistant "
                        "message whose tool_calls name its id)",
                        param=f"{where}.tool_call_id",
                    )
                name = m.name or open_calls[m.tool_call_id]
                if mode != "native":
                    # A renderer without a tool format (role_colon stops at "\n\nUser:")
                    # hears tool results from the user, so the next prompt extends the
                    # sampled tokens.
                    message = {
                        "role": "user",
                        "content": TOOL_RESULT.format(name=name or "tool", content=text or ""),
                    }
                else:
                    message["tool_call_id"] = m.tool_call_id
                    if name is not None:
                        message["name"] = name
            out.append(message)
        if mode == "text":
            section = text_tool_section(tools)
            if out and out[0]["role"] == "system":
                out[0] = {
                    **out[0],
                    "content": f"{out[0]['content']}\n\n{section}"
                    if out[0]["content"]
                    else section,
                }
            else:
                out.insert(0, {"role": "system", "content": section})
                keys.insert(0, None)
                reasonings.insert(0, None)
        elif mode == "native":
            from tinker_cookbook.renderers import get_text_content

            system = ""
            if out and out[0]["role"] == "system":
                system = get_text_content(cast("Message", out.pop(0)))
                keys.pop(0)
                reasonings.pop(0)
            prefix = list(renderer.create_conversation_prefix_with_tools(tools, system))
            out = prefix + out
            keys[:0] = [None] * len(prefix)
            reasonings[:0] = [None] * len(prefix)
        return out, keys, reasonings

    @staticmethod
    def _text(m: ChatMessage, where: str) -> str | None:
        if m.content is None or isinstance(m.content, str):
            return m.content
        if not m.content:
            raise RequestError(
                400,
                "content is an empty array; give a string or at least one text part",
                param=f"{where}.content",
                code="empty_array",
            )
        parts = []
        for j, part in enumerate(m.content):
            kind = part.get("type")
            if kind != "text":
                raise RequestError(
                    400,
                    f"unsupported content part type {str(kind)[:40]!r}: "
                    "only text parts are supported",
                    param=f"{where}.content.{j}.type",
                )
            if not isinstance(part.get("text"), str):
                raise RequestError(
                    400, "a text part needs 'text', a string", param=f"{where}.content.{j}.text"
                )
            extra = sorted(set(part) - {"type", "text"})
            if extra:
                names = ", ".join(repr(k[:40]) for k in extra[:5])
                raise RequestError(
                    400,
                    f"unsupported key(s) in a text part: {names} (a text "
                    "part holds only 'type' and 'text')",
                    param=f"{where}.content.{j}.{extra[0][:40]}",
                )
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
    async def complete(
        self, body: ChatCompletionRequest, defaults: SamplingDefaults | None = None
    ) -> tuple[list[dict[str, Any]], Prepared, int]:
        """Sample `body`'s choices; `defaults`: a rollout's own (an evaluation's protocol),
        else the server's."""
        defaults = self.defaults if defaults is None else defaults
        version = self.resolve_version(body.model)
        max_tokens = defaults.max_tokens_for(body.max_completion_tokens or body.max_tokens)
        if max_tokens > self.max_tokens_limit:
            param = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
            raise RequestError(
                400,
                f"max_tokens {max_tokens} exceeds this server's limit of {self.max_tokens_limit}",
                param=param,
            )
        if body.top_logprobs and not body.logprobs:
            raise RequestError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(body, name) not in (None, 0, 0.0):
                raise RequestError(
                    400, f"unsupported parameter: {name} (only 0 is supported)", param=name
                )
        if body.response_format is not None and body.response_format.type != "text":
            raise RequestError(
                400,
                f"unsupported parameter: response_format of type "
                f"{body.response_format.type!r} (only 'text')",
                param="response_format",
            )
        if body.stream_options is not None and not body.stream:
            raise RequestError(400, "stream_options needs stream=true", param="stream_options")
        user_stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        if len(user_stop) > MAX_STOP or any(not s for s in user_stop):
            raise RequestError(
                400, f"stop must be at most {MAX_STOP} non-empty strings", param="stop"
            )
        renderer = self.session.renderer
        if body.reasoning_effort is not None:
            try:
                renderer = self.thinking.renderer_for(renderer, body.reasoning_effort)
            except NoThinkingSwitch as exc:
                raise RequestError(400, str(exc), param="reasoning_effort") from None
        info = self.renderer_info(renderer)
        key = (id(renderer), *_signature(body))
        prepared = self._prepared.get(key)
        if prepared is None:
            if prompt_chars(body) > OFF_LOOP_CHARS:
                prepared = await asyncio.to_thread(self.prepare_large, body, renderer)
            else:
                prepared = self.prepare(body, renderer)
            self._prepared[key] = prepared
            if len(self._prepared) > self.prepared_cache_size:
                self._prepared.popitem(last=False)
        else:
            self._prepared.move_to_end(key)
        if info.string_stops:
            stop: list[Any] = info.stops + user_stop
        else:
            # token ids (the renderer's and the model's end tokens); user strings are
            # applied to the samples below
            stop = list(info.end_tokens)
        params = tinker.SamplingParams(
            max_tokens=max_tokens,
            temperature=defaults.temperature_for(body.temperature),
            top_p=1.0 if body.top_p is None else body.top_p,
            seed=body.seed,
            stop=stop or None,
        )
        response, used_version = await self._sample(
            prepared.prompt, body.n, params, version, body.top_logprobs or 0, prepared
        )
        choices = [
            self._choice(i, seq, prepared, body, used_version, user_stop, renderer)
            for i, seq in enumerate(response.sequences)
        ]
        return choices, prepared, used_version

    async def _sample(
        self,
        prompt: tinker.ModelInput,
        n: int,
        params: tinker.SamplingParams,
        version: int | None,
        top_logprobs: int,
        prepared: Prepared | None = None,
    ) -> tuple[Any, int]:
        from tinker_tui.engine.backend.session import UnknownVersionError

        try:
            constrained: dict[str, Any] = {}
            if prepared is not None and prepared.constraint is not None:
                constrained = {
                    "constraint": prepared.constraint,
                    "constraint_prefix": prepared.constraint_prefix,
                }
            return await self.session.sample(
                prompt, n, params, version=version, top_logprobs=top_logprobs, **constrained
            )
        except UnknownVersionError as exc:
            raise RequestError(404, str(exc), param="model", code="model_not_found") from None
        except (tinker.BadRequestError, tinker.UnprocessableEntityError) as exc:
            raise RequestError(400, f"the sampler refused this request: {exc}") from None
        except tinker.RateLimitError as exc:
            raise RequestError(
                429, f"the backend is rate limited: {exc}", kind="rate_limit_error"
            ) from None
        except (BackendTimeoutError, BackendInterrupted, tinker.TinkerError) as exc:
            raise RequestError(
                503, f"the backend is unavailable: {type(exc).__name__}: {exc}", kind="server_error"
            ) from None

    def _choice(
        self,
        index: int,
        sequence: Any,
        prepared: Prepared,
        body: ChatCompletionRequest,
        version: int,
        user_stop: list[str],
        renderer: Any,
    ) -> dict[str, Any]:
        tokens = list(sequence.tokens)
        logprobs = [float(x) for x in (sequence.logprobs or [])]
        topk = getattr(sequence, "topk_logprobs", None) if body.top_logprobs else None
        finish = "stop" if sequence.stop_reason == "stop" else "length"
        tokenizer = renderer.tokenizer
        info = self.renderer_info(renderer)
        # A sample ends at the first end token the model declares, whether or not the
        # sampler stopped there.
        end_at = next((i for i, t in enumerate(tokens) if t in info.end_tokens), None)
        if end_at is not None and end_at + 1 < len(tokens):
            tokens, logprobs, finish = tokens[: end_at + 1], logprobs[: end_at + 1], "stop"
            topk = topk[: end_at + 1] if topk else topk
        if user_stop and not info.string_stops:
            cut = _stop_cut(tokenizer, tokens, user_stop)
            if cut is not None:
                tokens, logprobs, finish = tokens[:cut], logprobs[:cut], "stop"
                topk = topk[:cut] if topk else topk
        message, _ = renderer.parse_response(_as_parsed(prepared.prefill_tokens + tokens, info))
        content, reasoning = _text_and_thinking(message.get("content", ""))
        if reasoning:  # the newlines that frame a block are the template's, not the text's
            content, reasoning = content.lstrip("\n"), reasoning.strip("\n")
        else:
            content, reasoning = _split_thinking(content)
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
            rest, calls = parse_text_tool_calls(
                content, prepared.tool_names, limit=prepared.tool_limit
            )
            if calls:
                ids = [_call_id() for _ in calls]
                self.tool_texts.put(tuple(ids), rest, calls, content)
                out_message["content"] = None if prepared.forced else rest or None
        elif prepared.parse_tools and prepared.tool_mode == "native":
            found = list(message.get("tool_calls") or [])
            if not found and end_at is None and info.end_tokens:
                # A whole call whose end-of-turn token did not fit is still a call: parse
                # the reply as if the turn had ended there.
                ended, _ = renderer.parse_response(
                    _as_parsed(prepared.prefill_tokens + tokens + [info.end_tokens[0]], info)
                )
                if ended.get("tool_calls"):
                    message, found = ended, list(ended["tool_calls"])
                    content, _ = _text_and_thinking(ended.get("content", ""))
            native = [c for c in found if c.function.name in prepared.tool_names][
                : prepared.tool_limit
            ]
            calls = [(c.function.name, c.function.arguments) for c in native]
            ids = [c.id or _call_id() for c in native]
            if calls and (prepared.forced or not content.strip()):
                out_message["content"] = None
            elif calls:
                out_message["content"] = content
        if calls:
            out_message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for call_id, (name, arguments) in zip(ids, calls, strict=True)
            ]
            finish = "tool_calls"
        if reasoning:
            out_message["reasoning_content"] = reasoning
        if info.splices:
            before = prepared.prompt_tokens[
                : len(prepared.prompt_tokens) - len(prepared.prefill_tokens)
            ]
            self.sampled_turns.put(
                before,
                message_key(out_message["content"], calls),
                prepared.prefill_tokens + tokens,
                reasoning,
            )
        return {
            "index": index,
            "message": out_message,
            "finish_reason": finish,
            "logprobs": _openai_logprobs(tokenizer, tokens, logprobs, topk)
            if body.logprobs
            else None,
            "prompt_token_ids": prepared.prompt_tokens,
            "token_ids": tokens,
            "token_logprobs": logprobs,
            "policy_version": version,
            # The sampler's name for the sequence (a prefix of which `token_ids` is): a
            # stable_reinforce datum names it in its provenance.
            "sequence_id": getattr(sequence, "sequence_id", None) or "",
        }


def _verbatim_texts(body: ChatCompletionRequest) -> Iterator[str]:
    """The request's text that any renderer puts into the prompt verbatim: the content of
    its system, developer, user and tool messages and its tool names and descriptions.
    Assistant messages are left out: a renderer may drop parts of earlier replies
    (thinking)."""
    for m in body.messages:
        if m.role == "assistant" or m.content is None:
            continue
        if isinstance(m.content, str):
            yield m.content
        else:
            yield from (p["text"] for p in m.content if isinstance(p.get("text"), str))
    for t in body.tools or []:
        yield t.function.name
        yield t.function.description


def prompt_chars(body: ChatCompletionRequest) -> int:
    """How many characters the prompt holds at least (cheap: lengths only)."""
    return sum(len(text) for text in _verbatim_texts(body))


def _fewest_tokens(body: ChatCompletionRequest, max_token_chars: int) -> tuple[int, int]:
    """The fewest tokens the prompt can have, and the characters that bound counts: those
    of the verbatim text less ASCII whitespace (a tokenizer may fold runs of it)."""
    chars = sum(
        len(text) - sum(text.count(c) for c in " \t\n\r\f\v") for text in _verbatim_texts(body)
    )
    return -(-chars // max_token_chars), chars


def _tokenizer_context_length(tokenizer: Any) -> int | None:
    """A tokenizer's `model_max_length`, when it is set to a real context length
    (Hugging Face uses a huge number for unknown)."""
    value = getattr(tokenizer, "model_max_length", None)
    return value if isinstance(value, int) and 0 < value <= 10_000_000 else None


def _max_token_chars(tokenizer: Any) -> int | None:
    """The most characters one token can stand for: the longest entry of the vocabulary
    (byte-level vocabularies spell a token with one character per byte, so no token decodes
    to more characters than its entry has). None if the tokenizer has no `get_vocab`."""
    try:
        vocab = tokenizer.get_vocab()
        return max((len(entry) for entry in vocab), default=0) or None
    except Exception:
        return None


def _too_long(context_length: int, what: str) -> RequestError:
    return RequestError(
        400,
        f"this model's maximum context length is {context_length} tokens; {what}",
        param="messages",
        code="context_length_exceeded",
    )


def _signature(body: ChatCompletionRequest) -> tuple[Any, ...]:
    """Everything `prepare` reads from a request: equal signatures render equal prompts."""
    messages = tuple(
        (
            m.role,
            m.content
            if m.content is None or isinstance(m.content, str)
            else json.dumps(m.content, sort_keys=True),
            m.name,
            m.tool_call_id,
            tuple((c.id, c.function.name, c.function.arguments) for c in m.tool_calls)
            if m.tool_calls is not None
            else None,
            json.dumps(m.annotations) if m.annotations is not None else None,
            m.reasoning_content,
        )
        for m in body.messages
    )
    tools = (
        tuple(
            (
                t.function.name,
                t.function.description,
                json.dumps(t.function.parameters, sort_keys=True),
                t.function.strict,
            )
            for t in body.tools
        )
        if body.tools is not None
        else None
    )
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


def _as_parsed(tokens: list[int], info: RendererInfo) -> list[int]:
    """A sample as the renderer parses it: one that ended at an end token other than the
    renderer's own ends at the renderer's (which parsers look for)."""
    own = [t for t in info.stops if isinstance(t, int)]
    if tokens and own and tokens[-1] in info.end_tokens and tokens[-1] not in own:
        return [*tokens[:-1], own[0]]
    return tokens


def _split_thinking(text: str) -> tuple[str, str]:
    """A reply that opens with a `<think>` block, as (content, reasoning), for renderers
    that do not parse it themselves; otherwise (text, "")."""
    head = text.lstrip()
    if not head.startswith("<think>") or "</think>" not in head:
        return text, ""
    reasoning, _, rest = head[len("<think>") :].partition("</think>")
    return rest.lstrip("\n"), reasoning.strip("\n")


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


def _openai_logprobs(
    tokenizer: Any, tokens: list[int], logprobs: list[float], topk: Any
) -> dict[str, Any]:
    content = []
    for position, (token, logprob) in enumerate(zip(tokens, logprobs, strict=True)):
        text = tokenizer.decode([token])
        top = []
        if topk and position < len(topk) and topk[position]:
            for alt, alt_logprob in topk[position]:
                alt_text = tokenizer.decode([int(alt)])
                top.append(
                    {
                        "token": alt_text,
                        "logprob": float(alt_logprob),
                        "bytes": list(alt_text.encode("utf-8")),
                    }
                )
        content.append(
            {
                "token": text,
                "logprob": logprob,
                "bytes": list(text.encode("utf-8")),
                "top_logprobs": top,
            }
        )
    return {"content": content, "refusal": None}


def usage(prepared: Prepared, choices: list[dict[str, Any]]) -> dict[str, int]:
    completion = sum(len(c["token_ids"]) for c in choices)
    prompt = len(prepared.prompt_tokens)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
