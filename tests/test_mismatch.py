"""Sampler/trainer mismatch and entropy per step (engine.metrics.mismatch), on the real local
backend, in the JSONL and the store; and the tokens each step trained, kept in the store."""

import json
import math
import sqlite3

import numpy as np
import pytest

from tinker_tui.app.cli import main
from tinker_tui.engine.local import DEFAULT_BASE_MODEL
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.mismatch import DIFF_THRESHOLD, mismatch_metrics
from tinker_tui.engine.store import StoreReader

MISMATCH_KEYS = (
    keys.KL_SAMPLE_TRAIN_V1,
    keys.KL_SAMPLE_TRAIN_V2,
    keys.SAMPLE_TRAIN_DIFF_MAX,
    keys.SAMPLE_TRAIN_DIFF_FRAC,
    keys.ENTROPY_SAMPLED,
)


def test_the_metrics_count_sampled_tokens_only():
    sampled = [[0.0, -1.0, -2.0], [-0.5, -0.5]]
    trainer = [[-9.0, -1.5, -2.0], [-0.5, -0.3]]
    masks = [[0, 1, 1], [1, 1]]
    m = mismatch_metrics(sampled, trainer, masks, entropy=[[5.0, 1.0, 2.0], [3.0, 2.0]])
    diffs = [0.5, 0.0, 0.0, -0.2]  # the context position (sampled 0, trainer -9) is left out
    assert m[keys.KL_SAMPLE_TRAIN_V1] == pytest.approx(sum(diffs) / 4)
    assert m[keys.KL_SAMPLE_TRAIN_V2] == pytest.approx(0.5 * sum(d * d for d in diffs) / 4)
    assert m[keys.SAMPLE_TRAIN_DIFF_MAX] == pytest.approx(0.5)
    assert m[keys.SAMPLE_TRAIN_DIFF_FRAC] == pytest.approx(2 / 4)  # 0.5 and 0.2 > 0.1
    assert DIFF_THRESHOLD == 0.1
    assert m[keys.ENTROPY_SAMPLED] == pytest.approx((1 + 2 + 0.5 + 0.5) / 4)
    assert m[keys.ENTROPY] == pytest.approx((1 + 2 + 3 + 2) / 4)
    assert keys.ENTROPY not in mismatch_metrics(sampled, trainer, masks)
    assert mismatch_metrics([[0.0]], [[0.0]], [[0]]) == {}


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mismatch")
    db = folder / "runs.db"
    code = main(
        [
            "run",
            "example",
            "--backend",
            "local",
            "--no-ui",
            "--db",
            str(db),
            "--base-model",
            DEFAULT_BASE_MODEL,
            "--warmup-steps",
            "0",
            "--steps",
            "6",
            "--group-size",
            "4",
            "--groups-per-step",
            "2",
            "--rollout-workers",
            "1",
            "--max-steps-off-policy",
            "0",
            "--eval-every",
            "0",
            "--keep-token-steps",
            "1",
        ]
    )
    assert code == 0
    return db


def test_a_local_on_policy_run_has_no_mismatch_and_reports_entropy(local_run):
    """Sampled and trained by the same weights, the two logprobs of every token are the
    same up to float rounding: a mismatch here is a bug in our sampler or trainer."""
    (jsonl,) = local_run.parent.glob("*.metrics.jsonl")
    steps = [json.loads(line) for line in jsonl.read_text().splitlines()]
    steps = [s for s in steps if s["event"] == "step" and not s.get(keys.TRAIN_SKIPPED)]
    assert steps
    for step in steps:
        assert step[keys.STALENESS_MAX] == 0
        assert abs(step[keys.KL_SAMPLE_TRAIN_V1]) < 1e-3, step
        assert step[keys.KL_SAMPLE_TRAIN_V2] < 1e-5
        assert step[keys.SAMPLE_TRAIN_DIFF_MAX] < 0.01
        assert step[keys.SAMPLE_TRAIN_DIFF_FRAC] == 0
        # the trainer's entropy of the whole distribution: positive, at most log(vocab)
        assert 0 < step[keys.ENTROPY] < math.log(50_000)
        assert step[keys.ENTROPY_SAMPLED] > 0


async def test_the_store_keeps_the_latest_steps_tokens_compactly(local_run):
    with sqlite3.connect(local_run) as conn:
        kept = sorted({s for (s,) in conn.execute("select step from trained_tokens")})
        group, idx, length, size = conn.execute(
            "select group_id, idx, length, length(tokens) + length(sampled) + length(trainer) "
            "+ length(advantage) + length(mask) + length(version) + length(entropy) "
            "from trained_tokens order by step desc limit 1"
        ).fetchone()
    (jsonl,) = local_run.parent.glob("*.metrics.jsonl")
    lines = [
        s
        for s in map(json.loads, jsonl.read_text().splitlines())
        if s["event"] == "step" and keys.KL_SAMPLE_TRAIN_V1 in s
    ]
    trained = [s["step"] for s in lines]
    assert len(trained) >= 2, trained  # a step before the last, to be forgotten
    assert kept == trained[-1:]  # keep_token_steps = 1
    # bytes, not JSON: at most 4 bytes a token in each of 7 arrays (less, packed), and
    # zlib's 11 bytes of framing per array
    assert size <= length * 25 + 7 * 11, (size, length)
    reader = await StoreReader.open_readonly(local_run)
    try:
        run = (await reader.runs())[0]
        step, tokens, pieces = await reader.trained_tokens(run.run_id, group, idx)
        assert await reader.trained_tokens(run.run_id, 10**6, 0) is None
    finally:
        await reader.close()
    assert step == trained[-1] and len(tokens.tokens) == length
    assert tokens.mask[0] == 1  # from the first sampled token on
    # on-policy: sampled by the version the step trained (the one before the step's own)
    assert set(tokens.version[tokens.mask == 1].tolist()) == {lines[-1]["policy_version"] - 1}
    assert np.all(tokens.version[tokens.mask == 0] == -1)
    assert np.allclose(
        tokens.sampled[tokens.mask == 1], tokens.trainer[tokens.mask == 1], atol=0.01
    )
    assert set(tokens.tokens.tolist()) <= set(pieces) and all(
        isinstance(p, str) for p in pieces.values()
    )
    assert any(p.strip() for p in pieces.values())


def test_through_the_sdk_the_keys_come_from_the_services_loss_fn_outputs(tmp_path, monkeypatch):
    """The real SDK against the service double: the trainer's logprobs are what the service
    answered in `loss_fn_outputs` (here shifted by 0.5 nats on the wire, so the mismatch
    must read +0.5), and the service gives no entropy, so `optim/entropy` is absent."""
    import tinker_double.wire as wire
    from tinker import types
    from tinker_double import TinkerDouble

    answer = wire.forward_backward_output

    def shifted(output: types.ForwardBackwardOutput) -> bytes:
        for out in output.loss_fn_outputs:
            if "logprobs" in out:
                lp = out["logprobs"].to_numpy() - 0.5
                out["logprobs"] = type(out["logprobs"]).from_numpy(lp.astype(np.float32))
        return answer(output)

    monkeypatch.setattr(wire, "forward_backward_output", shifted)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    db = tmp_path / "runs.db"
    with TinkerDouble(tmp_path / "service") as double:
        for name, value in double.env().items():
            monkeypatch.setenv(name, value)
        code = main(
            [
                "run",
                "example",
                "--backend",
                "tinker",
                "--no-ui",
                "--db",
                str(db),
                "--base-model",
                DEFAULT_BASE_MODEL,
                "--warmup-steps",
                "0",
                "--steps",
                "2",
                "--group-size",
                "4",
                "--groups-per-step",
                "2",
                "--rollout-workers",
                "1",
                "--max-steps-off-policy",
                "0",
                "--eval-every",
                "0",
            ]
        )
    assert code == 0
    with sqlite3.connect(db) as conn:
        metrics = [json.loads(m) for (m,) in conn.execute("select metrics from steps")]
        stored = conn.execute("select count(*) from trained_tokens").fetchone()[0]
    trained = [m for m in metrics if keys.KL_SAMPLE_TRAIN_V1 in m]
    assert trained, metrics
    for m in trained:
        assert all(k in m for k in MISMATCH_KEYS)
        assert m[keys.KL_SAMPLE_TRAIN_V1] == pytest.approx(0.5, abs=1e-3)
        assert m[keys.SAMPLE_TRAIN_DIFF_FRAC] == 1.0
        assert keys.ENTROPY not in m
    assert stored > 0


def test_entropy_left_unmeasured_is_not_averaged():
    nan = float("nan")
    m = mismatch_metrics([[-1.0, -1.0]], [[-1.0, -1.0]], [[1, 1]], entropy=[[2.0, nan]])
    assert m[keys.ENTROPY] == 2.0
    assert keys.ENTROPY not in mismatch_metrics([[-1.0]], [[-1.0]], [[1]], entropy=[[nan]])


def test_the_trainers_entropy_is_the_whole_distributions():
    """The chunked, fused computation against the plain one."""
    import torch

    from tinker_tui.engine.local import unembed

    torch.manual_seed(0)
    head = unembed.Head(weight=torch.randn(300, 16), bias=None, lora=None)
    hidden = torch.randn(7, 16)
    rows, targets = torch.arange(7), torch.randint(0, 300, (7,))
    entropy = torch.full((7,), float("nan"))
    unembed.fused_loss_backward(
        head, hidden, rows, targets, lambda lp, at: torch.ones_like(lp), entropy
    )
    logp = torch.log_softmax(hidden @ head.weight.t(), dim=-1)
    assert torch.allclose(entropy, -(logp.exp() * logp).sum(-1), atol=1e-4)


def test_a_batch_without_sampled_logprobs_has_no_mismatch():
    """`train` also takes supervised (cross_entropy) Datums: nothing was sampled."""
    import tinker

    from tinker_tui.engine.backend.datums import trainer_outputs as _trainer_outputs

    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": [2, 3], "weights": [1.0, 1.0]},
    )
    out = tinker.types.ForwardBackwardOutput(
        loss_fn_output_type="TensorData",
        metrics={},
        loss_fn_outputs=[
            {"logprobs": tinker.TensorData.from_numpy(np.array([-1.0, -2.0], np.float32))}
        ],
    )
    trainer, entropy, metrics = _trainer_outputs([datum], out)
    assert metrics == {} and entropy is None and trainer[0].tolist() == [-1.0, -2.0]
