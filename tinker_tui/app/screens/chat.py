"""`tinker-tui chat`, and `t` on a checkpoint of the dashboard: a conversation with a
checkpoint of a run.

The model loads behind the run's own policy server (`engine.chat_policy`) while the window
is already up; each answer says how many tokens it took and why it ended (a `length` end
means `max_tokens` cut it). Settings change as you go: `/temp 0.7`, `/max 256`, `/reset`
(a new conversation), `/help`."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from tinker_tui.engine.chat_policy import ChatPolicy, ChatTarget

HELP = "/temp X  sampling temperature · /max N  max tokens · /reset  new conversation · esc leave"


class ChatScreen(Screen[None]):
    """One conversation with one checkpoint; `policy` is opened on mount (a worker) and
    closed with the screen. Pushed over a dashboard, `escape` goes back to it."""

    DEFAULT_CSS = """
    #status { height: auto; padding: 0 1; background: $panel; }
    #turns { height: 1fr; padding: 0 1; }
    .you { color: $accent; margin-top: 1; }
    .model { margin-bottom: 0; }
    .meta { color: $text-muted; }
    .error { color: $error; }
    """
    BINDINGS = [
        Binding("escape", "leave", "Back"),
        Binding("ctrl+r", "reset", "New conversation"),
    ]

    def __init__(
        self,
        target: ChatTarget,
        *,
        temperature: float,
        max_tokens: int,
        system: str = "",
        tools: list[dict[str, Any]] | None = None,
        policy: ChatPolicy | None = None,
    ) -> None:
        super().__init__()
        self.target = target
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.system = system
        self.tools = tools
        self.policy = policy
        self.history: list[dict[str, Any]] = []
        self._reset_history()

    def compose(self) -> ComposeResult:
        yield Static(self._status(), id="status")
        yield VerticalScroll(id="turns")
        yield Input(placeholder="loading the model…", id="say", disabled=True)
        yield Footer()

    def on_mount(self) -> None:
        self.run_worker(self._open(), exclusive=True, group="open")

    async def _open(self) -> None:
        try:
            if self.policy is None:
                self.policy = await ChatPolicy.open(self.target)
        except Exception as exc:
            self._say(f"could not load {self.target.label}: {type(exc).__name__}: {exc}", "error")
            return
        if not self.is_attached:  # left while it loaded
            await self.policy.close()
            return
        self._refresh_status()
        box = self.query_one("#say", Input)
        box.disabled = False
        box.placeholder = "say something · /help: the settings"
        self._say(f"loaded {self.target.label}: {HELP}", "meta")
        box.focus()

    async def on_unmount(self) -> None:
        if self.policy is not None:
            await self.policy.close()

    # ------------------------------------------------------------------ turns

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        event.input.value = ""
        if not text:
            return
        if text.startswith("/"):
            self._command(text)
            return
        self.history.append({"role": "user", "content": text})
        self._say(text, "you")
        event.input.disabled = True
        self.run_worker(self._answer(), exclusive=True, group="answer")

    async def _answer(self) -> None:
        assert self.policy is not None
        box = self.query_one("#say", Input)
        try:
            reply = await self.policy.reply(
                self.history,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                tools=self.tools,
            )
        except Exception as exc:
            self.history.pop()  # not answered: it can be said again
            self._say(f"{type(exc).__name__}: {exc}", "error")
        else:
            self.history.append({"role": "assistant", "content": reply.content})
            calls = "".join(
                f"\n[tool call] {c['name']}({c['arguments']})" for c in reply.tool_calls
            )
            self._say((reply.content or "(empty)") + calls, "model")
            cut = " — cut by max_tokens (/max N)" if reply.finish_reason == "length" else ""
            self._say(f"{reply.tokens} tokens, {reply.finish_reason}{cut}", "meta")
        box.disabled = False
        box.focus()

    def _command(self, text: str) -> None:
        name, _, value = text.partition(" ")
        try:
            if name == "/temp":
                temperature = _number(value, float, "/temp takes a number in [0, 2]")
                if not 0 <= temperature <= 2:
                    raise ValueError("the temperature is in [0, 2]")
                self.temperature = temperature
            elif name == "/max":
                max_tokens = _number(value, int, "/max takes a whole number of tokens")
                if max_tokens < 1:
                    raise ValueError("max tokens is at least 1")
                self.max_tokens = max_tokens
            elif name == "/reset":
                self.action_reset()
                return
            elif name == "/help":
                self._say(HELP, "meta")
                return
            else:
                raise ValueError(f"no command {name}: {HELP}")
        except ValueError as exc:
            self._say(str(exc), "error")
            return
        self._refresh_status()

    def action_leave(self) -> None:
        if isinstance(self.app, ChatApp):  # `tinker-tui chat`: the chat is all there is
            self.app.exit()
        else:  # over a dashboard: back to it
            self.dismiss()

    def action_reset(self) -> None:
        self._reset_history()
        self.query_one("#turns", VerticalScroll).remove_children()
        self._say("a new conversation", "meta")

    def _reset_history(self) -> None:
        self.history = [{"role": "system", "content": self.system}] if self.system else []

    # ------------------------------------------------------------------ drawing

    def _say(self, text: str, kind: str) -> None:
        prefix = {"you": "you: ", "model": "", "meta": "  ", "error": "! "}[kind]
        turns = self.query_one("#turns", VerticalScroll)
        turns.mount(Static(Text(prefix + text), classes=kind))
        turns.scroll_end(animate=False)

    def _status(self) -> str:
        renderer = self.policy.renderer if self.policy is not None else "loading"
        return (
            f"{self.target.label} · {self.target.backend} · {renderer} · "
            f"temp {self.temperature:g} · max {self.max_tokens}"
        )

    def _refresh_status(self) -> None:
        self.query_one("#status", Static).update(self._status())


def _number(text: str, kind: type[float] | type[int], why: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise ValueError(why) from None


class ChatApp(App[None]):
    """`tinker-tui chat`: the chat screen alone (`ctrl+q` or `escape` quits)."""

    TITLE = "tinker-tui chat"
    BINDINGS = [Binding("ctrl+c", "quit", "Quit", show=False)]

    def __init__(self, target: ChatTarget, **settings: Any) -> None:
        super().__init__()
        self.chat = ChatScreen(target, **settings)

    def on_mount(self) -> None:
        self.push_screen(self.chat)
