"""The key footer, rebuilt only when the keys it shows change.

Textual's `Footer` throws its keys away and mounts new ones whenever its screen says its
bindings may have changed: each time a view is switched to, and again when the focus moves
there. Mounting a dozen keys restyles and lays out the screen: tens of milliseconds of CPU
on every view switch, which the key press that switched waits behind. The keys shown (and
whether each is enabled) rarely change, so this footer compares them first.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer

from tinker_tui.app.textual_private import bindings_ready


def shown_keys(screen: Screen) -> tuple[object, ...]:
    """What a footer on `screen` draws from its bindings: each shown key's binding, the
    text it is drawn with, and whether it is enabled."""
    app = screen.app
    return tuple(
        (
            binding.key,
            app.get_key_display(binding),
            binding.description,
            binding.action,
            binding.group,
            enabled,
            tooltip,
            binding.tooltip,
        )
        for _, binding, enabled, tooltip in screen.active_bindings.values()
        if binding.show or binding.key == app.COMMAND_PALETTE_BINDING
    )


class KeyFooter(Footer):
    """A `Footer` that recomposes only when the keys it would show differ from those shown,
    and not while its view is not shown (the app's keys are then worked out for the view
    shown: `s` applies only to some)."""

    def __init__(self, *, compact: bool = False) -> None:
        super().__init__(compact=compact)
        self._composed: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        if bindings_ready(self):
            self._composed = shown_keys(self.screen)
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        if screen is self.screen and screen not in self.app.screen_stack:
            return  # a view not shown: it is checked again when it is
        if (
            self._composed is not None
            and self.is_attached
            and screen is self.screen
            and shown_keys(screen) == self._composed
        ):
            return
        super().bindings_changed(screen)
