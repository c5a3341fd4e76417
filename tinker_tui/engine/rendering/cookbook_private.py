"""Every use the engine makes of tinker-cookbook's private names, in one module.

The cookbook is pinned (pyproject.toml). A renderer built directly rather than through
`get_renderer` (which imports every renderer module, and transformers with them) must be
stamped with the metadata `get_renderer` sets, or it cannot be pickled; the cookbook's
`Renderer` documents those three attributes, all private. Each is in `PRIVATE_NAMES`; the
suite checks the installed cookbook still has every one (tests/test_private_names.py) and
that no other module reaches into the cookbook's privates.
"""

from __future__ import annotations

from typing import Any

#: (owner, name): the private names used below.
PRIVATE_NAMES = (
    ("tinker_cookbook.renderers.base.Renderer", "_renderer_name"),
    ("tinker_cookbook.renderers.base.Renderer", "_model_name"),
    ("tinker_cookbook.renderers.base.Renderer", "_has_image_processor"),
    ("tinker_cookbook.renderers.base.Renderer", "_bos_tokens"),
    ("tinker_cookbook.renderers.base.Renderer", "_last_assistant_turn_start_index"),
    ("tinker_cookbook.renderers.base.Renderer", "_get_generation_suffix"),
)


def stamp_as_get_renderer_does(renderer: Any, name: str, model_name: str) -> None:
    """Set what `tinker_cookbook.renderers.get_renderer(name, tokenizer)` sets on the
    renderer it builds (no image processor)."""
    renderer._renderer_name = name
    renderer._model_name = model_name
    renderer._has_image_processor = False


def renderer_name_of(renderer: Any) -> str | None:
    """The name a cookbook renderer was built by (`get_renderer` stamps it), if any."""
    name = getattr(renderer, "_renderer_name", None)
    return name if isinstance(name, str) else None


def bos_tokens(renderer: Any) -> list[int]:
    """The tokens `build_generation_prompt` starts a prompt with."""
    return list(getattr(renderer, "_bos_tokens", []) or [])


def last_assistant_turn_start(renderer: Any, messages: Any) -> int:
    """Where the last assistant turn starts, as `build_generation_prompt` finds it."""
    return int(renderer._last_assistant_turn_start_index(messages))


def generation_suffix(renderer: Any, role: str, ctx: Any) -> list[int]:
    """The tokens `build_generation_prompt` ends a prompt with (the role's header)."""
    return list(renderer._get_generation_suffix(role, ctx))
