"""What a step trained, token by token: the `TokensTrained` event the token view reads.

Built from the step's Datums (targets, sampled logprobs, advantages, the mask and the policy
version of each target) and what `forward_backward` answered (the trainer's logprobs and,
where the backend has it, entropy). A trajectory's Datums are joined; each starts at its
first sampled target (the prompt before it is the scenario's, the same for the whole group,
and most of the bytes). The tokenizer's pieces of ids seen for the first time go with the
event, so a stored run is shown without loading its tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tinker_tui.engine.events import TokensTrained, TrajectoryTokens

if TYPE_CHECKING:
    from tinker_tui.engine.backend.datums import DatumBatch


def trained_tokens(
    datums: DatumBatch | Sequence[Any],
    trainer: Sequence[np.ndarray],
    entropy: Sequence[np.ndarray] | None,
) -> tuple[TrajectoryTokens, ...]:
    """Per trajectory of the batch (`datums` a `DatumBatch` with its sources), its tokens;
    () when the batch does not say which trajectory each Datum trains, or the backend gave
    no trainer logprobs."""
    sources: list[tuple[int, int]] = getattr(datums, "sources", [])
    masks: list[list[float]] = getattr(datums, "masks", [])
    versions: list[list[int]] = getattr(datums, "versions", [])
    if not sources or len(sources) != len(datums) or len(trainer) != len(datums):
        return ()
    parts: dict[tuple[int, int], list[dict[str, np.ndarray]]] = {}
    for i, datum in enumerate(datums):
        mask = np.asarray(masks[i], dtype=np.uint8)
        sampled_at = np.flatnonzero(mask)
        if not len(sampled_at):
            continue
        first = int(sampled_at[0])
        inputs = datum.loss_fn_inputs
        arrays: dict[str, np.ndarray] = {
            "tokens": np.asarray(inputs["target_tokens"].to_numpy(), dtype=np.int32),
            "sampled": np.asarray(inputs["logprobs"].to_numpy(), dtype=np.float32),
            "trainer": np.asarray(trainer[i], dtype=np.float32),
            "advantage": np.asarray(inputs["advantages"].to_numpy(), dtype=np.float32),
            "mask": mask,
            "version": np.asarray(versions[i], dtype=np.int32),
        }
        if entropy is not None:
            arrays["entropy"] = np.asarray(entropy[i], dtype=np.float32)
        group_id, index = sources[i]
        parts.setdefault((int(group_id), int(index)), []).append(
            {name: value[first:] for name, value in arrays.items()}
        )
    out = []
    for (group_id, index), pieces in parts.items():
        joined = {name: np.concatenate([p[name] for p in pieces]) for name in pieces[0]}
        out.append(TrajectoryTokens(group_id=int(group_id), index=int(index), **joined))
    return tuple(out)


class PieceBook:
    """The tokenizer's piece of each token id, decoded once per run: `new_pieces` gives the
    ids of a step not given before (the store keeps one row per id)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.known: set[int] = set()

    def new_pieces(self, trajectories: Sequence[TrajectoryTokens]) -> dict[int, str]:
        if self.tokenizer is None or not trajectories:
            return {}
        ids = set(np.unique(np.concatenate([t.tokens for t in trajectories])).tolist())
        fresh = sorted(ids - self.known)
        self.known.update(fresh)
        return {i: piece_of(self.tokenizer, i) for i in fresh}


def piece_of(tokenizer: Any, token: int) -> str:
    """One token's text as the tokenizer decodes it alone ("" if it cannot). Part of a
    character (byte-level BPE splits an emoji or a CJK character over tokens) decodes to
    U+FFFD alone: such a token is shown by its bytes instead, `‹f0 9f›`."""
    try:
        text = str(tokenizer.decode([token]))
    except Exception:  # a tokenizer that refuses one id must not stop training
        return ""
    if "\ufffd" in text:
        raw = _byte_level_bytes(tokenizer, token)
        if raw is not None:
            return "‹" + " ".join(f"{b:02x}" for b in raw) + "›"
    return text


def _byte_level_bytes(tokenizer: Any, token: int) -> bytes | None:
    """A byte-level BPE token's bytes (GPT-2's byte-to-character table), else None."""
    try:
        name = tokenizer.convert_ids_to_tokens(token)
    except Exception:
        return None
    table = _unicode_to_byte()
    if not isinstance(name, str) or not name or any(c not in table for c in name):
        return None
    return bytes(table[c] for c in name)


def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's table of the characters byte-level BPE writes each byte as, inverted."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def tokens_event(
    time: float,
    step: int,
    trajectories: tuple[TrajectoryTokens, ...],
    book: PieceBook,
    keep_steps: int,
) -> TokensTrained:
    return TokensTrained(
        time=time,
        step=step,
        trajectories=trajectories,
        pieces=book.new_pieces(trajectories),
        keep_steps=keep_steps,
    )
