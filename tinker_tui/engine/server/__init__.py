"""The in-process OpenAI-compatible server that rollouts call.

FastAPI on uvicorn, in the same process and event loop as the pipeline, bound to 127.0.0.1
on a free port and guarded by a random per-run bearer token.

Every request parameter is honoured or refused with an OpenAI-shaped 4xx error, never
silently dropped: model, messages (system, developer, user, assistant with tool_calls, tool),
n, temperature, top_p, max_tokens / max_completion_tokens, stop, seed, logprobs /
top_logprobs, tools / tool_choice (auto, none, required, or a named function) /
parallel_tool_calls, stream / stream_options.include_usage, and the no-op values
frequency_penalty = presence_penalty = 0 and response_format = {"type": "text"}.

Each choice also carries the exact token ids, their logprobs and the policy version that
produced them, so the trainer never re-tokenizes text (extension fields, on the choice):
`prompt_token_ids` (the rendered prompt, including any prefilled tokens), `token_ids` (the
sampled tokens), `token_logprobs`, `policy_version`. When streaming they arrive on each
choice's final chunk (the one with a finish_reason).

The same completions are served in OpenAI's Responses API (`/v1/responses`) and Anthropic's
Messages API (`/v1/messages`), translated onto this path (`responses_api`, `messages_api`),
and every path also answers under `/r/<key>/`, which files its replies under that
trajectory (`capture`), for rollouts that return only a reward.

Where things are:
- `schema`: what a request may hold (strict pydantic models) and `RequestError`;
- `tools`: the text tool protocol for renderers without a tool format;
- `handler`: messages -> prompt tokens -> sampling -> choices;
- `app`: the routes, the token check, and `PolicyServer` (uvicorn).
"""

from tinker_tui.engine.server.app import PolicyServer, create_app
from tinker_tui.engine.server.handler import PolicySource
from tinker_tui.engine.server.schema import RequestError
from tinker_tui.engine.server.tools import TOOLS_HEADER, parse_text_tool_calls

__all__ = [
    "TOOLS_HEADER",
    "PolicyServer",
    "PolicySource",
    "RequestError",
    "create_app",
    "parse_text_tool_calls",
]
