"""A sampling client that answers with given texts, for the policy server's tests on the
real-format fixture: each text is encoded by the policy's own tokenizer (special tokens
included), so a test decides exactly which tokens a turn sampled."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import tinker
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture


class Scripted:
    """Answers each request with the next text (the last one answers every request after
    it; `stop_reason` as given, whatever the request's stops), the same tokens for each of
    its samples; records the sampling params it was asked with."""

    def __init__(self, tokenizer, *texts, stop_reason: str = "length"):
        self.tokenizer, self.texts, self.params = tokenizer, list(texts), []
        self.stop_reason = stop_reason

    def sample(self, prompt, num_samples, sampling_params, **_):
        self.params.append(sampling_params)
        text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
        tokens = np.asarray(self.tokenizer.encode(text, add_special_tokens=False), dtype=np.int32)
        future: Future = Future()
        future.set_result(
            tinker.SampleResponse(
                sequences=[
                    tinker.SampledSequence(
                        stop_reason=self.stop_reason,
                        sequence_id=f"s{i}",
                        tokens_np=tokens,
                        logprobs_np=np.full(len(tokens), -0.5, dtype=np.float32),
                    )
                    for i in range(num_samples)
                ]
            )
        )
        return AwaitableConcurrentFuture(future)
