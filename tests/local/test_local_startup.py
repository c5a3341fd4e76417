"""Start-up cost of the embedded backend: what the example's path imports, and the role_colon
renderer built without loading every tinker-cookbook renderer."""

from __future__ import annotations

import pickle
import subprocess
import sys

from tinker_tui.engine.local import DEFAULT_BASE_MODEL, WordTokenizer

EXAMPLE_PATH = """
import asyncio, sys, tempfile
import tinker
import tinker_tui.engine.run, tinker_tui.app.headless
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.backend.session import BackendSession

async def main():
    session = BackendSession(LocalServiceClient(checkpoint_dir=tempfile.mkdtemp()),
                    base_model="tinker-tui/tiny-chat", lora_rank=4)
    await session.start()
    await session.train_supervised(
        [[{"role": "user", "content": "Is it?"}, {"role": "assistant", "content": "maybe"}]],
        learning_rate=1e-3)
    await session.publish()
    prompt = session.renderer.build_generation_prompt([{"role": "user", "content": "Is it?"}])
    await session.sample(prompt, 2, tinker.SamplingParams(max_tokens=3))

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] == "transformers" or m == "torch._dynamo"))
"""


def test_example_path_never_imports_transformers_or_dynamo():
    """Model build, renderer, a supervised step and sampling on the embedded model: importing
    transformers (about 100 MB) or torch._dynamo (torch.optim imports it: 70 MB) would cost
    seconds before the first step."""
    out = subprocess.run([sys.executable, "-c", EXAMPLE_PATH], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_role_colon_renderer_is_the_cookbooks():
    from tinker_cookbook.renderers import get_renderer

    from tinker_tui.engine.backend.choice import cookbook_renderer

    tokenizer = WordTokenizer(name_or_path=DEFAULT_BASE_MODEL)
    direct = cookbook_renderer("role_colon", tokenizer)
    reference = get_renderer("role_colon", tokenizer)
    assert type(direct) is type(reference)
    assert vars(direct).keys() == vars(reference).keys()
    for key, value in vars(reference).items():
        if key != "tokenizer":
            assert vars(direct)[key] == value, key
    messages = [{"role": "user", "content": "Is it?"}, {"role": "assistant", "content": "maybe"}]
    assert (
        direct.build_generation_prompt(messages[:1]).to_ints()
        == reference.build_generation_prompt(messages[:1]).to_ints()
    )
    from tinker_tui.engine.local.model import register_cookbook_tokenizers

    register_cookbook_tokenizers()  # unpickling looks the tokenizer up by name
    restored = pickle.loads(pickle.dumps(direct))
    assert type(restored) is type(reference)
    assert (
        restored.build_generation_prompt(messages[:1]).to_ints()
        == reference.build_generation_prompt(messages[:1]).to_ints()
    )
