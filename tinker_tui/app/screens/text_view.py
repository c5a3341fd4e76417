"""A line in full: a log message, a checkpoint path, anything a pane had to cut short."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static


class TextScreen(ModalScreen[None]):
    """Shows `text` whole, wrapped and scrollable; escape, enter or q closes it."""

    BINDINGS = [Binding("escape,enter,q", "close", "Close", id="close_text")]

    def __init__(self, title: str, text: str | Content) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="text-dialog", classes="dialog"):
            yield Static(self.text, id="text-body")

    def on_mount(self) -> None:
        dialog = self.query_one("#text-dialog")
        dialog.border_title = self.title_text
        dialog.border_subtitle = "esc closes"
        dialog.focus()

    def action_close(self) -> None:
        self.dismiss(None)
