"""Datums: what a training step sends the backend, built from trajectory groups (RL) or
conversations (supervised), the KL penalty's new advantages, and what `forward_backward`
answered about them (the trainer's logprobs and the sampler/trainer mismatch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import tinker

from tinker_tui.engine.errors import TinkerTuiError
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics import mismatch
from tinker_tui.engine.rollouts.trajectory import (
    ProvenanceRun,
    TrajectoryGroup,
    trajectory_to_datum_arrays,
)


def loss_inputs(**arrays: Sequence[float]) -> tinker.types.LossFnInputs:
    """Per-token loss inputs as plain lists: `tinker.Datum` turns each into its TensorData
    (with the dtype its key needs), though its annotation names only TensorData."""
    return cast("tinker.types.LossFnInputs", dict(arrays))


def rl_datum(
    model_input: list[int], target_tokens: list[int], logprobs: list[float], advantages: list[float]
) -> tinker.Datum:
    """An RL Datum (the inputs every RL loss takes)."""
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(model_input),
        loss_fn_inputs=loss_inputs(
            target_tokens=target_tokens, logprobs=logprobs, advantages=advantages
        ),
    )


def _spans(runs: Sequence[ProvenanceRun]) -> list[Any]:
    return [
        (tinker.SampledProvenanceSpan if r.kind == "sampled" else tinker.PromptProvenanceSpan)(
            sequence_id=r.sequence_id, offset=r.offset, length=r.length
        )
        for r in runs
        if r.length > 0
    ]


def with_provenance(datum: tinker.Datum, runs: Sequence[ProvenanceRun]) -> tinker.Datum:
    """`datum` (built from the sequence the runs tile, shifted by one) naming the sampled
    sequence behind each of its tokens: its input drops the sequence's last token, its
    targets the first (StableReinforce reads the sampler's records through them)."""
    head = list(runs)
    last = head[-1]
    head[-1] = ProvenanceRun(last.kind, last.sequence_id, last.offset, last.length - 1)
    tail = list(runs)
    first = tail[0]
    tail[0] = ProvenanceRun(first.kind, first.sequence_id, first.offset + 1, first.length - 1)
    return datum.with_provenance(model_input=_spans(head), loss_fn_inputs=_spans(tail))


def carry_provenance(new: tinker.Datum, old: tinker.Datum) -> tinker.Datum:
    """`new` (the same tokens as `old`, other loss inputs) with `old`'s provenance."""
    if old.loss_fn_input_spans is None or old.model_input_spans is None:
        return new
    return new.with_provenance(
        model_input=old.model_input_spans, loss_fn_inputs=old.loss_fn_input_spans
    )


class MissingProvenance(TinkerTuiError, ValueError):
    """A trajectory whose sampled turns do not say which sequence they were."""


class DatumBatch(list):  # type: ignore[type-arg]
    """The Datums of one training step (a list), with metrics about how they were built and,
    per Datum, which of its targets were sampled (1.0) rather than context (0.0)."""

    metrics: dict[str, float]
    masks: list[list[float]]
    #: Per Datum: (group id, index in the group) of the trajectory it trains, and per
    #: target the policy version that sampled it (-1 for context); empty when not known.
    sources: list[tuple[int, int]]
    versions: list[list[int]]

    def __init__(
        self,
        datums: Sequence[tinker.Datum] = (),
        metrics: Mapping[str, float] | None = None,
        masks: Sequence[Sequence[float]] | None = None,
        sources: Sequence[tuple[int, int]] = (),
        versions: Sequence[Sequence[int]] = (),
    ) -> None:
        super().__init__(datums)
        self.metrics = dict(metrics or {})
        self.masks = [list(m) for m in masks] if masks is not None else []
        self.sources = list(sources)
        self.versions = [list(v) for v in versions]


def build_datums(groups: Sequence[TrajectoryGroup], provenance: bool = False) -> DatumBatch:
    """Datums for every sampled assistant turn, weighted by its group-relative advantage.

    The turns of one trajectory share a Datum while each prompt extends what was sampled
    before it (see `trajectory_to_datum_arrays`); `metrics` counts the turns and the
    prefix mismatches that split a trajectory into several Datums. With `provenance` each
    Datum names the sampled sequences behind its tokens (`with_provenance`); a turn whose
    sequence id is not known fails the build (`MissingProvenance`).
    """
    datums: list[tinker.Datum] = []
    masks: list[list[float]] = []
    sources: list[tuple[int, int]] = []
    versions: list[list[int]] = []
    turns = mismatches = 0
    for group in groups:
        for index, (trajectory, advantage) in enumerate(
            zip(group.trajectories, group.advantages(), strict=True)
        ):
            arrays = trajectory_to_datum_arrays(trajectory.turns, advantage)
            turns += arrays.turns
            mismatches += arrays.prefix_mismatches
            for example in arrays.examples:
                datum = rl_datum(
                    list(example["model_input"]),
                    list(example["target_tokens"]),
                    list(example["logprobs"]),
                    list(example["advantages"]),
                )
                if provenance:
                    runs = cast("list[ProvenanceRun]", example["provenance"])
                    if not runs:
                        raise MissingProvenance(
                            f"group {group.group_id}: a sampled turn has no sequence id, so "
                            "stable_reinforce cannot name it (sample through this run's server)"
                        )
                    datum = with_provenance(datum, runs)
                datums.append(datum)
                masks.append(list(example["mask"]))
                sources.append((group.group_id, index))
                versions.append(list(example["versions"]))
    return DatumBatch(
        datums,
        {keys.TRAIN_TURNS: float(turns), keys.TRAIN_PREFIX_MISMATCH: float(mismatches)},
        masks,
        sources,
        versions,
    )


def supervised_datums(
    renderer: Any, conversations: Sequence[Sequence[Mapping[str, Any]]]
) -> list[tinker.Datum]:
    """One cross-entropy Datum per conversation (its last assistant turn trained)."""
    datums = []
    for messages in conversations:
        model_input, weights = renderer.build_supervised_example(list(messages))
        tokens = model_input.to_ints()
        weight_list = [float(w) for w in weights.tolist()]
        datums.append(
            tinker.Datum(
                model_input=tinker.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs=loss_inputs(target_tokens=tokens[1:], weights=weight_list[1:]),
            )
        )
    return datums


def kl_penalized_advantages(
    advantages: Sequence[Sequence[float]],
    sampled_logprobs: Sequence[Sequence[float]],
    base_logprobs: Sequence[Sequence[float]],
    masks: Sequence[Sequence[float]],
    coef: float,
) -> tuple[list[list[float]], float]:
    """The KL penalty against the base model, as tinker-cookbook's `incorporate_kl_penalty`
    applies it: per sampled token, d = logp_sampled - logp_base; the advantage of that token
    gains coef * (mean d over every sampled token of the batch - d). Tokens the base finds
    much less likely than the policy did are pushed down, the others up; the batch's mean
    advantage is unchanged. Returns the new advantages and the mean d (an estimate of
    KL(policy || base) on the sampled tokens)."""
    diffs = [
        [(s - b) * m for s, b, m in zip(sampled, base, mask, strict=True)]
        for sampled, base, mask in zip(sampled_logprobs, base_logprobs, masks, strict=True)
    ]
    count = sum(sum(mask) for mask in masks)
    mean = sum(sum(d) for d in diffs) / count if count else 0.0
    new = [
        [a + coef * m * (mean - d) for a, d, m in zip(adv, diff, mask, strict=True)]
        for adv, diff, mask in zip(advantages, diffs, masks, strict=True)
    ]
    return new, mean


def trainer_outputs(
    datums: Sequence[tinker.Datum], fb: Any
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...] | None, dict[str, float]]:
    """The trainer's per-target logprobs (and entropy, where the backend answered it) from a
    `forward_backward` result, and the step's mismatch metrics against the sampled logprobs
    (`engine.metrics.mismatch`); nothing when the result has no per-datum logprobs."""
    outputs = list(getattr(fb, "loss_fn_outputs", None) or ())
    if len(outputs) != len(datums) or not all("logprobs" in o for o in outputs):
        return (), None, {}
    trainer = tuple(np.asarray(o["logprobs"].to_numpy(), dtype=np.float32) for o in outputs)
    entropy = (
        tuple(np.asarray(o["entropy"].to_numpy(), dtype=np.float32) for o in outputs)
        if all("entropy" in o for o in outputs)
        else None
    )
    if not all("logprobs" in d.loss_fn_inputs and "advantages" in d.loss_fn_inputs for d in datums):
        return trainer, entropy, {}  # not an RL batch (cross_entropy): nothing was sampled
    sampled = [np.asarray(d.loss_fn_inputs["logprobs"].to_numpy()) for d in datums]
    masks = (
        datums.masks
        if isinstance(datums, DatumBatch) and datums.masks
        else [np.asarray(d.loss_fn_inputs["advantages"].to_numpy()) != 0 for d in datums]
    )
    return trainer, entropy, mismatch.mismatch_metrics(sampled, trainer, masks, entropy)
