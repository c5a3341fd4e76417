"""A sampling client that answers with given texts, for the policy server's tests on the
real-format fixture: each text is encoded by the policy's own tokenizer (special tokens
included), so a test decides exactly which tokens a turn sampled."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import tinker
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture


class Scripted:
    """Answers each request with the next text (`stop_reason` as given, whatever the
    request's stops), the same sequence for each of its samples; records the sampling
    params it was asked with."""

    def __init__(self, tokenizer, *texts, stop_reason: str = "length"):
        self.tokenizer, self.texts, self.params = tokenizer, list(texts), []
        self.stop_reason = stop_reason

    def sample(self, prompt, num_samples, sampling_params, **_):
        self.params.append(sampling_params)
        tokens = np.asarray(self.tokenizer.encode(self.texts.pop(0)), dtype=np.int32)
        future: Future = Future()
        future.set_result(
            tinker.SampleResponse(
                sequences=[
                    tinker.SampledSequence(
                        stop_reason=self.stop_reason,
                        sequence_id="s",
                        tokens_np=tokens,
                        logprobs_np=np.full(len(tokens), -0.5, dtype=np.float32),
                    )
                ]
                * num_samples
            )
        )
        return AwaitableConcurrentFuture(future)
