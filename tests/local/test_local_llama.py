"""The embedded model's plain-torch form computes what transformers' Llama computes on the
shipped weights (full forward, left-padded prefill, cached decoding)."""

from __future__ import annotations

import pytest
import torch

from tinker_tui.engine.local import DEFAULT_BASE_MODEL
from tinker_tui.engine.local.model import build_runtime_module, build_tiny_module


@pytest.fixture(scope="module")
def pair():
    return build_tiny_module(DEFAULT_BASE_MODEL).eval(), build_runtime_module(
        DEFAULT_BASE_MODEL
    ).eval()


def test_same_logits_as_transformers(pair):
    reference, runtime = pair
    x = torch.randint(
        3, reference.config.vocab_size, (3, 25), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        expected = reference(input_ids=x).logits
        got = runtime(input_ids=x).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_padded_prefill_and_cached_decoding_match(pair):
    from transformers import DynamicCache

    reference, runtime = pair
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(3, reference.config.vocab_size, (3, 12), generator=gen)
    attention = torch.ones_like(x)
    attention[0, :4] = 0
    attention[1, :9] = 0
    x[attention == 0] = 0
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    ref_cache, cache = DynamicCache(), runtime.new_cache()
    real = attention.bool()
    with torch.no_grad():
        kwargs = {"attention_mask": attention, "position_ids": positions, "use_cache": True}
        expected = reference(input_ids=x, past_key_values=ref_cache, **kwargs).logits
        got = runtime(input_ids=x, past_key_values=cache, **kwargs).logits
        torch.testing.assert_close(got[real], expected[real], rtol=1e-5, atol=1e-5)
        assert torch.isfinite(got).all()
        # Drop row 2, repeat row 0 (what generation does), then decode two tokens.
        index = torch.tensor([0, 1, 0])
        ref_cache.batch_select_indices(index)
        cache.batch_select_indices(index)
        attention, last = attention[index], positions[index, -1]
        for _ in range(2):
            step = torch.randint(3, reference.config.vocab_size, (3, 1), generator=gen)
            attention = torch.cat([attention, attention.new_ones((3, 1))], dim=1)
            last = last + 1
            kwargs = {"attention_mask": attention, "position_ids": last[:, None], "use_cache": True}
            expected = reference(input_ids=step, past_key_values=ref_cache, **kwargs).logits
            got = runtime(input_ids=step, past_key_values=cache, **kwargs).logits
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
