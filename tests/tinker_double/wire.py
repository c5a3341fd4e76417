"""The double's protobuf side of the Tinker wire protocol, built on the SDK's own definitions.

The SDK encodes `forward_backward` requests with `tinker.proto.request_conv` and decodes
sample and forward_backward results with `tinker.proto.response_conv`; the service does the
reverse. These functions are that reverse, on the same `tinker_public_pb2` messages, and they
reuse the SDK's tensor decoder, so a field the SDK writes and this side misreads fails the
round-trip tests (tests/test_tinker_double.py) rather than passing silently.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.proto.response_conv import _tensor_data_from_proto

_STOP_REASON = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}


class WireError(ValueError):
    """A request body the double cannot read (answered with HTTP 400)."""


def forward_backward_request(body: bytes) -> tuple[types.ForwardBackwardRequest, bool]:
    """A `/api/v1/forward_backward` body -> (the SDK's request object, forward_only)."""
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # protobuf's DecodeError
        raise WireError(f"not a ForwardBackwardRequest protobuf: {exc}") from None
    data = []
    for index, datum in enumerate(msg.data):
        chunks = []
        for chunk in datum.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise WireError(f"datum {index}: only encoded_text chunks are served here")
            tokens = np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32)
            chunks.append(types.EncodedTextChunk(tokens=tokens.tolist()))
        inputs = {
            name: _tensor_data_from_proto(tensor) for name, tensor in datum.loss_fn_inputs.items()
        }
        read = types.Datum(model_input=types.ModelInput(chunks=chunks), loss_fn_inputs=inputs)
        if datum.model_input_spans or datum.loss_fn_input_spans:
            # As given (the service checks them), not through `with_provenance`, which
            # refuses a miscounted tiling before the service could explain it.
            read = dataclasses.replace(
                read,
                model_input_spans=[_span(s) for s in datum.model_input_spans],
                loss_fn_input_spans=[_span(s) for s in datum.loss_fn_input_spans],
            )
        data.append(read)
    config: dict[str, float | str] = {}
    for key, value in msg.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    for key, number in msg.loss_fn_config.items():
        config.setdefault(key, number)
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=data, loss_fn=msg.loss_fn, loss_fn_config=config or None
        ),
        model_id=msg.model_id,
        seq_id=msg.seq_id,
    )
    return request, msg.forward_only


def _span(msg: pb.ProvenanceSpan) -> types.PromptProvenanceSpan | types.SampledProvenanceSpan:
    """One provenance run as the SDK wrote it (`request_conv._write_provenance_span`)."""
    arm = msg.WhichOneof("span")
    if arm == "sampled_tokens":
        s = msg.sampled_tokens
        return types.SampledProvenanceSpan(
            sequence_id=s.sequence_id, offset=s.offset, length=s.length
        )
    if arm == "prompt_tokens":
        p = msg.prompt_tokens
        return types.PromptProvenanceSpan(
            sequence_id=p.sequence_id, offset=p.offset, length=p.length
        )
    raise WireError("a provenance span names neither prompt_tokens nor sampled_tokens")


def _topk(topk: types.TopkLogprobs | None, out: pb.TopkLogprobs) -> None:
    if topk is None:
        return
    ids = np.ascontiguousarray(topk.token_ids, dtype=np.int32)
    out.token_ids = ids.tobytes()
    out.logprobs = np.ascontiguousarray(topk.logprobs, dtype=np.float32).tobytes()
    out.length, out.k = ids.shape


def sample_response(response: types.SampleResponse) -> bytes:
    """A `SampleResponse` as the protobuf `retrieve_future` answers with."""
    msg = pb.SampleResponse()
    for sequence in response.sequences:
        seq = msg.sequences.add()
        seq.stop_reason = _STOP_REASON[sequence.stop_reason]
        seq.tokens = np.asarray(sequence.tokens, dtype=np.int32).tobytes()
        if sequence.logprobs is not None:
            seq.logprobs = np.asarray(sequence.logprobs, dtype=np.float32).tobytes()
        if sequence.topk_logprobs_np is not None:
            _topk(sequence.topk_logprobs_np, seq.topk_sampled_logprobs)
    if response.prompt_logprobs_np is not None:
        msg.prompt_logprobs = np.asarray(response.prompt_logprobs_np, dtype=np.float32).tobytes()
    if response.topk_prompt_logprobs_np is not None:
        _topk(response.topk_prompt_logprobs_np, msg.topk_prompt_logprobs)
    msg.prompt_cache_hit_tokens = response.prompt_cache_hit_tokens
    return msg.SerializeToString()


_DTYPES = {"float32": (pb.DTYPE_FLOAT32, np.float32), "int64": (pb.DTYPE_INT64, np.int64)}
#: The per-datum outputs the service answers: the local backend adds its own `entropy`,
#: which the service has no way to give (it never returns the distribution).
SERVICE_OUTPUTS = ("logprobs", "elementwise_loss")


def forward_backward_output(output: types.ForwardBackwardOutput) -> bytes:
    """A `ForwardBackwardOutput` as protobuf: one ArrayRecord of per-datum batched tensors."""
    msg = pb.ForwardBackwardOutput(
        loss_fn_output_type=output.loss_fn_output_type, metrics=dict(output.metrics)
    )
    outputs = output.loss_fn_outputs
    if outputs:
        record = msg.loss_fn_outputs.add(num_datums=len(outputs))
        for name in [n for n in outputs[0] if n in SERVICE_OUTPUTS]:
            dtype, np_dtype = _DTYPES[outputs[0][name].dtype]
            arrays = [np.asarray(o[name].to_numpy(), dtype=np_dtype) for o in outputs]
            trailing = list(arrays[0].shape[1:])
            offsets = np.cumsum([0] + [a.nbytes for a in arrays], dtype=np.int64)
            record.fields[name].CopyFrom(
                pb.BatchedTensor(
                    data=b"".join(a.tobytes() for a in arrays),
                    offsets=offsets.tobytes(),
                    dtype=dtype,
                    trailing_shape=trailing,
                )
            )
    return msg.SerializeToString()
