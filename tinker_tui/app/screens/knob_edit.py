"""Edit one live knob: type a value, see old → new, confirm. The engine's own check of the
value (range) is shown here if it refuses it."""

from __future__ import annotations

from collections.abc import Callable

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

from tinker_tui.app.screens.run_view import host
from tinker_tui.app.view_maths import format_knob, parse_knob_value
from tinker_tui.app.widgets.in_order_keys import InOrderInput

#: What the dialog says until a value is checked.
HINT = "enter: check the value · esc: cancel"
#: Applies a value; returns an error message, or None when the engine took it.
Apply = Callable[[str, float | int], str | None]


class KnobEditScreen(ModalScreen[float | int | None]):
    """Returns the value that was applied, or None if cancelled.

    Args:
        name: The knob.
        current: Its value now.
        apply: Called with the confirmed value (see `Apply`).
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="knob_cancel")]

    def __init__(self, name: str, current: float | int | None, apply: Apply) -> None:
        super().__init__()
        self.knob = name
        self.current = current
        self.apply = apply
        self.pending: float | int | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="knob-dialog", classes="dialog"):
            yield Label(f"now {format_knob(self.knob, self.current)}", id="knob-current")
            yield InOrderInput(
                value=format_knob(self.knob, self.current) if self.current is not None else "",
                id="knob-input",
                select_on_focus=True,
            )
            yield Label(HINT, id="knob-message")
            with Horizontal(id="knob-buttons"):
                yield Button("Apply (enter)", id="knob-apply", variant="warning", disabled=True)
                yield Button("Cancel (esc)", id="knob-cancel")

    def on_mount(self) -> None:
        self.query_one("#knob-dialog").border_title = f"Set {self.knob}"
        self.query_one("#knob-input", Input).focus()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """The field has focus: what was typed while the dialog opened goes into it."""
        host(self.app).release_keys()

    def _message(self, text: str, error: bool = False) -> None:
        label = self.query_one("#knob-message", Label)
        label.update(text)
        label.set_class(error, "-error")

    def on_input_changed(self, event: Input.Changed) -> None:
        """A new value: the message about the last one (an error, a confirmation) goes."""
        self.pending = None
        self.query_one("#knob-apply", Button).disabled = True
        self._message(HINT)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.pending is not None:
            self.confirm()
            return
        try:
            value = parse_knob_value(self.knob, event.value)
        except ValueError as exc:
            self._message(str(exc), error=True)
            return
        self.pending = value
        self.query_one("#knob-apply", Button).disabled = False
        self._message(
            f"{self.knob}: {format_knob(self.knob, self.current)} → "
            f"{format_knob(self.knob, value)}. Enter again to apply."
        )

    def confirm(self) -> None:
        if self.pending is None:
            return
        error = self.apply(self.knob, self.pending)
        if error:
            self.pending = None
            self.query_one("#knob-apply", Button).disabled = True
            self._message(error, error=True)
            return
        self.dismiss(self.pending)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "knob-apply":
            self.confirm()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)
