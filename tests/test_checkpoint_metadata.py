"""Checkpoints are tagged with the SDK's `user_metadata` (run id, step, policy version), so a
run's weights can be found on the service: through the real SDK to the Tinker double."""

from __future__ import annotations

import asyncio

import pytest
import tinker
from tinker import types
from tinker_double import API_KEY, TinkerDouble

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.local import DEFAULT_BASE_MODEL


@pytest.fixture(scope="module")
def double(tmp_path_factory):
    with TinkerDouble(tmp_path_factory.mktemp("service")) as served:
        yield served


def _datum(session: BackendSession) -> types.Datum:
    model_input, weights = session.renderer.build_supervised_example(
        [{"role": "user", "content": "Is the sky blue?"}, {"role": "assistant", "content": "yes"}]
    )
    tokens, w = model_input.to_ints(), weights.tolist()
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": w[1:]},
    )


def test_saved_checkpoints_carry_run_step_and_version(double):
    async def save() -> tuple[str, list[types.Checkpoint]]:
        service = tinker.ServiceClient(base_url=double.base_url, api_key=API_KEY)
        session = BackendSession(service, base_model=DEFAULT_BASE_MODEL, lora_rank=4)
        session.run_id = "tagged-run"
        await session.start()
        await session.train([_datum(session)], loss_fn="cross_entropy", learning_rate=1e-3)
        await session.settle_sampler_save()
        await session.save_state("state-1", step=1)
        model_id = session.training_client.model_id
        rest = tinker.RestClient(base_url=double.base_url, api_key=API_KEY)
        listed = rest.list_checkpoints(model_id).result().checkpoints
        await session.close("success")
        return model_id, listed

    model_id, listed = asyncio.run(save())
    tags = {c.tinker_path.rsplit("/", 1)[1]: c.user_metadata for c in listed}
    assert tags["state-1"] == {"run_id": "tagged-run", "step": "1", "policy_version": "1"}
    sampler = [t for name, t in tags.items() if name != "state-1"]
    assert {"run_id": "tagged-run", "step": "1", "policy_version": "1"} in sampler, tags
