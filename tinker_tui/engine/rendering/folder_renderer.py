"""Which renderer a local Hugging Face model folder gets, and the end tokens a model declares.

A folder carries the chat template its model was trained with; that template is the truth
about its prompts. A family tinker-cookbook knows (Qwen3, Llama 3, gpt-oss, DeepSeek, Kimi)
renders through the cookbook's renderer for that family when, and only when, the renderer
agrees token for token with the folder's own template on probe conversations (a system
message, tools, tool calls, tool results, several turns). Why the cookbook's renderer and not
the template, when they agree: the renderer also knows the family's reply format (it parses
native tool calls and `<think>` reasoning, and writes the opening of a forced call), renders
message by message (so a sampled reply can be put back into the next prompt as its exact
tokens), and is the very code the Tinker path runs for that model, so a run's tokens do not
depend on the backend. A folder whose family is unknown, or whose template differs from every
candidate (a fine-tune's own template), renders through its template
(`engine.rendering.chat_template_renderer`); a folder without a template gets role_colon.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Cookbook renderers to try per `model_type` of a folder's config.json, most likely first.
CANDIDATES: dict[str, tuple[str, ...]] = {
    "qwen3": ("qwen3_instruct", "qwen3", "qwen3_disable_thinking"),
    "qwen3_moe": ("qwen3_instruct", "qwen3", "qwen3_disable_thinking"),
    "llama": ("llama3",),
    "gpt_oss": ("gpt_oss_no_sysprompt", "gpt_oss_medium_reasoning"),
    "deepseek_v3": ("deepseekv3", "deepseekv3_thinking", "deepseekv3_disable_thinking"),
    "kimi_k2": ("kimi_k2",),
}

_TOOL = {
    "name": "lookup",
    "description": "Look a word up.",
    "parameters": {
        "type": "object",
        "properties": {"word": {"type": "string"}},
        "required": ["word"],
    },
}


def _probes() -> list[tuple[list[dict[str, Any]], bool]]:
    """(OpenAI-shaped conversation, with tools) pairs the renderer must agree on."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"word": "tea"}'},
    }
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": "What is tea?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "a drink", "tool_call_id": "call_1"},
        {"role": "assistant", "content": "A drink."},
        {"role": "user", "content": "And  coffee?\n"},
    ]
    system = {"role": "system", "content": "Be brief."}
    return [
        ([system, turns[0]], False),
        ([system, *turns], False),
        ([system, *turns], True),
        (turns, True),
        (turns[:3], True),
    ]


def _cookbook_messages(
    renderer: Any, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[Any]:
    from tinker_cookbook.renderers import ToolCall

    out: list[Any] = []
    for m in conversation:
        message = dict(m)
        if "tool_calls" in m:
            message["tool_calls"] = [
                ToolCall(
                    id=c["id"],
                    function=ToolCall.FunctionBody(
                        name=c["function"]["name"], arguments=c["function"]["arguments"]
                    ),
                )
                for c in m["tool_calls"]
            ]
        out.append(message)
    if tools is not None:
        system = ""
        if out and out[0]["role"] == "system":
            system = out.pop(0)["content"]
        out = list(renderer.create_conversation_prefix_with_tools(tools, system)) + out
    return out


def agrees_with_template(renderer: Any, tokenizer: Any) -> bool:
    """Whether `renderer` renders the probe conversations as the folder's template does."""
    from tinker_tui.engine.rendering.chat_template_renderer import _ids

    for conversation, with_tools in _probes():
        tools = [_TOOL] if with_tools else None
        try:
            expected = _ids(
                tokenizer.apply_chat_template(
                    conversation,
                    tools=[{"type": "function", "function": _TOOL}] if tools else None,
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=False,
                )
            )
            messages = _cookbook_messages(renderer, conversation, tools)
            got = renderer.build_generation_prompt(messages).to_ints()
        except Exception:
            return False
        if got != expected:
            return False
    return True


def model_type(folder: Path) -> str | None:
    try:
        value = json.loads((Path(folder) / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def folder_renderer(
    folder: str | Path, tokenizer: Any, make: Callable[[str, Any], Any]
) -> tuple[Any, str]:
    """The renderer for a model folder and its name (see the module docstring). `make`
    builds a cookbook renderer by name."""
    if getattr(tokenizer, "chat_template", None):
        for name in CANDIDATES.get(model_type(Path(folder).expanduser()) or "", ()):
            try:
                renderer = make(name, tokenizer)
            except Exception:
                continue
            if agrees_with_template(renderer, tokenizer):
                return renderer, name
    from tinker_tui.engine.rendering.chat_template_renderer import renderer_for_tokenizer

    renderer = renderer_for_tokenizer(tokenizer)
    return renderer, "chat_template" if getattr(tokenizer, "chat_template", None) else "role_colon"


def declared_end_tokens(tokenizer: Any, base_model: str) -> list[int]:
    """Every end token the model declares: the tokenizer's EOS and the `eos_token_id` (an id
    or a list) of a generation_config.json beside the model (its folder, the tokenizer's
    folder, or a cached hub copy of either). Renderers stop at their end of turn only; a
    model may end with any of these."""
    ends: list[int] = []
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ends.append(eos)
    for where in dict.fromkeys([base_model, str(getattr(tokenizer, "name_or_path", "") or "")]):
        if not where:
            continue
        ends.extend(_generation_eos(where))
    return list(dict.fromkeys(ends))


def _generation_eos(where: str) -> list[int]:
    path: Path | None = Path(where).expanduser() / "generation_config.json"
    if path is None or not path.is_file():
        path = None
        if "/" in where and not Path(where).expanduser().exists():
            try:
                from huggingface_hub import try_to_load_from_cache

                cached = try_to_load_from_cache(where.split(":")[0], "generation_config.json")
                path = Path(cached) if isinstance(cached, str) else None
            except Exception:
                path = None
    if path is None:
        return []
    try:
        value = json.loads(path.read_text()).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []
