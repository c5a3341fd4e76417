"""The double serves a hub name from a local folder (`--serve-model NAME=FOLDER`): the real
tinker SDK, asking for Qwen3 by its hub name, trains and samples the real-format fixture, and
everything the service reports names the hub name, so the cookbook's renderer for that family
is the one a client picks."""

from __future__ import annotations

from pathlib import Path

import pytest
import tinker
from real_format import HUB_NAME, IM_END
from tinker import types
from tinker_double import API_KEY, TinkerDouble

from tinker_tui.engine.backend.choice import make_renderer


def _datum(tokens: list[int], weights: list[float]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights[1:]},
    )


def test_the_sdk_trains_and_samples_a_folder_served_under_its_hub_name(qwen3_folder, tmp_path):
    folder = str(Path(qwen3_folder).resolve())
    with TinkerDouble(tmp_path, served_models={HUB_NAME: qwen3_folder}) as double:
        service = tinker.ServiceClient(base_url=double.base_url, api_key=API_KEY)
        rest = tinker.RestClient(base_url=double.base_url, api_key=API_KEY)
        names = [m.model_name for m in rest.get_server_capabilities().result().supported_models]
        assert HUB_NAME in names and folder not in names

        training = service.create_lora_training_client(base_model=HUB_NAME, rank=4, seed=0).result()
        info = training.get_info()
        assert info.model_data.model_name == HUB_NAME and info.model_name == HUB_NAME
        assert info.model_data.tokenizer_id == folder
        tokenizer = training.get_tokenizer()  # the SDK's own load, of the folder get_info names
        assert tokenizer.encode("Hello world") == [9707, 1879]

        renderer, renderer_name = make_renderer(HUB_NAME, tokenizer)
        assert renderer_name == "qwen3_instruct"
        conversation = [
            {"role": "user", "content": "Say ok."},
            {"role": "assistant", "content": "ok"},
        ]
        model_input, weights = renderer.build_supervised_example(conversation)
        data = [_datum(model_input.to_ints(), [float(w) for w in weights.tolist()])]
        losses = []
        for _ in range(3):
            fb = training.forward_backward(data, "cross_entropy")
            training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
            losses.append(fb.result().metrics["loss:sum"])
        assert losses[-1] < losses[0], losses  # it really trains the folder's model

        sampler = training.save_weights_and_get_sampling_client().result()
        assert sampler.get_base_model() == HUB_NAME
        prompt = renderer.build_generation_prompt(conversation[:1])
        sampled = sampler.sample(
            prompt=prompt,
            num_samples=2,
            sampling_params=types.SamplingParams(
                max_tokens=3, seed=1, stop=renderer.get_stop_sequences()
            ),
        ).result()
        for sequence in sampled.sequences:
            assert 1 <= len(sequence.tokens) <= 3
            assert all(0 <= t < 151936 for t in sequence.tokens)
        assert IM_END in renderer.get_stop_sequences()

        state = training.save_state("step-3").result().path
        weights_path = training.save_weights_for_sampler("step-3").result().path
        assert rest.get_weights_info_by_tinker_path(state).result().base_model == HUB_NAME
        run = rest.get_training_run(training.model_id).result()
        assert run.base_model == HUB_NAME and run.last_checkpoint is not None
        assert run.last_checkpoint.tinker_path == state
        assert (
            service.create_sampling_client(model_path=weights_path).result().get_base_model()
            == HUB_NAME
        )
        assert (
            service.create_sampling_client(base_model=HUB_NAME).result().get_base_model()
            == HUB_NAME
        )
        loaded = service.create_training_client_from_state(state, base_model=HUB_NAME).result()
        assert loaded.get_info().model_data.model_name == HUB_NAME
        before = training.forward(data, "cross_entropy").result().metrics["loss:sum"]
        after = loaded.forward(data, "cross_entropy").result().metrics["loss:sum"]
        assert after == pytest.approx(before, rel=1e-5)


def test_serve_model_refuses_a_malformed_or_empty_mapping_in_one_line(tmp_path, capsys):
    from tinker_double.__main__ import main

    for argument, expected in (
        ("Qwen/Qwen3-4B", "wants NAME=FOLDER"),
        (f"Qwen/Qwen3-4B={tmp_path}", "holds no config.json"),
    ):
        with pytest.raises(SystemExit) as stopped:
            main(["--port", "0", "--checkpoint-dir", str(tmp_path), "--serve-model", argument])
        assert stopped.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert expected in error and error.startswith("python -m tinker_double: error:")
