"""Small helpers so the timer-driven redraw only touches widgets whose content changed.

A `Static.update` schedules a layout pass of the whole screen unless told the size cannot
change; doing that for every label four times a second costs real CPU on a busy 2-core
machine (and delays the keys waiting behind it). Comparing first makes idle ticks nearly
free, and a changed text that cannot change its widget's size is only repainted.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from textual.content import Content
from textual.widget import Widget
from textual.widgets import DataTable, Digits, Static


def same_content(old: object, new: str | Content) -> bool:
    if isinstance(new, str):
        return isinstance(old, str) and old == new
    return isinstance(old, Content) and (old.plain, old.spans) == (new.plain, new.spans)


def line_widths(content: object) -> list[int] | None:
    """The cell width of each line of a text (None for anything else)."""
    if isinstance(content, Content):
        content = content.plain
    if not isinstance(content, str):
        return None
    return [cell_len(line) for line in content.split("\n")]


def same_size(widget: Static, old: object, new: str | Content) -> bool:
    """Whether showing `new` instead of `old` leaves `widget`'s size as it is: its size
    does not follow its content (fixed or fractional width and height, no scrollbars),
    or both texts have lines of the same widths, none wider than the widget (so none
    wraps)."""
    styles = widget.styles
    width, height = styles.width, styles.height
    if (
        width is not None
        and not width.is_auto
        and height is not None
        and not height.is_auto
        and styles.overflow_x == styles.overflow_y == "hidden"
    ):
        return True
    widths = line_widths(new)
    return (
        widths is not None
        and widths == line_widths(old)
        and max(widths) <= widget.content_region.width
    )


def update_static(widget: Static, content: str | Content) -> None:
    """`widget.update(content)` unless it already shows exactly that; without a layout
    pass when its size cannot change."""
    old = widget.content
    if not same_content(old, content):
        widget.update(content, layout=not same_size(widget, old, content))


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


def fit_columns(table: DataTable, rows: Sequence[Sequence[str]]) -> list[int]:
    """Size each of `table`'s columns to its label and its cells in `rows` now, and return
    the widths. A DataTable widens its columns for new rows only when it next goes idle;
    one filled while the app stays busy (a redraw timer, a view composed in the background)
    was drawn with columns as wide as their labels, "sampler" cut to "samp"."""
    widths = []
    for index, column in enumerate(table.ordered_columns):
        column.content_width = max([column.label.cell_len, *(cell_len(row[index]) for row in rows)])
        widths.append(column.content_width)
    return widths
