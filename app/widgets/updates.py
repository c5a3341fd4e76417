"""Small helpers so the timer-driven redraw only touches widgets whose content changed.

A `Static.update` always schedules a layout pass; doing that for every label four times a
second costs real CPU on a busy 2-core machine. Comparing first makes idle ticks nearly free.
"""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget
from textual.widgets import Digits, Static


def same_content(old: object, new: str | Content) -> bool:
    if isinstance(new, str):
        return isinstance(old, str) and old == new
    return isinstance(old, Content) and (old.plain, old.spans) == (new.plain, new.spans)


def update_static(widget: Static, content: str | Content) -> None:
    """`widget.update(content)` unless it already shows exactly that."""
    if not same_content(widget.content, content):
        widget.update(content)


def update_digits(widget: Digits, value: str) -> None:
    if widget.value != value:
        widget.update(value)


def set_state_class(widget: Static, state_class: str) -> None:
    """Give `widget` exactly one class, `state_class`, if it has not got it already."""
    if set(widget.classes) != {state_class}:
        widget.set_classes(state_class)


def set_subtitle(widget: Widget, text: str) -> None:
    """Set a border subtitle only when it changes: assigning one always repaints."""
    if getattr(widget, "_shown_subtitle", None) != text:
        widget._shown_subtitle = text  # type: ignore[attr-defined]  # the markup read back differs
        widget.border_subtitle = text
