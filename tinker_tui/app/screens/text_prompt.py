"""Ask for one line of text (a run's name or note, a range of steps): enter checks it and
closes the dialog with it, a refusal is shown in the dialog, esc cancels."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

#: Checks a typed value: an error message, or None when it is good.
Check = Callable[[str], str | None]


class TextPromptScreen(ModalScreen[str | None]):
    """Returns the text entered (checked by `check`), or None if cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt_cancel")]

    def __init__(
        self,
        title: str,
        value: str = "",
        *,
        hint: str = "",
        check: Check | None = None,
        placeholder: str = "",
    ) -> None:
        super().__init__()
        self.title_text = title
        self.value = value
        self.hint = (hint + " · " if hint else "") + "enter: done · esc: cancel"
        self.check = check
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-dialog", classes="dialog"):
            yield Input(
                value=self.value,
                placeholder=self.placeholder,
                id="prompt-input",
                select_on_focus=True,
            )
            yield Label(self.hint, id="prompt-message")

    def on_mount(self) -> None:
        self.query_one("#prompt-dialog").border_title = self.title_text
        self.query_one("#prompt-input", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        label = self.query_one("#prompt-message", Label)
        label.update(self.hint)
        label.remove_class("-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        error = self.check(event.value) if self.check is not None else None
        if error:
            label = self.query_one("#prompt-message", Label)
            label.update(error)
            label.add_class("-error")
            return
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
