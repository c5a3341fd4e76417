"""`tinker-tui chat RUN[@STEP]`: talk to a checkpoint of a run, in the run's own format.

The fastest way to see what a reward curve means: the run's backend, model and renderer,
loaded from one of its kept checkpoints (the newest by default; `@STEP` picks one, `@0` the
base weights), multi-turn, with the sampling settings adjustable as you go. `--message` (given
once per turn) answers without the chat window, for a script or a quick look."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.app.commands.common import EXIT_OK, add_db_option, store_path

if TYPE_CHECKING:
    from tinker_tui.engine.chat_policy import ChatTarget


def add_parser(commands: Any) -> None:
    chat = commands.add_parser(
        "chat",
        help="talk to a checkpoint of a run",
        description="Talk to a kept checkpoint of a run (RUN@STEP; the newest by default, "
        "@0 for the base weights), with the run's backend, model and renderer.",
    )
    chat.add_argument(
        "run", metavar="RUN[@STEP]", help="a run id, a unique prefix or 'latest', and a step"
    )
    add_db_option(chat)
    chat.add_argument("--temperature", type=float, default=None, help="default: the run's")
    chat.add_argument("--max-tokens", type=int, default=None, help="default: the run's")
    chat.add_argument("--system", metavar="TEXT", help="a system message to start with")
    chat.add_argument(
        "--tools",
        type=Path,
        metavar="FILE",
        help="a JSON file of tools (the OpenAI chat format) the model may call",
    )
    chat.add_argument(
        "--message",
        action="append",
        metavar="TEXT",
        help="say this and print the answer, without the chat window (again for each turn)",
    )


def split_ref(ref: str) -> tuple[str, int | None]:
    """`RUN@STEP` as (run, step); no `@STEP`: (run, None), the newest checkpoint."""
    from tinker_tui.engine.errors import UsageError

    run, at, step = ref.rpartition("@")
    if not at:
        return ref, None
    if not step.isdigit():
        raise UsageError(f"{ref}: the step after @ must be a number (RUN@STEP, @0 the base)")
    return run or "latest", int(step)


async def resolve_target(db_path: Path, ref: str) -> ChatTarget:
    """The run and checkpoint `ref` names; UsageError naming the kept steps otherwise."""
    from tinker_tui.engine.chat_policy import ChatTarget
    from tinker_tui.engine.checkpoint_paths import run_checkpoint_dir
    from tinker_tui.engine.config import SETTINGS, RunConfig
    from tinker_tui.engine.errors import UsageError
    from tinker_tui.engine.store import StoreReader

    wanted, step = split_ref(ref)
    async with await StoreReader.open_readonly(db_path) as store:
        run = await store.find_run(wanted)
        points = await store.resume_points(run.run_id)
    config = RunConfig().with_overrides({k: v for k, v in run.config.items() if k in SETTINGS})
    base = ChatTarget(
        run_id=run.run_id,
        backend=run.backend or "local",
        config=config,
        checkpoint_dir=run_checkpoint_dir(db_path),
    )
    if step == 0:
        return base
    kept = [p for p in points if step is None or p["step"] == step]
    if not kept:
        steps = ", ".join(str(p["step"]) for p in sorted(points, key=lambda p: p["step"]))
        have = f"its kept checkpoints are at steps {steps}" if steps else "it kept none"
        raise UsageError(f"run {run.run_id} has no checkpoint at step {step}: {have} (@0: base)")
    point = kept[0]  # newest first
    return ChatTarget(
        run_id=run.run_id,
        backend=base.backend,
        config=config,
        checkpoint_dir=base.checkpoint_dir,
        step=int(point["step"]),
        checkpoint=str(point["name"]),
        path=str(point["path"]),
        version=int(point["resume_state"].get("policy_version", point["step"])),
    )


def read_tools(path: Path | None) -> list[dict[str, Any]] | None:
    from tinker_tui.engine.errors import UsageError

    if path is None:
        return None
    try:
        tools = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--tools {path}: {exc}") from None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise UsageError(f"--tools {path}: a JSON list of tools, as the chat API takes them")
    return tools


async def answer_messages(target: ChatTarget, args: argparse.Namespace) -> int:
    """`--message`: each turn in order, its answer printed."""
    from tinker_tui.engine.chat_policy import ChatPolicy

    tools = read_tools(args.tools)
    policy = await ChatPolicy.open(target)
    try:
        print(f"chat with {target.label} ({policy.renderer} renderer)")
        history: list[dict[str, Any]] = (
            [{"role": "system", "content": args.system}] if args.system else []
        )
        for text in args.message:
            history.append({"role": "user", "content": text})
            reply = await policy.reply(
                history,
                temperature=_or(args.temperature, target.config.temperature),
                max_tokens=_or(args.max_tokens, target.config.max_tokens),
                tools=tools,
            )
            history.append({"role": "assistant", "content": reply.content})
            print(f"> {text}")
            print(reply.content)
            for call in reply.tool_calls:
                print(f"[tool call] {call['name']}({call['arguments']})")
            print(f"({reply.tokens} tokens, {reply.finish_reason})")
    finally:
        await policy.close()
    return EXIT_OK


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def main(args: argparse.Namespace) -> int:
    from tinker_tui.engine.errors import UsageError

    db_path = store_path(args)
    if not db_path.is_file():
        raise UsageError(f"no run store at {db_path}")
    if args.temperature is not None and not 0 <= args.temperature <= 2:
        raise UsageError(f"--temperature must be in [0, 2], got {args.temperature}")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    read_tools(args.tools)  # a bad file is said before the model loads
    target = asyncio.run(resolve_target(db_path, args.run))
    if args.message:
        return asyncio.run(answer_messages(target, args))
    from tinker_tui.app.screens.chat import ChatApp

    app = ChatApp(
        target,
        temperature=_or(args.temperature, target.config.temperature),
        max_tokens=_or(args.max_tokens, target.config.max_tokens),
        system=args.system or "",
        tools=read_tools(args.tools),
    )
    app.run()
    return EXIT_OK
