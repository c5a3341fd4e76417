"""`b`: confirm a rollback, saying what it undoes (the steps after the checkpoint it goes
back to, and the learning rate it cuts), as `q` confirms a stop: a rollback cannot be
taken back."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


def rollback_words(
    *, step: int, to_step: int, checkpoint: str, scale: float, lr: float | None
) -> str:
    """What a rollback from `step` to `to_step` undoes, in one paragraph."""
    undone = max(step - to_step, 0)
    steps = (
        "undoes no steps"
        if undone == 0
        else f"undoes 1 step ({step})"
        if undone == 1
        else f"undoes {undone} steps ({to_step + 1}-{step})"
    )
    rate = f"{lr:g} → {lr * scale:g}, " if lr is not None else ""
    return (
        f"Go back to checkpoint {checkpoint} (step {to_step}): {steps}, and the "
        f"learning rate is scaled ×{scale:g} ({rate}for the rest of the run). The undone "
        "steps leave the store; the run goes on from there."
    )


class RollbackScreen(ModalScreen[bool]):
    """Returns True to roll back, False to cancel."""

    BINDINGS = [
        Binding("y,b", "confirm", "Yes", id="rollback_yes", priority=True),
        Binding("n,escape,q", "cancel", "Cancel", id="rollback_cancel"),
    ]

    def __init__(self, words: str) -> None:
        super().__init__()
        self.words = words

    def compose(self) -> ComposeResult:
        with Vertical(id="rollback-dialog", classes="dialog"):
            yield Static(self.words, id="rollback-text")
            with Horizontal(id="rollback-buttons"):
                yield Button("Roll back (y)", id="rollback-confirm", variant="warning")
                yield Button("Cancel (n)", id="rollback-cancel")

    def on_mount(self) -> None:
        self.query_one("#rollback-dialog").border_title = "Roll back?"
        self.query_one("#rollback-cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "rollback-confirm")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
