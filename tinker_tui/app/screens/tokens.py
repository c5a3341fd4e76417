"""The token view: one trained trajectory token by token, opened with `enter` on a trajectory
in the rollouts view.

Each token is drawn as the tokenizer's piece, coloured by a channel chosen with `c`
(sampled logprob, trainer logprob, their difference, advantage, loss mask, the policy
version that sampled it, and the trainer's entropy where the backend gave it). The cursor
(arrow keys) shows every value of the token under it; `m` jumps to the token whose sampled
and trainer logprobs differ most. Context between turns (tool results, the next user turn)
is drawn dim: it is not trained. The maths is `app.token_channels`'; the arrays come from the
store (`StoreReader.trained_tokens`), so a live run, `show` and `attach` draw the same.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from tinker_tui.app import token_channels as tc
from tinker_tui.app.widgets.footer import KeyFooter
from tinker_tui.engine.events import TrajectoryTokens


class TokensScreen(Screen[None]):
    """The tokens of one trajectory (see the module docstring); `q`/esc closes it."""

    BINDINGS = [
        Binding("c", "next_channel", "Channel", id="tokens_channel"),
        Binding("C", "previous_channel", "Channel back", show=False, id="tokens_channel_back"),
        Binding("m", "largest_mismatch", "Largest mismatch", id="tokens_mismatch"),
        Binding("left,h", "move(-1)", "Token", show=False, id="tokens_left"),
        Binding("right,l", "move(1)", "Token", show=False, id="tokens_right"),
        Binding("up,k", "line(-1)", "Line", show=False, id="tokens_up"),
        Binding("down,j", "line(1)", "Line", show=False, id="tokens_down"),
        Binding("home", "jump(0)", "First", show=False, id="tokens_home"),
        Binding("end", "jump(-1)", "Last", show=False, id="tokens_end"),
        Binding("q,escape", "close", "Close", id="tokens_close"),
    ]

    def __init__(
        self,
        title: str,
        step: int,
        tokens: TrajectoryTokens,
        pieces: Mapping[int, str],
        *,
        channel: str = "diff",
    ) -> None:
        super().__init__(id="tokens")
        self.title_text = title
        self.step = step
        self.tokens = tokens
        self.channels = tc.channels_of(tokens)
        names = [c.name for c in self.channels]
        self.channel_index = names.index(channel) if channel in names else 0
        self.texts, self.breaks = tc.piece_texts(tokens, pieces)
        self.mask = np.asarray(tokens.mask) > 0
        self.turn_of = tc.turns(tokens)
        self.versions = tc.version_order(tokens)
        self.diffs = tc.differences(tokens)
        self.cursor = int(np.flatnonzero(self.mask)[0]) if self.mask.any() else 0
        self._lines: list[list[int]] = []
        self._line_of: dict[int, int] = {}
        self._width = 0

    @property
    def channel(self) -> tc.Channel:
        return self.channels[self.channel_index]

    def compose(self) -> ComposeResult:
        yield Static(id="tokens-title")
        with VerticalScroll(id="tokens-scroll"):
            yield Static(id="tokens-body")
        yield Static(id="tokens-info")
        yield Static(id="tokens-legend")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        scroll = self.query_one("#tokens-scroll")
        scroll.border_title = "Tokens"
        scroll.focus()
        self.call_after_refresh(self.redraw)

    def on_resize(self) -> None:
        self.redraw()

    # ------------------------------------------------------------------ drawing
    def redraw(self) -> None:
        scroll = self.query_one("#tokens-scroll", VerticalScroll)
        width = max(10, scroll.scrollable_content_region.width or self.size.width - 4)
        if width != self._width:
            self._width = width
            self._lines = tc.layout(self.texts, self.breaks, width, cell_len)
            self._line_of = {i: n for n, line in enumerate(self._lines) for i in line}
        self.query_one("#tokens-title", Static).update(Text(self.title_text, style="bold"))
        scroll.border_subtitle = self._summary()
        self.query_one("#tokens-body", Static).update(self._body())
        self.query_one("#tokens-info", Static).update(self._info())
        self.query_one("#tokens-legend", Static).update(self._legend())
        line = self._line_of.get(self.cursor, 0)
        scroll.scroll_to(y=max(0, line - scroll.size.height // 2), animate=False)

    def _summary(self) -> str:
        """Step, sampled tokens of all shown, turns, and the largest mismatch."""
        sampled = int(self.mask.sum())
        turns = int(self.turn_of[self.mask].max()) if sampled else 0
        worst = tc.largest_mismatch(self.tokens)
        text = f"step {self.step} · {sampled}/{len(self.texts)} sampled · {turns} turn(s)"
        if worst is not None:
            text += f" · max |Δ| {abs(self.diffs[worst]):.3g} at #{worst + 1}"
        return text

    def _style(self, i: int, values: np.ndarray) -> Style:
        rgb = tc.colour(self.channel, float(values[i]), bool(self.mask[i]), self.versions)
        dim = not self.mask[i]
        style = Style(
            bgcolor=Color.from_rgb(*rgb) if rgb else None,
            color="bright_white" if rgb else None,
            dim=dim and rgb is None,
        )
        if i == self.cursor:
            style += Style(reverse=True, bold=True, underline=True)
        return style

    def _body(self) -> Text:
        values = tc.values(self.tokens, self.channel.name)
        text = Text(no_wrap=True, overflow="crop")
        for n, line in enumerate(self._lines):
            if n:
                text.append("\n")
            for i in line:
                text.append(self.texts[i], self._style(i, values))
        return text

    def _info(self) -> Text:
        i = self.cursor
        t = self.tokens
        text = Text()
        text.append(f"#{i + 1} ", style="bold")
        text.append(f"id {int(t.tokens[i])} ")
        text.append(repr(self.texts[i]), style="bold")
        if not self.mask[i]:
            text.append("  context (not trained)", style="dim")
            return text
        text.append(f"  turn {int(self.turn_of[i])}  v{int(t.version[i])}\n")
        text.append(
            f"sampled {float(t.sampled[i]):.4f}  trainer {float(t.trainer[i]):.4f}  "
            f"Δ {self.diffs[i]:+.4f}  adv {float(t.advantage[i]):+.3f}"
        )
        if t.entropy is not None and len(t.entropy) == len(t.tokens) and np.isfinite(t.entropy[i]):
            text.append(f"  H {float(t.entropy[i]):.3f}")
        return text

    def _legend(self) -> Text:
        channel = self.channel
        text = Text()
        text.append(channel.label, style="bold")
        if channel.name == "version":
            for v in self.versions:
                rgb = tc.colour(channel, v, True, self.versions)
                text.append("  ")
                text.append(
                    f" v{v} ",
                    Style(bgcolor=Color.from_rgb(*rgb) if rgb else None, color="bright_white"),
                )
        elif channel.name != "mask":
            for v in np.linspace(channel.low, channel.high, 5):
                rgb = tc.colour(channel, float(v), True, self.versions)
                text.append(" ")
                text.append(
                    f" {v:+.2g} " if channel.diverging else f" {v:.2g} ",
                    Style(bgcolor=Color.from_rgb(*rgb) if rgb else None, color="bright_white"),
                )
        return text

    # ------------------------------------------------------------------ keys
    def action_next_channel(self) -> None:
        self.channel_index = (self.channel_index + 1) % len(self.channels)
        self.redraw()

    def action_previous_channel(self) -> None:
        self.channel_index = (self.channel_index - 1) % len(self.channels)
        self.redraw()

    def action_largest_mismatch(self) -> None:
        worst = tc.largest_mismatch(self.tokens)
        if worst is not None:
            self.cursor = worst
            self.redraw()

    def action_move(self, delta: int) -> None:
        self.cursor = min(max(self.cursor + delta, 0), len(self.texts) - 1)
        self.redraw()

    def action_line(self, delta: int) -> None:
        line = self._line_of.get(self.cursor, 0)
        target = min(max(line + delta, 0), len(self._lines) - 1)
        if target == line or not self._lines[target]:
            return
        column = sum(cell_len(self.texts[i]) for i in self._lines[line] if i < self.cursor)
        used = 0
        for i in self._lines[target]:
            used += cell_len(self.texts[i])
            if used > column:
                self.cursor = i
                break
        else:
            self.cursor = self._lines[target][-1]
        self.redraw()

    def action_jump(self, where: int) -> None:
        self.cursor = where if where >= 0 else len(self.texts) - 1
        self.redraw()

    def action_close(self) -> None:
        self.dismiss(None)
