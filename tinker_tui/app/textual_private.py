"""Every use the dashboard makes of Textual's private names, in one module.

Textual is pinned (pyproject.toml), and these are what a new release may rename or drop
without a word: each is listed in `PRIVATE_NAMES`, and the suite checks the installed
Textual still has every one (tests/test_private_names.py), naming the one that is gone.
No other module of the project reaches into Textual's private names (the same test reads
the source for that).

Why each is used:
- `App._init_mode`, `App._css_update_count`, `Screen._css_update_count`: composing a view
  before it is first shown (`compose_mode_now`).
- `Screen._on_screen_resume`: a view switched back to is not restyled (`ResumesUnstyled`).
- `Footer._bindings_ready`: the key footer composes its keys only once they are known.
- `DOMNode._bindings`, `Widget._on_key`: a widget's own key bindings, run in the order
  keys arrive (`widgets.in_order_keys`; `KeysInOrder` overrides `_on_key`).
- `Tree._tree_lines`: number a tree's lines after nodes were expanded or changed, so the
  cursor can be moved to a node at once.
- `App._driver`: write a desktop notification's escapes to the terminal between frames, as
  `App.bell` writes the bell (`write_to_terminal`, for `run --notify`).
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.app import App
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Tree

#: (owner, name): the private names used below, each of a class or module of Textual.
PRIVATE_NAMES = (
    ("textual.app.App", "_init_mode"),
    ("textual.app.App", "_css_update_count"),
    ("textual.screen.Screen", "_css_update_count"),
    ("textual.screen.Screen", "_on_screen_resume"),
    ("textual.widgets.Footer", "_bindings_ready"),
    ("textual.widgets.Tree", "_tree_lines"),
    ("textual.dom.DOMNode", "_bindings"),
    ("textual.widget.Widget", "_on_key"),
    ("textual.app.App", "_driver"),
)


def compose_mode_now(app: App[Any], mode: str) -> None:
    """Compose `mode`'s screen without showing it, as `switch_mode` does first
    (`_init_mode`), which styles the new screen with the CSS of now; then mark it as such,
    as `refresh_css` marks the screens it updates, so that showing it later reparses the
    CSS only if it changed meanwhile (a theme)."""
    app._init_mode(mode)
    screen = app.get_screen_stack(mode)[0]
    screen._css_update_count = app._css_update_count


class ResumesUnstyled(Screen[None]):
    """A screen that, switched back to, resumes as a screen popped back to does: without
    restyling every widget. `App.switch_mode` asks for a restyle, which dirties every
    widget (the reward chart redraws all its points) and costs more CPU than the rest of
    the switch, while the key that switched waits. Nothing it would change can have
    changed: the app's CSS (a theme) is applied by `switch_mode` itself to a screen that
    missed it, and the views are not styled while hidden."""

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        if event.refresh_styles:
            event.prevent_default()  # Screen's handler runs once, below, without it
            super()._on_screen_resume(events.ScreenResume(refresh_styles=False))


def write_to_terminal(app: App[Any], text: str) -> None:
    """Write `text` (escapes) to the app's terminal through its driver, as `App.bell`
    does: never into the middle of a frame. Nothing when headless (tests, snapshots)."""
    driver = app._driver
    if not app.is_headless and driver is not None:
        driver.write(text)


def bindings_ready(footer: Footer) -> bool:
    """Whether a footer's screen has told it its bindings (it composes no keys before)."""
    return bool(footer._bindings_ready)


def number_tree_lines(tree: Tree[Any]) -> None:
    """Have `tree` number its lines now (its `_tree_lines`, rebuilt when read): after nodes
    were expanded or changed, before the cursor is moved to one of them."""
    tree._tree_lines  # noqa: B018  # read for its effect


def own_bindings(widget: Widget, key: str) -> tuple[Any, ...]:
    """The bindings `widget` itself declares for `key` (not its ancestors')."""
    return tuple(widget._bindings.key_to_bindings.get(key, ()))


class KeysInOrder:
    """A widget whose keys are taken as they arrive (`take_key`, set by the subclass):
    Textual calls the `_on_key` of every class of a widget's MRO in turn until one
    prevents the default, so a mixin placed first runs before its bases'."""

    async def take_key(self, event: events.Key) -> None:
        raise NotImplementedError

    async def _on_key(self, event: events.Key) -> None:
        await self.take_key(event)
