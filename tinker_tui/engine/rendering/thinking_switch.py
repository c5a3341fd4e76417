"""`reasoning_effort` on a policy whose chat format has a thinking switch.

Qwen3's hybrid models and Qwen3.5/3.6 take one switch, `enable_thinking`, in their chat
template: on (the default) the reply starts with a `<think>` block; off, the template
writes an empty `<think>\\n\\n</think>\\n\\n` ahead of the reply. tinker-cookbook renders
each setting with a renderer of its own (`qwen3` / `qwen3_disable_thinking`,
`qwen3_5` / `qwen3_5_disable_thinking`), so a request's `reasoning_effort` picks the
renderer of that setting. The families have an on/off switch, not levels: "none" and
"minimal" turn thinking off, every other effort turns it on. A policy whose renderer has
no such switch (an instruct-only model, the embedded model) refuses the parameter:
silently ignoring it would train on replies the agent did not ask for.
"""

from __future__ import annotations

from typing import Any

from tinker_tui.engine.errors import TinkerTuiError
from tinker_tui.engine.rendering.cookbook_private import renderer_name_of

#: The efforts that turn thinking off; any other effort turns it on.
THINKING_OFF = frozenset({"none", "minimal"})

#: Renderer name -> (thinking on, thinking off), for the families with a thinking switch.
SWITCHES: dict[str, tuple[str, str]] = {}
for _on, _off in (("qwen3", "qwen3_disable_thinking"), ("qwen3_5", "qwen3_5_disable_thinking")):
    SWITCHES[_on] = SWITCHES[_off] = (_on, _off)


class NoThinkingSwitch(TinkerTuiError, ValueError):
    """The policy's renderer has no thinking switch; the message says which it is (the
    server answers it as a 400, the request's mistake)."""


def thinking_on(effort: str) -> bool:
    """Whether a `reasoning_effort` asks for thinking (see the module docstring)."""
    return effort not in THINKING_OFF


class ThinkingSwitch:
    """The renderer a request's `reasoning_effort` asks for: the policy's own when it is
    already of that setting, else its family's other renderer, built once per policy
    renderer (same tokenizer)."""

    def __init__(self) -> None:
        self._built: dict[tuple[int, str], Any] = {}

    def renderer_for(self, renderer: Any, effort: str) -> Any:
        name = renderer_name_of(renderer)
        pair = SWITCHES.get(name or "")
        if pair is None:
            raise NoThinkingSwitch(
                f"reasoning_effort needs a model with a thinking switch (Qwen3 hybrid, "
                f"Qwen3.5/3.6: renderers {', '.join(sorted(SWITCHES))}); this policy "
                f"renders with {name or type(renderer).__name__}, which has none"
            )
        wanted = pair[0] if thinking_on(effort) else pair[1]
        if wanted == name:
            return renderer
        key = (id(renderer), wanted)
        built = self._built.get(key)
        if built is None:
            from tinker_cookbook.renderers import get_renderer

            try:
                built = get_renderer(wanted, renderer.tokenizer)
            except Exception as exc:
                raise NoThinkingSwitch(
                    f"reasoning_effort {effort!r} needs the {wanted} renderer, which "
                    f"cannot be built for this policy ({type(exc).__name__}: {exc})"
                ) from None
            self._built = {k: v for k, v in self._built.items() if k[0] == id(renderer)}
            self._built[key] = built
        return built
