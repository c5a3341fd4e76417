"""`q` / `ctrl+c`: confirm before stopping a run (or, when attached, choose between
stopping the run and detaching from it); asked again while it stops, stop it at once."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

# What the dialog returns
STOP = "stop"
DETACH = "detach"
FORCE = "force"

TEXTS = {
    "stop": (
        "Stop the run?",
        "The current step finishes, a checkpoint is written and the store is flushed.",
    ),
    "stop_attached": (
        "Stop the run or detach?",
        "Stop: the run (in its own process) finishes the step, checkpoints and "
        "exits. Detach: close this dashboard; the run goes on.",
    ),
    "force": (
        "Quit now?",
        "The run is still stopping (finishing the step, writing the checkpoint). "
        "Quitting now skips that: the run ends at once, its store intact (--resume "
        "continues from the last checkpoint).",
    ),
    "force_attached": (
        "Stop at once?",
        "The run is still stopping (finishing the step, writing the "
        "checkpoint). Stop now: it ends at once, its store intact (--resume "
        "continues from the last checkpoint). Detach: leave; it finishes "
        "stopping by itself.",
    ),
    "stop_sweep": (
        "Stop the sweep or detach?",
        "Stop: every run finishes its step, checkpoints and exits, and no more "
        "start (sweep --resume continues). Detach: close this dashboard; the "
        "sweep goes on.",
    ),
}
#: Kinds that offer to detach (the run is in another process).
DETACHABLE = ("stop_attached", "force_attached", "stop_sweep")


class QuitScreen(ModalScreen[str | None]):
    """Returns STOP, DETACH, FORCE, or None for cancel.

    Args:
        kind: "stop", "stop_attached", "force" or "force_attached".
    """

    BINDINGS = [
        Binding("y,q,ctrl+c", "confirm", "Yes", id="confirm_yes", priority=True),
        Binding("d", "detach", "Detach", id="confirm_detach"),
        Binding("n,escape", "cancel", "Cancel", id="confirm_cancel"),
    ]

    def __init__(self, kind: str = "stop") -> None:
        super().__init__()
        self.kind = kind

    def compose(self) -> ComposeResult:
        title, text = TEXTS[self.kind]
        with Vertical(id="quit-dialog", classes="dialog"):
            yield Static(text, id="quit-text")
            with Horizontal(id="quit-buttons"):
                if self.kind == "force":
                    yield Button("Quit now (y)", id="quit-confirm", variant="error")
                elif self.kind == "force_attached":
                    yield Button("Stop now (y)", id="quit-confirm", variant="error")
                else:
                    yield Button("Stop run (y)", id="quit-confirm", variant="error")
                if self.kind in DETACHABLE:
                    yield Button("Detach (d)", id="quit-detach", variant="primary")
                yield Button("Cancel (n)", id="quit-cancel")

    def on_mount(self) -> None:
        dialog = self.query_one("#quit-dialog")
        dialog.border_title = TEXTS[self.kind][0]
        self.query_one("#quit-cancel", Button).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "detach":
            return self.kind in DETACHABLE
        return True

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        {"quit-confirm": self.action_confirm, "quit-detach": self.action_detach}.get(
            event.button.id or "", self.action_cancel
        )()

    def action_confirm(self) -> None:
        self.dismiss(FORCE if self.kind.startswith("force") else STOP)

    def action_detach(self) -> None:
        self.dismiss(DETACH)

    def action_cancel(self) -> None:
        self.dismiss(None)
