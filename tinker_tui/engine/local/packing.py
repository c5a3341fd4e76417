"""How a training batch's token sequences are laid out for one forward pass.

Padded (any model): one right-padded row per datum; causal attention needs no mask.

Shared prefixes (models that take a tree mask, i.e. the embedded ones): an RL batch holds
groups of samples of the same prompt, and a warm-up batch the same questions with different
answers, so most of its tokens repeat a prefix another datum already has. The sequences are
merged into a trie, each trie node (a token after a given prefix) is computed once, and a
mask lets each node attend to its ancestors and itself only, with position ids = depth. Every
datum position then reads the hidden state of its node: the same values as in its own padded
row (the same attention, over the same keys, at the same positions), and gradients from the
datums sharing a node add up in it, as they would through the shared weights. Only used when
it saves at least a quarter of the positions; a trie row holds at most `max_nodes` nodes
(attention over a row is quadratic in its length).

Both layouts give, per datum position in datum order, the flat index (row * width + column)
of the hidden state that predicts its target.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Pack only when the trie has at most this share of the batch's positions.
MAX_NODE_SHARE = 0.75
MAX_NODES_PER_ROW = 1024


@dataclass
class Layout:
    input_ids: np.ndarray  # [rows, width] int64
    #: [rows, width] int64, or None for 0..width-1 in every row.
    position_ids: np.ndarray | None
    #: [rows, width, width] bool (query, key) allowed, or None for plain causal attention.
    attention: np.ndarray | None
    #: [positions] index into the flattened [rows * width] hidden states, datum by datum.
    node: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        rows, width = self.input_ids.shape
        return rows, width


def padded(tokens: Sequence[Sequence[int]], pad_id: int) -> Layout:
    rows, width = len(tokens), max(len(t) for t in tokens)
    input_ids = np.full((rows, width), pad_id, dtype=np.int64)
    node = np.empty(sum(len(t) for t in tokens), dtype=np.int64)
    at = 0
    for i, toks in enumerate(tokens):
        n = len(toks)
        input_ids[i, :n] = toks
        node[at : at + n] = np.arange(i * width, i * width + n)
        at += n
    return Layout(input_ids, None, None, node)


def shared_prefix(
    tokens: Sequence[Sequence[int]], pad_id: int, max_nodes: int = MAX_NODES_PER_ROW
) -> Layout | None:
    """The trie layout, or None when it would not save enough (see the module's docstring)."""
    positions = sum(len(t) for t in tokens)
    order = sorted(range(len(tokens)), key=lambda i: tuple(tokens[i]))  # neighbours share most
    tries: list[dict[tuple[int, int], int]] = []  # (parent node, token) -> node, per row
    row_tokens: list[list[int]] = []
    row_depth: list[list[int]] = []
    paths: list[tuple[int, list[int]] | None] = [None] * len(tokens)  # (row, nodes)
    for i in order:
        seq = tokens[i]
        if not tries or _new_nodes(tries[-1], seq) + len(row_tokens[-1]) > max_nodes:
            if len(seq) > max_nodes:
                return None
            tries.append({})
            row_tokens.append([])
            row_depth.append([])
        trie, toks, depth = tries[-1], row_tokens[-1], row_depth[-1]
        path, parent = [], -1
        for d, tok in enumerate(seq):
            key = (parent, int(tok))
            node = trie.get(key)
            if node is None:
                node = trie[key] = len(toks)
                toks.append(int(tok))
                depth.append(d)
            path.append(node)
            parent = node
        paths[i] = (len(tries) - 1, path)
    nodes = sum(len(t) for t in row_tokens)
    if nodes > MAX_NODE_SHARE * positions:
        return None
    rows, width = len(row_tokens), max(len(t) for t in row_tokens)
    input_ids = np.full((rows, width), pad_id, dtype=np.int64)
    position_ids = np.zeros((rows, width), dtype=np.int64)
    attention = np.zeros((rows, width, width), dtype=bool)
    attention[:, np.arange(width), np.arange(width)] = True  # padding attends to itself
    for r, (toks, depth) in enumerate(zip(row_tokens, row_depth, strict=True)):
        input_ids[r, : len(toks)] = toks
        position_ids[r, : len(depth)] = depth
    node_at = np.empty(positions, dtype=np.int64)  # each position's node, row-major
    at = 0
    for entry in paths:
        assert entry is not None
        r, path = entry
        p = np.asarray(path, dtype=np.int64)
        q, k = _lower_triangle(len(p))
        attention[r, p[q], p[k]] = True  # each node: its ancestors and itself
        node_at[at : at + len(p)] = r * width + p
        at += len(p)
    return Layout(input_ids, position_ids, attention, node_at)


@functools.lru_cache(maxsize=256)
def _lower_triangle(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.tril_indices(n)


def _new_nodes(trie: dict[tuple[int, int], int], seq: Sequence[int]) -> int:
    parent = -1
    for d, tok in enumerate(seq):
        node = trie.get((parent, int(tok)))
        if node is None:
            return len(seq) - d
        parent = node
    return 0
