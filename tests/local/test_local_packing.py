"""Shared-prefix packing of training batches: the layout itself, and forward_backward giving
the same logprobs, losses and gradients packed as in padded rows, for every loss."""

from __future__ import annotations

import random

import numpy as np
import pytest
import tinker
import torch

from tinker_tui.engine.local import DEFAULT_BASE_MODEL, packing


def test_trie_layout_shares_prefixes_and_masks_ancestors():
    tokens = [[5, 6, 7, 8], [5, 6, 7, 9, 10], [5, 6, 11], [5, 6, 7, 8]]
    layout = packing.shared_prefix(tokens, pad_id=0)
    assert layout is not None and layout.attention is not None
    assert layout.position_ids is not None
    rows, width = layout.shape
    assert rows == 1 and width == 7  # 5 6 7 8 | 9 10 | 11; the duplicate adds nothing
    ids, pos, att = (
        layout.input_ids.reshape(-1),
        layout.position_ids.reshape(-1),
        layout.attention[0],
    )
    at = 0
    for seq in tokens:
        nodes = layout.node[at : at + len(seq)]
        at += len(seq)
        assert ids[nodes].tolist() == seq
        assert pos[nodes].tolist() == list(range(len(seq)))
        for j, n in enumerate(nodes):  # a node sees exactly its ancestors and itself
            assert set(np.flatnonzero(att[n])) == set(nodes[: j + 1].tolist())


def test_no_packing_without_enough_sharing_or_over_the_row_limit():
    assert packing.shared_prefix([[1, 2, 3], [4, 5, 6], [1, 7, 8]], pad_id=0) is None
    long = [[1] * 10 + [i] for i in range(3, 9)]
    layout = packing.shared_prefix(long, pad_id=0, max_nodes=13)
    assert layout is not None and layout.shape[0] == 2  # 13 nodes at most per row
    assert packing.shared_prefix([[1] * 20, [1] * 20], pad_id=0, max_nodes=10) is None


def _rl_batch(tokenizer, seed: int) -> list[tinker.Datum]:
    """Groups of samples of one prompt (what an RL step trains on), of unequal lengths."""
    rng = random.Random(seed)
    vocab = len(tokenizer)
    data = []
    for question in ("Is the sky blue?", "Can a cat swim?", "Are you ready?"):
        prompt = tokenizer.encode(
            f"User: Answer with one word: yes, no or maybe. {question}\n\nAssistant:"
        )
        for _ in range(5):
            answer = [rng.randrange(3, vocab) for _ in range(rng.randint(1, 4))]
            tokens = prompt + answer
            advantage = rng.choice([-0.5, 0.25, 0.0, 1.0])
            n = len(tokens) - 1
            data.append(
                tinker.Datum(
                    model_input=tinker.ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={
                        "target_tokens": tokens[1:],
                        "logprobs": [0.0] * (len(prompt) - 1) + [-rng.random() * 3 for _ in answer],
                        "advantages": [0.0] * (len(prompt) - 1) + [advantage] * len(answer),
                        "weights": [0.0] * (len(prompt) - 1) + [1.0] * len(answer),
                    },
                )
            )
            assert len(data[-1].loss_fn_inputs["target_tokens"].data) == n
    return data


def _inputs_for(loss_fn: str, data: list[tinker.Datum]) -> list[tinker.Datum]:
    keep = (
        ("target_tokens", "weights")
        if loss_fn == "cross_entropy"
        else ("target_tokens", "logprobs", "advantages")
    )
    return [
        tinker.Datum(
            model_input=d.model_input, loss_fn_inputs={k: d.loss_fn_inputs[k] for k in keep}
        )
        for d in data
    ]


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling", "ppo", "cispo", "dro"])
async def test_packed_equals_padded(service, tokenizer, monkeypatch, loss_fn):
    tc = await service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL, rank=8, seed=3)
    data = _inputs_for(loss_fn, _rl_batch(tokenizer, seed=1))
    # a few steps first, so the adapter is not zero
    warm = _inputs_for("cross_entropy", _rl_batch(tokenizer, seed=2))
    for _ in range(3):
        await tc.forward_backward(warm, "cross_entropy")
        await tc.optim_step(tinker.AdamParams(learning_rate=1e-2))
    assert packing.shared_prefix([d.model_input.to_ints() for d in data], 0) is not None

    def run() -> tuple[tinker.ForwardBackwardOutput, list[torch.Tensor]]:
        out = tc.forward_backward(data, loss_fn).result()
        grads = [p.grad.clone() for p in tc.adapter.parameters()]
        for p in tc.adapter.parameters():
            p.grad = None
        return out, grads

    packed, packed_grads = run()
    monkeypatch.setattr(packing, "shared_prefix", lambda *a, **k: None)
    padded, padded_grads = run()
    assert packed.metrics["loss:sum"] == pytest.approx(
        padded.metrics["loss:sum"], rel=1e-5, abs=1e-5
    )
    for a, b in zip(packed.loss_fn_outputs, padded.loss_fn_outputs, strict=True):
        for key in ("logprobs", "elementwise_loss"):
            np.testing.assert_allclose(a[key].to_numpy(), b[key].to_numpy(), rtol=1e-5, atol=1e-5)
    # the same sums in another order: equal up to float rounding
    scale = max(float(g.abs().max()) for g in padded_grads)
    assert scale > 0
    for a, b in zip(packed_grads, padded_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * scale)
