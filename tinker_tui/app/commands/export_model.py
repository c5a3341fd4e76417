"""`tinker-tui export-model RUN@STEP DIR [--merge]`: a checkpoint as a Hugging Face folder
that `transformers` and `peft` load, so trained weights leave tinker-tui.

RUN@STEP, RUN (its newest checkpoint) or a ``tinker://`` path name the checkpoint
(`app.checkpoint_ref`). Without `--merge` DIR gets the LoRA adapter in peft's layout
(``adapter_model.safetensors``, ``adapter_config.json`` naming the base model; for the
embedded model a ``base/`` folder with its weights and tokenizer, which no hub has); with
`--merge`, one standalone model folder with the adapter added into the weights
(`engine.local.hf_export`). DIR must be new or empty. A Tinker checkpoint is downloaded
as the service exports it (`engine.backend.remote_export`; adapter only).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from tinker_tui.app.commands.common import EXIT_OK, add_db_option, store_path
from tinker_tui.engine.errors import UsageError


def add_parser(commands: Any) -> None:
    export = commands.add_parser(
        "export-model",
        help="write a checkpoint as a Hugging Face folder (peft adapter, or merged weights)",
        description="Write a checkpoint as a folder transformers + peft load: the LoRA "
        "adapter in peft's layout with a reference to its base model, or with --merge "
        "the full model with the adapter merged into its weights.",
    )
    export.add_argument(
        "checkpoint",
        metavar="RUN@STEP",
        help="RUN@STEP, RUN (its newest checkpoint) or a tinker:// path",
    )
    export.add_argument("out", metavar="DIR", type=Path, help="the folder to write (new or empty)")
    export.add_argument(
        "--merge",
        action="store_true",
        help="write full weights with the adapter merged in (no peft needed to load them)",
    )
    add_db_option(export)


def main(args: argparse.Namespace) -> int:
    from tinker_tui.app.checkpoint_ref import resolve

    ref = asyncio.run(resolve(store_path(args), args.checkpoint))
    if ref.backend == "tinker" or (not ref.backend and not _local(ref)):
        return export_remote(ref, args.out, merge=args.merge)
    from tinker_tui.engine.local import hf_export
    from tinker_tui.engine.local.errors import LocalBadRequestError, LocalNotFoundError

    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        done = hf_export.export(ref.checkpoint_dir, ref.path, args.out, merge=args.merge)
    except (LocalBadRequestError, LocalNotFoundError) as exc:
        raise UsageError(str(exc)) from exc
    form = "merged model" if done.merged else "peft adapter"
    print(f"wrote {ref.label} as a {form} to {done.folder} (base model {done.base_model})")
    for name in done.files:
        print(f"  {name}")
    if done.merged:
        print(f"load: AutoModelForCausalLM.from_pretrained({str(done.folder)!r})")
    else:
        print(f"load: AutoPeftModelForCausalLM.from_pretrained({str(done.folder)!r})")
    return EXIT_OK


def _local(ref: Any) -> bool:
    """Whether a path given as is names a model of the local backend beside the store (its
    checkpoint itself may be missing: that is then said as such)."""
    from tinker_tui.engine.checkpoint_paths import local_folder

    folder = local_folder(ref.checkpoint_dir, ref.path)
    return folder is not None and folder.parent.parent.is_dir()


def export_remote(ref: Any, out: Path, *, merge: bool) -> int:
    """A Tinker checkpoint: its Hugging Face files as the service exports them."""
    if merge:
        raise UsageError(
            f"--merge: {ref.label} is a Tinker checkpoint; export its adapter (without "
            "--merge) and merge it where the base model's weights are"
        )
    if "/sampler_weights/" in ref.path:
        raise UsageError(
            f"{ref.path} is sampler weights, which Tinker does not export; name a full "
            "checkpoint (tinker://.../weights/...)"
        )
    out = out.expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder; choose a new one")
    from tinker_tui.engine.backend.remote_export import download

    out.mkdir(parents=True, exist_ok=True)
    files = download(ref.path, out)
    print(f"wrote {ref.label} as the service exported it to {out}")
    for name in files:
        print(f"  {name}")
    return EXIT_OK
