"""A Hugging Face model folder on disk as the base model: loaded offline with its own tokenizer,
rendered with its own chat template, trained with LoRA, sampled, checkpointed."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import tinker
import torch
from tinker_cookbook.renderers.base import ParseTermination, TrainOnWhat

from tinker_tui.engine.rendering.chat_template_renderer import (
    ChatTemplateRenderer,
    renderer_for_tokenizer,
)

QUESTION = [{"role": "user", "content": "Is the sky blue?"}]
CHAT = QUESTION + [{"role": "assistant", "content": "maybe"}]


@pytest.fixture(scope="module")
def hf_client(service, hf_folder):
    return service.create_lora_training_client(str(hf_folder), rank=8, seed=0).result()


def test_folder_loads_offline_with_its_tokenizer(service, hf_client, hf_folder):
    info = hf_client.get_info()
    assert info.model_name == str(hf_folder.resolve()) and info.model_data.arch == "llama"
    assert info.is_lora and info.lora_rank == 8
    tokenizer = hf_client.get_tokenizer()
    assert tokenizer.chat_template and tokenizer.eos_token == "<|endoftext|>"
    assert hf_client.base.device.type in ("cpu", "cuda")
    names = [m.model_name for m in service.get_server_capabilities().supported_models]
    assert str(hf_folder.resolve()) in names
    caps = {m.model_name: m for m in service.get_server_capabilities().supported_models}
    assert caps[str(hf_folder.resolve())].max_context_length == 256
    # LoRA covers attention, MLP and the (untied) unembedding.
    kinds = {layer.kind for layer in hf_client.base.layers.values()}
    assert kinds == {"attn", "mlp", "unembed"}


def test_chat_template_renderer(hf_client):
    tokenizer = hf_client.get_tokenizer()
    renderer = renderer_for_tokenizer(tokenizer)
    assert isinstance(renderer, ChatTemplateRenderer)
    im_end, eos = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert renderer.get_stop_sequences() == [im_end, eos]
    prompt = renderer.build_generation_prompt(QUESTION)
    assert tokenizer.decode(prompt.to_ints()) == (
        "<|im_start|>user\nIs the sky blue?<|im_end|>\n<|im_start|>assistant\n"
    )
    model_input, weights = renderer.build_supervised_example(CHAT)
    tokens = model_input.to_ints()
    assert tokens[: prompt.length] == prompt.to_ints()
    trained = [t for t, w in zip(tokens, weights.tolist(), strict=True) if w]
    assert tokenizer.decode(trained) == "maybe<|im_end|>"  # not the newline after it

    longer = CHAT + [
        {"role": "user", "content": "And the sea?"},
        {"role": "assistant", "content": "yes"},
    ]
    model_input, weights = renderer.build_supervised_example(
        longer, train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES
    )
    trained = [t for t, w in zip(model_input.to_ints(), weights.tolist(), strict=True) if w]
    assert tokenizer.decode(trained) == "maybe<|im_end|>yes<|im_end|>"

    answer = tokenizer.encode("maybe", add_special_tokens=False)
    message, end = renderer.parse_response(answer + [im_end])
    assert (message["content"], end) == ("maybe", ParseTermination.STOP_SEQUENCE)
    assert renderer.parse_response(answer + [eos])[1] == ParseTermination.EOS
    assert renderer.parse_response(answer)[1] == ParseTermination.MALFORMED
    clone = pickle.loads(pickle.dumps(renderer))
    assert clone.get_stop_sequences() == renderer.get_stop_sequences()


def test_tokenizer_without_template_gets_role_colon(tokenizer):
    from tinker_cookbook.renderers.role_colon import RoleColonRenderer

    assert isinstance(renderer_for_tokenizer(tokenizer), RoleColonRenderer)


async def test_train_sample_and_checkpoint(service, hf_client):
    tokenizer = hf_client.get_tokenizer()
    renderer = renderer_for_tokenizer(tokenizer)
    model_input, weights = renderer.build_supervised_example(CHAT)
    tokens, w = model_input.to_ints(), weights.tolist()
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": w[1:]},
    )
    first = None
    for _ in range(25):
        fb = hf_client.forward_backward([datum], "cross_entropy")
        hf_client.optim_step(tinker.AdamParams(learning_rate=1e-2))
        first = first if first is not None else (await fb).metrics["loss:sum"]
    last = (await fb).metrics["loss:sum"]
    assert last < 0.05 * first

    sampler = await hf_client.save_weights_and_get_sampling_client()
    prompt = renderer.build_generation_prompt(QUESTION)
    params = tinker.SamplingParams(
        max_tokens=8, temperature=0.0, stop=renderer.get_stop_sequences()
    )
    response = await sampler.sample(prompt, 2, params, topk_sample_logprobs=2)
    for seq in response.sequences:
        assert seq.stop_reason == "stop"
        message, end = renderer.parse_response(seq.tokens)
        assert (message["content"], end) == ("maybe", ParseTermination.STOP_SEQUENCE)
        assert seq.topk_logprobs_np.token_ids.shape == (len(seq.tokens), 2)
    # stop=None ends at the model's end of sequence, which this model never learned: length
    free = await sampler.sample(prompt, 1, tinker.SamplingParams(max_tokens=5, stop=[]))
    assert free.sequences[0].stop_reason == "length" and len(free.sequences[0].tokens) == 5

    saved = await hf_client.save_state("hf-step")
    restored = await service.create_training_client_from_state_with_optimizer(saved.path)
    assert restored.get_info().model_name == hf_client.get_info().model_name
    a = (await hf_client.forward([datum], "cross_entropy")).loss_fn_outputs[0]["logprobs"]
    b = (await restored.forward([datum], "cross_entropy")).loss_fn_outputs[0]["logprobs"]
    assert np.array_equal(a.to_numpy(), b.to_numpy())
    sampler_path = (await hf_client.save_weights_for_sampler("hf-final")).path
    from_disk = await service.create_sampling_client(model_path=sampler_path)
    assert await from_disk.compute_logprobs(prompt) == await sampler.compute_logprobs(prompt)
    clone = pickle.loads(pickle.dumps(sampler))
    assert (await clone.sample(prompt, 1, params)).sequences[0].tokens == seq.tokens
    assert torch.is_tensor(next(iter(hf_client.adapter.weights.values()))[0])
