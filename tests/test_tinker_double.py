"""The Tinker service double, driven by the real tinker SDK over HTTP: it speaks the SDK's wire
protocol (its own types and protobuf codecs, both ways) and really trains on the local backend.
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest
import tinker
from tinker import types
from tinker.proto import response_conv
from tinker.proto.request_conv import forward_backward_request_to_proto
from tinker_double import API_KEY, TinkerDouble, wire
from tinker_double.service import Sequencer

from tinker_tui.engine.local import DEFAULT_BASE_MODEL
from tinker_tui.engine.local.hf_tokenizer import TOKENIZER_DIR


@pytest.fixture(scope="module")
def double(tmp_path_factory):
    with TinkerDouble(tmp_path_factory.mktemp("service")) as served:
        yield served


def _supervised(renderer, answer: str) -> types.Datum:
    model_input, weights = renderer.build_supervised_example(
        [
            {"role": "user", "content": "Answer with one word: yes, no or maybe. Is it?"},
            {"role": "assistant", "content": answer},
        ]
    )
    tokens = model_input.to_ints()
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "weights": [float(w) for w in weights.tolist()[1:]],
        },
    )


def test_the_sdk_trains_samples_saves_loads_and_deletes_through_the_double(double):
    from tinker_cookbook.renderers import get_renderer

    service = tinker.ServiceClient(base_url=double.base_url, api_key=API_KEY)
    training = service.create_lora_training_client(
        base_model=DEFAULT_BASE_MODEL, rank=8, seed=0
    ).result()
    assert training.get_info().model_data.tokenizer_id == str(TOKENIZER_DIR)
    tokenizer = training.get_tokenizer()  # AutoTokenizer on the folder get_info names
    renderer = get_renderer("role_colon", tokenizer)
    data = [_supervised(renderer, "maybe")] * 4
    losses = []
    for _ in range(4):  # forward_backward and optim_step submitted before either is awaited
        fb = training.forward_backward(data, "cross_entropy")
        step = training.optim_step(types.AdamParams(learning_rate=1e-2))
        losses.append(fb.result().metrics["loss:sum"])
        assert "grad_norm:mean" in step.result().metrics
    assert losses[-1] < losses[0] * 0.8, losses  # it really trains

    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = renderer.build_generation_prompt(
        [{"role": "user", "content": "Answer with one word: yes, no or maybe. Is it?"}]
    )
    result = sampler.sample(
        prompt=prompt,
        num_samples=3,
        sampling_params=types.SamplingParams(max_tokens=4, seed=1),
        topk_sample_logprobs=2,
    ).result()
    assert len(result.sequences) == 3
    for sequence in result.sequences:
        assert len(sequence.tokens) == len(sequence.logprobs) <= 4
        assert sequence.stop_reason in ("stop", "length") and sequence.sequence_id
        assert all(len(row) == 2 for row in sequence.topk_logprobs)

    state = training.save_state("step-000004").result().path
    weights = training.save_weights_for_sampler("step-000004").result().path
    assert state == f"tinker://{training.model_id}/weights/step-000004"
    assert weights == f"tinker://{training.model_id}/sampler_weights/step-000004"
    assert (
        service.create_sampling_client(model_path=weights).result().get_base_model()
        == DEFAULT_BASE_MODEL
    )
    # a new training client from the saved state computes what the saved one does
    loaded = service.create_training_client_from_state_with_optimizer(state).result()
    assert loaded.model_id != training.model_id
    before = training.forward(data, "cross_entropy").result().metrics["loss:sum"]
    after = loaded.forward(data, "cross_entropy").result().metrics["loss:sum"]
    assert after == pytest.approx(before, rel=1e-5)

    rest = tinker.RestClient(base_url=double.base_url, api_key=API_KEY)
    listed = rest.list_checkpoints(training.model_id).result().checkpoints
    assert {c.checkpoint_id for c in listed} == {
        "weights/step-000004",
        "sampler_weights/step-000004",
    }
    rest.delete_checkpoint_from_tinker_path(weights).result()
    assert weights in double.service.deleted
    assert [
        c.checkpoint_id for c in rest.list_checkpoints(training.model_id).result().checkpoints
    ] == ["weights/step-000004"]

    session_id = training.model_id.split(":")[0]
    service.close("success", detail="done").result()
    assert double.service.sessions[session_id].finished == {"reason": "success", "detail": "done"}
    endpoints = {path.split("/")[0] for _, path, _ in double.service.calls}
    assert {
        "client",
        "create_session",
        "create_model",
        "get_info",
        "forward_backward",
        "optim_step",
        "save_weights",
        "save_weights_for_sampler",
        "load_weights",
        "create_sampling_session",
        "samplers",
        "asample",
        "retrieve_future",
        "training_runs",
        "sessions",
    } <= endpoints


def test_a_key_the_double_does_not_know_is_refused(double):
    service = tinker.ServiceClient(base_url=double.base_url, api_key="tml-not-this-one")
    with pytest.raises(tinker.AuthenticationError):
        service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL).result()


def test_the_wire_round_trips_through_the_sdks_own_codecs():
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([5, 6, 7]),
        loss_fn_inputs={
            "target_tokens": [6, 7, 8],
            "advantages": [0.0, 0.5, -1.5],
            "logprobs": [-1.0, -2.0, -3.0],
        },
    )
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=[datum], loss_fn="ppo", loss_fn_config={"clip_low_threshold": 0.8}
        ),
        model_id="s:train:0",
        seq_id=3,
    )
    proto = forward_backward_request_to_proto(request)  # what the SDK sends
    proto.forward_only = True
    decoded, forward_only = wire.forward_backward_request(proto.SerializeToString())
    assert forward_only and decoded.model_id == "s:train:0" and decoded.seq_id == 3
    fb = decoded.forward_backward_input
    assert fb.loss_fn == "ppo" and fb.loss_fn_config == {"clip_low_threshold": 0.8}
    [got] = fb.data
    assert got.model_input.to_ints() == [5, 6, 7]
    for key, value in datum.loss_fn_inputs.items():
        assert got.loss_fn_inputs[key].tolist() == value.tolist()
        assert got.loss_fn_inputs[key].dtype == value.dtype

    sample = types.SampleResponse(
        sequences=[
            types.SampledSequence(
                stop_reason="stop",
                sequence_id="x",
                tokens_np=np.array([1, 2], dtype=np.int32),
                logprobs_np=np.array([-0.5, -0.25], dtype=np.float32),
            )
        ],
        prompt_logprobs_np=np.array([np.nan, -1.0], dtype=np.float32),
    )
    back = response_conv.deserialize_sample_response(wire.sample_response(sample))
    assert back.sequences[0].tokens == [1, 2] and back.sequences[0].logprobs == [-0.5, -0.25]
    assert back.sequences[0].stop_reason == "stop"
    assert np.isnan(back.prompt_logprobs_np[0]) and back.prompt_logprobs_np[1] == -1.0

    output = types.ForwardBackwardOutput(
        loss_fn_output_type="TensorData",
        metrics={"loss:sum": 2.5},
        loss_fn_outputs=[
            {"logprobs": types.TensorData.from_numpy(np.array([-1.0, -2.0], dtype=np.float32))},
            {"logprobs": types.TensorData.from_numpy(np.array([-3.0], dtype=np.float32))},
        ],
    )
    back_fb = response_conv.deserialize_forward_backward_output(
        wire.forward_backward_output(output)
    )
    assert back_fb.metrics == {"loss:sum": 2.5}
    assert [o["logprobs"].tolist() for o in back_fb.loss_fn_outputs] == [[-1.0, -2.0], [-3.0]]


def test_a_models_requests_run_in_seq_id_order_whatever_order_they_arrive_in():
    started = []
    sequencer = Sequencer()

    def start(name):
        def begin():
            started.append(name)
            done: Future = Future()
            done.set_result(name)
            return done

        return begin

    third = sequencer.submit(3, start("c"))
    first = sequencer.submit(1, start("a"))
    assert started == ["a"] and not third.done()
    sequencer.submit(2, start("b"))
    assert started == ["a", "b", "c"] and first.result() == "a" and third.result() == "c"


# ---------------------------------------------------------------------- clock cycles
CYCLE = 0.4


@pytest.fixture(scope="module")
def cycled(tmp_path_factory):
    with TinkerDouble(tmp_path_factory.mktemp("cycled"), clock_cycle=CYCLE) as served:
        yield served


def _just_after_a_tick(double) -> None:
    """Sleep until a cycle has just started, so requests sent now (a few ms apart, more on
    a busy machine) all make the next one."""
    import time

    clock = double.service.clock
    phase = (time.monotonic() - clock.epoch) % clock.period
    time.sleep((clock.period - phase) + 0.01)


def _cycles_of(double, model_id: str, since: int) -> list[tuple[int, str]]:
    return [
        (n, kind) for n, model, kind in double.service.clock.cycles[since:] if model == model_id
    ]


def test_training_calls_run_in_lock_step_cycles(cycled):
    """Submitted together, forward_backward, optim_step and a save share one cycle; a loop
    that awaits each in turn pays one cycle per call; sampling is not held for a cycle."""
    from tinker_cookbook.renderers import get_renderer

    service = tinker.ServiceClient(base_url=cycled.base_url, api_key=API_KEY)
    training = service.create_lora_training_client(
        base_model=DEFAULT_BASE_MODEL, rank=8, seed=0
    ).result()
    model_id = training.model_id
    renderer = get_renderer("role_colon", training.get_tokenizer())
    data = [_supervised(renderer, "maybe")] * 2
    adam = types.AdamParams(learning_rate=1e-3)

    since = len(cycled.service.clock.cycles)
    _just_after_a_tick(cycled)
    fb = training.forward_backward(data, "cross_entropy")
    step = training.optim_step(adam)
    saved = training.save_weights_for_sampler("together")
    fb.result(), step.result(), saved.result()
    together = _cycles_of(cycled, model_id, since)
    assert [k for _, k in together] == [
        "forward_backward",
        "optim_step",
        "save_weights_for_sampler",
    ]
    assert len({n for n, _ in together}) == 1

    since = len(cycled.service.clock.cycles)
    training.forward_backward(data, "cross_entropy").result()
    training.optim_step(adam).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    naive = _cycles_of(cycled, model_id, since)
    numbers = [n for n, _ in naive]
    assert numbers == [numbers[0], numbers[0] + 1, numbers[0] + 2], naive
    assert numbers[0] > together[0][0]

    prompt = renderer.build_generation_prompt([{"role": "user", "content": "Is it?"}])
    asked = time_now()
    sampler.sample(
        prompt=prompt, num_samples=2, sampling_params=types.SamplingParams(max_tokens=2)
    ).result()
    assert time_now() - asked < CYCLE * 3  # not gated; the machine may be busy
    record = cycled.service.clock.cycles
    assert all(kind != "sample" for _, _, kind in record)


def time_now() -> float:
    import time

    return time.monotonic()


def test_the_trainer_pays_one_cycle_per_step(cycled, tmp_path):
    """`BackendSession.train` submits forward_backward, optim_step and the next sampler's
    snapshot and save together: steps whose batches are ready take one cycle each."""
    import asyncio

    from tinker_tui.engine.backend.session import BackendSession

    async def steps() -> tuple[str, list[int], int]:
        service = tinker.ServiceClient(base_url=cycled.base_url, api_key=API_KEY)
        session = BackendSession(service, base_model=DEFAULT_BASE_MODEL, lora_rank=8)
        await session.start()
        data = [_supervised(session.renderer, "maybe")] * 2
        since = len(cycled.service.clock.cycles)
        for _ in range(4):
            await session.train(data, loss_fn="cross_entropy", learning_rate=1e-3)
        await session.settle_sampler_save()
        model_id = session.training_client.model_id
        fbs = [n for n, k in _cycles_of(cycled, model_id, since) if k == "forward_backward"]
        saved = [c for c in session.checkpoints if c.kind == "sampler"]
        await session.close("success")
        return model_id, fbs, len(saved)

    _, fbs, saved = asyncio.run(steps())
    assert [b - a for a, b in zip(fbs, fbs[1:], strict=False)] == [1, 1, 1], fbs
    assert saved == 5  # every step's sampler weights (and the start's) are recorded


def test_stable_reinforce_provenance_is_checked_as_the_service_would(double):
    """Through the SDK: a recording sampler's sequences train with provenance naming them
    (gspo needs none); a datum without provenance, or naming an id the session never
    recorded, is a 400 that says so."""
    service = tinker.ServiceClient(base_url=double.base_url, api_key=API_KEY)
    training = service.create_lora_training_client(
        base_model=DEFAULT_BASE_MODEL, rank=4, seed=0
    ).result()
    sampler = training.save_weights_and_get_sampling_client(record_stability_info=True).result()
    prompt = types.ModelInput.from_ints(training.get_tokenizer().encode("User: hi\n\nAssistant:"))
    params = types.SamplingParams(max_tokens=4, temperature=1.0, seed=1)
    seq = sampler.sample(prompt, 1, params).result().sequences[0]
    assert seq.sequence_id in double.service.recorded
    ids, n_prompt, n = prompt.to_ints() + list(seq.tokens), prompt.length, len(seq.tokens)

    def datum(sequence_id: str | None) -> types.Datum:
        plain = types.Datum(
            model_input=types.ModelInput.from_ints(ids[:-1]),
            loss_fn_inputs={
                "target_tokens": ids[1:],
                "logprobs": [0.0] * (n_prompt - 1) + list(seq.logprobs or []),
                "advantages": [0.0] * (n_prompt - 1) + [1.0] * n,
            },
        )
        if sequence_id is None:
            return plain
        return plain.with_provenance(
            model_input=[
                types.PromptProvenanceSpan(sequence_id=sequence_id, length=n_prompt),
                types.SampledProvenanceSpan(sequence_id=sequence_id, length=n - 1),
            ],
            loss_fn_inputs=[
                types.PromptProvenanceSpan(sequence_id=sequence_id, length=n_prompt - 1),
                types.SampledProvenanceSpan(sequence_id=sequence_id, length=n),
            ],
        )

    out = training.forward_backward([datum(seq.sequence_id)], "stable_reinforce").result()
    assert np.isfinite(out.metrics["loss:sum"])
    assert seq.sequence_id in double.service.trained_sequences
    # gspo is passed through as it is: no provenance needed
    gspo = training.forward_backward([datum(None)], "gspo").result()
    assert np.isfinite(gspo.metrics["loss:sum"]) and gspo.metrics["loss:sum"] != 0.0
    for bad, words in ((None, "has no loss_fn_input_spans"), ("sess-x:sample:9:9:0", "was not")):
        with pytest.raises(tinker.BadRequestError, match=words):
            training.forward_backward([datum(bad)], "stable_reinforce").result()
