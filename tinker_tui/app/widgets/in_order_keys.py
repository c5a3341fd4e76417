"""Keys that arrive together (a paste, tmux, a laggy SSH link) apply whole and in order.

Textual gives a key to the focused widget's queue; a printable key is typed there, but a
bound key (backspace, arrows, enter) runs only once its event has bubbled through every
parent's queue up to the app, so the keys behind it overtake it: `backspace 0 . 8 enter`
typed "0.8", then deleted the 8 and submitted "0.". And keys queued behind one that opens a
dialog reached the view under it, which ignored them; keys typed right behind one that moves
the focus (`/` opens the rollouts filter) reached the widget that had it. A widget whose
`_on_key` starts with `take_key_in_order` has none of these problems.
"""

from __future__ import annotations

from textual import events
from textual.widget import Widget
from textual.widgets import Input

from tinker_tui.app.textual_private import KeysInOrder, own_bindings


async def take_key_in_order(widget: Widget, event: events.Key) -> None:
    """Run `widget`'s own binding for `event` now; or, when a dialog covers its screen or
    the focus has moved away from it (the key was typed in the same burst as the key that
    opened the dialog or moved the focus), pass the key on to the app, which gives it to the
    dialog (`hold_keys`) or the focused widget. Other keys go on as Textual sends them.

    Textual calls the `_on_key` of every class of a widget's MRO in turn until one prevents
    the default: a subclass's `_on_key` that calls this first runs before its bases'."""
    focused = widget.app.focused
    moved = focused is not None and focused is not widget and widget not in focused.ancestors
    if widget.screen is not widget.app.screen or moved:
        event.stop()
        event.prevent_default()
        widget.app.post_message(events.Key(event.key, event.character))
        return
    if event.is_printable and isinstance(widget, Input):
        return  # typed
    for binding in own_bindings(widget, event.key):
        if not binding.priority and await widget.app.run_action(binding.action, widget):
            event.stop()
            event.prevent_default()
            return


class InOrderInput(KeysInOrder, Input):
    """A text field whose editing keys apply in the order they were typed."""

    async def take_key(self, event: events.Key) -> None:
        await take_key_in_order(self, event)
