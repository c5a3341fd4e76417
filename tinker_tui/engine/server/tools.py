"""Tools, for renderers with a tool format of their own and for those without one.

A renderer with native tool support (Qwen3, Llama 3, gpt-oss, ... in tinker-cookbook) renders
the tool specs and parses tool calls in the model's own format. A renderer without it
(role_colon, which the embedded model uses) gets the text protocol: the tool specs go into the
system message (one JSON object per line after `TOOLS_HEADER`), and a tool call is a JSON
object `{"name": "<tool>", "arguments": {...}}` in the reply; the rest of the reply is the
content. tool_choice "required" and a named function are enforced by prefilling the start
of that JSON object (text protocol only), cut where the whole call's own tokens break
(`forced_call_prefill`), and, where the backend samples here, by keeping the rest of the
reply within the call's shape (`engine.server.tool_call_constraint`). Tool results reach the model as user messages,
`TOOL_RESULT` (role_colon's replies end at "\n\nUser:", so the next prompt then extends
exactly what was sampled).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

#: The first line of the system-message section that lists tools (text protocol).
TOOLS_HEADER = "You can call these tools (one JSON object each):"
TOOLS_INSTRUCTION = (
    "To call a tool, write a JSON object on a line of its own: "
    '{"name": "<tool name>", "arguments": {<arguments>}}'
)
#: How a tool result reaches the model in the text protocol: as a user message.
TOOL_RESULT = "Tool {name} returned: {content}"


def text_tool_section(tools: Sequence[dict[str, Any]]) -> str:
    """The system-message text that offers tools to a renderer without native tool support."""
    lines = [
        json.dumps(
            {"name": t["name"], "description": t["description"], "parameters": t["parameters"]},
            ensure_ascii=False,
        )
        for t in tools
    ]
    return "\n".join([TOOLS_HEADER, *lines, TOOLS_INSTRUCTION])


def format_text_tool_call(name: str, arguments: Any) -> str:
    """A tool call in the text protocol, as the model is asked to write it."""
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


def forced_call_prefill(
    tokenizer: Any, content_prefix: str, tool_names: Sequence[str], forced_name: str | None
) -> tuple[str, list[int]]:
    """The prefill of a forced tool call in the text protocol: its text and its tokens.

    The wanted start is `content_prefix` + `{"name": "` (tool_choice "required") or
    `{"name": "<tool>", "arguments":` (a named tool). It is cut back to the last place where
    the tokens of a whole call, written as the model is taught to write it, break: a prefill
    that ended inside a token the model writes (`"arguments": ` before ` {`, with a
    tokenizer that merges ` {`) leaves the model a continuation it never saw, and no call
    parses. The tokens are that whole call's own first tokens, so the prompt ends exactly
    where a sampled call would be at that point."""
    name = forced_name or tool_names[0]
    head = (
        f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments":'
        if forced_name
        else '{"name": "'
    )
    wanted = content_prefix + head
    whole = content_prefix + format_text_tool_call(name, {})
    return longest_prefix_of(
        tokenizer, list(tokenizer.encode(whole, add_special_tokens=False)), wanted
    )


def longest_prefix_of(tokenizer: Any, tokens: list[int], wanted: str) -> tuple[str, list[int]]:
    """The longest start of `tokens` whose text is a start of `wanted` (a prefill cut where
    the tokens of a whole call break), as (text, tokens)."""
    cut = 0
    for k in range(1, len(tokens) + 1):
        text = tokenizer.decode(tokens[:k])
        if len(text) > len(wanted):
            break
        if wanted.startswith(text):
            cut = k
    return (tokenizer.decode(tokens[:cut]) if cut else ""), tokens[:cut]


def _not_json(word: str) -> Any:
    """NaN and Infinity, which Python's decoder takes and JSON does not."""
    raise ValueError(f"{word} is not JSON")


def _encode(arguments: dict[str, Any]) -> str | None:
    """Arguments as JSON, or None if they cannot be (a number beyond a float64 read as
    infinity, which JSON cannot write)."""
    try:
        return json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return None


def parse_text_tool_calls(
    text: str, tool_names: Sequence[str], *, limit: int | None = None
) -> tuple[str, list[tuple[str, str]]]:
    """Split a reply into content and tool calls written in the text protocol.

    A tool call is a JSON object with a `name` among `tool_names` and an `arguments` object
    (or a string holding one; missing means {}), and no other keys. Returns the rest of the
    text (stripped) and the calls as (name, arguments as a JSON string), at most `limit`."""
    decoder = json.JSONDecoder(parse_constant=_not_json)
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
                arguments = decoder.decode(arguments)
            except ValueError:
                arguments = None
        encoded = _encode(arguments) if isinstance(arguments, dict) else None
        if (
            isinstance(obj, dict)
            and obj.get("name") in names
            and encoded is not None
            and set(obj) <= {"name", "arguments"}
        ):
            calls.append((obj["name"], encoded))
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


def supports_native_tools(renderer: Any) -> bool:
    try:
        renderer.create_conversation_prefix_with_tools(
            [{"name": "probe", "description": "", "parameters": {"type": "object"}}], ""
        )
    except NotImplementedError:
        return False
    except Exception:
        return True  # it tried: tool support exists, the probe was just odd
    return True


def content_prefix(renderer: Any) -> str:
    """The text a renderer puts between an assistant header and its content (" " for
    role_colon), which a prefill must start with to render like a sampled reply."""
    from tinker_cookbook.renderers import RenderContext

    marker = "QQmarkerQQ"
    try:
        rendered = renderer.render_message(
            {"role": "assistant", "content": marker}, RenderContext(idx=1, is_last=True)
        )
        if rendered.header is None:
            # A renderer that renders whole turns (a folder's chat template): the text
            # between the generation prompt and the reply, so the header is not repeated.
            question = [{"role": "user", "content": "hi"}]
            decode = renderer.tokenizer.decode
            prompt = decode(renderer.build_generation_prompt(question).to_ints())
            whole = decode(
                renderer.build_supervised_example(
                    [*question, {"role": "assistant", "content": marker}]
                )[0].to_ints()
            )
            if not whole.startswith(prompt):
                return ""
            text = whole[len(prompt) :]
        else:
            tokens = [t for chunk in rendered.output for t in getattr(chunk, "tokens", [])]
            text = renderer.tokenizer.decode(tokens)
    except Exception:
        return ""
    return text.split(marker, 1)[0] if marker in text else ""


class ToolTextCache:
    """The exact reply text behind tool calls the server returned, by their call ids, so an
    assistant message echoed back renders as the tokens that were sampled (text protocol)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, ...], tuple[str, list[tuple[str, str]], str]] = (
            OrderedDict()
        )

    def put(
        self, ids: tuple[str, ...], content: str, calls: list[tuple[str, str]], raw: str
    ) -> None:
        self._items[ids] = (content, calls, raw)
        if len(self._items) > self.size:
            self._items.popitem(last=False)

    def get(self, ids: tuple[str, ...], content: str, calls: list[tuple[str, str]]) -> str | None:
        item = self._items.get(ids)
        if item is None:
            return None
        cached_content, cached_calls, raw = item
        same_calls = len(calls) == len(cached_calls) and all(
            a[0] == b[0] and _json_equal(a[1], b[1])
            for a, b in zip(calls, cached_calls, strict=True)
        )
        return raw if same_calls and content.strip() == cached_content.strip() else None


def _json_equal(a: str, b: str) -> bool:
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return a == b
