"""`tinker-tui eval TASK --model RUN[@STEP] | BASE`: evaluate fixed weights on a task.

The task's eval scenarios (or the first N training scenarios, `--split scenarios:N`) are
each rolled out k times (`-k`) on a run's checkpoint (RUN@STEP: its sampler weights at that
step; RUN alone: its latest kept checkpoint) or on a base model as it is. The result is
pass@1, pass@k (unbiased estimator of Chen et al. 2021; a sample succeeds when its reward is
at least `--success-threshold`) and mean@k, each with a 95 % interval (Wilson for pass@k
over scenarios solved or not, a percentile bootstrap over scenarios for pass@1 and mean@k),
under a protocol that is stored with it: the pinned sampling settings (`--eval-temperature`
for every request, the task's own included; `--eval-max-tokens` as a cap on each
request's), the renderer and whether it thinks, the split, k and the threshold.

Every rollout is kept in the run store as it ends: the same command again runs only the
rollouts that are missing or failed (a larger -k adds samples to those stored).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.app.commands.common import (
    BACKENDS,
    EXIT_OK,
    add_db_option,
    one_of,
    store_path,
)
from tinker_tui.app.json_output import add_json_option
from tinker_tui.engine.errors import UsageError

if TYPE_CHECKING:
    from tinker_tui.engine.store.eval_records import EvalTarget
    from tinker_tui.engine.training.standalone_eval import EvalResult

#: Samples per scenario when -k is not given.
DEFAULT_K = 8
DEFAULT_TEMPERATURE = 1.0
DEFAULT_MAX_TOKENS = 1024


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 2.0:
        raise argparse.ArgumentTypeError(f"expected 0 to 2, got {value:g}")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def add_parser(commands: Any) -> None:
    ev = commands.add_parser(
        "eval",
        help="evaluate a run's checkpoint or a base model: pass@k, mean@k, intervals",
        description="Roll out the task's eval scenarios k times each on a run's checkpoint "
        "(RUN@STEP) or a base model, and report pass@1, pass@k and mean@k with 95% "
        "intervals under a stored protocol. Resumable: the same command again runs only "
        "the rollouts that are missing or failed.",
    )
    ev.add_argument("task", metavar="TASK", help="a built-in task, a task file or a module")
    ev.add_argument(
        "--model",
        required=True,
        metavar="RUN[@STEP]|BASE",
        help="a run id (or unique prefix) with an optional @STEP (default its latest kept "
        "checkpoint), or a base model's name",
    )
    ev.add_argument(
        "-k",
        "--samples",
        dest="k",
        type=_positive_int,
        default=DEFAULT_K,
        metavar="K",
        help=f"samples per scenario (default {DEFAULT_K})",
    )
    ev.add_argument(
        "--split",
        default="eval_scenarios",
        metavar="SPLIT",
        help="eval_scenarios (default), or scenarios:N for the first N training scenarios",
    )
    ev.add_argument(
        "--eval-temperature",
        type=_temperature,
        default=DEFAULT_TEMPERATURE,
        metavar="T",
        help=f"temperature of every request, pinned (default {DEFAULT_TEMPERATURE:g})",
    )
    ev.add_argument(
        "--eval-max-tokens",
        type=_positive_int,
        default=DEFAULT_MAX_TOKENS,
        metavar="N",
        help=f"cap on each request's max_tokens (default {DEFAULT_MAX_TOKENS})",
    )
    ev.add_argument(
        "--success-threshold",
        type=_number,
        default=1.0,
        metavar="R",
        help="a sample succeeds when its reward is at least R (default 1), for pass@k",
    )
    ev.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the scenarios:N stream"
    )
    ev.add_argument(
        "--backend",
        type=one_of(BACKENDS),
        choices=BACKENDS,
        help="for a base model: local or tinker (default: tinker when TINKER_API_KEY is set); "
        "a run's checkpoint uses the run's",
    )
    ev.add_argument(
        "--renderer",
        default="",
        metavar="NAME",
        help="for a base model: the tinker-cookbook renderer (default chosen from the "
        "model); a run's checkpoint uses the run's",
    )
    ev.add_argument(
        "--concurrency",
        type=_positive_int,
        default=16,
        metavar="N",
        help="rollouts in flight at once (default 16)",
    )
    ev.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    add_db_option(ev)
    add_json_option(ev, "eval")


async def resolve_target(
    db_path: Path, model: str, *, task: str, task_spec: str, backend: str | None
) -> tuple[EvalTarget, str, int]:
    """What `--model` names, the renderer and LoRA rank to load it with: a stored run's
    checkpoint (RUN or RUN@STEP), else a base model (only without @STEP)."""
    from tinker_tui.engine.store import NoSuchRun, StoreReader
    from tinker_tui.engine.store.eval_records import EvalTarget

    wanted, at, step_text = model.rpartition("@") if "@" in model else (model, "", "")
    step: int | None = None
    if at:
        if not step_text.isdigit():
            raise UsageError(f"--model {model}: the step after @ must be a whole number")
        step = int(step_text)
    run = None
    if db_path.is_file():
        async with await StoreReader.open_readonly(db_path) as store:
            try:
                run = await store.find_run(wanted)
            except NoSuchRun:
                if at:
                    raise
            if run is not None:
                checkpoints = await store.kept_checkpoints(run.run_id)
    elif at:
        raise UsageError(f"--model {model}: no run store at {db_path} (give --db)")
    if run is None:
        from tinker_tui.engine.backend.choice import check_base_model, choose_backend

        chosen = choose_backend(backend)
        check_base_model(chosen, wanted)
        target = EvalTarget(
            task=task, task_spec=task_spec, model=wanted, backend=chosen, base_model=wanted
        )
        return target, "", 32
    samplers = [c for c in checkpoints if c.kind == "sampler"] or list(checkpoints)
    if not samplers:
        raise UsageError(f"run {run.run_id} has no kept checkpoint to evaluate")
    if step is None:
        chosen_ckpt = samplers[-1]
    else:
        at_step = [c for c in samplers if c.step == step]
        if not at_step:
            steps = ", ".join(str(c.step) for c in samplers)
            raise UsageError(
                f"run {run.run_id} has no kept checkpoint at step {step} (kept: {steps})"
            )
        chosen_ckpt = at_step[-1]
    config = run.config
    target = EvalTarget(
        task=task,
        task_spec=task_spec,
        model=f"{run.run_id}@{chosen_ckpt.step}",
        backend=run.backend,
        base_model=run.base_model,
        model_path=chosen_ckpt.path,
        run_id=run.run_id,
        step=chosen_ckpt.step,
    )
    return target, str(config.get("renderer") or ""), int(config.get("lora_rank") or 32)


def main(args: argparse.Namespace) -> int:
    from tinker_tui.app.commands.run import check_store, load_task
    from tinker_tui.app.task_loader import spec_to_store
    from tinker_tui.engine.training.standalone_eval import scenarios_count

    if args.split != "eval_scenarios":
        scenarios_count(args.split)  # UsageError now for a bad split
    task = load_task(args.task)
    path = store_path(args)
    check_store(path, explicit=args.db is not None)
    target, renderer, rank = asyncio.run(
        resolve_target(
            path,
            args.model,
            task=task.name,
            task_spec=spec_to_store(args.task),
            backend=args.backend,
        )
    )
    if target.run_id and (args.backend or args.renderer):
        given = "--backend" if args.backend else "--renderer"
        raise UsageError(f"{given} is for a base model; {target.model} uses its run's")
    renderer = renderer or args.renderer
    result = asyncio.run(_evaluate(args, task, target, renderer, rank, path))
    if args.json:
        from tinker_tui.app.json_output import print_json

        print_json(eval_document(result))
    else:
        print(format_result(result))
    return EXIT_OK


async def _evaluate(
    args: argparse.Namespace,
    task: Any,
    target: EvalTarget,
    renderer: str,
    rank: int,
    path: Path,
) -> EvalResult:
    from tinker_tui.engine.backend.choice import renderer_name
    from tinker_tui.engine.checkpoint_paths import run_checkpoint_dir
    from tinker_tui.engine.training.eval_protocol import EvalProtocol
    from tinker_tui.engine.training.standalone_eval import StandaloneEval

    protocol = EvalProtocol.build(
        # named as the session will name it at its start (a model folder's, by its template)
        renderer_name(target.base_model, renderer or None),
        temperature=args.eval_temperature,
        max_tokens=args.eval_max_tokens,
        k=args.k,
        split=args.split,
        success_threshold=args.success_threshold,
        seed=args.seed,
    )
    progress = Progress(enabled=not args.no_progress and not args.json)
    evaluation = StandaloneEval(
        task=task,
        target=target,
        protocol=protocol,
        db_path=path,
        checkpoint_dir=run_checkpoint_dir(path),
        renderer=renderer,
        lora_rank=rank,
        on_progress=progress.update,
        on_log=lambda level, message: print(f"{level}: {message}", file=sys.stderr),
        concurrency=args.concurrency,
    )
    try:
        return await evaluation.run()
    finally:
        progress.end()


class Progress:
    """One line on stderr, redrawn in place on a terminal (a line per tenth elsewhere)."""

    def __init__(self, *, enabled: bool, out: Any = None) -> None:
        self.out = out or sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.out.isatty()
        self.started = time.monotonic()
        self._last_tenth = -1
        self._drawn = False

    def update(self, done: int, total: int, failed: int) -> None:
        if not self.enabled or total <= 0:
            return
        width = 24
        filled = int(width * done / total)
        bar = "#" * filled + "." * (width - filled)
        elapsed = time.monotonic() - self.started
        line = (
            f"eval [{bar}] {done}/{total} rollouts"
            + (f", {failed} failed" if failed else "")
            + f"  {elapsed:.0f}s"
        )
        if self.tty:
            self.out.write("\r" + line)
            self._drawn = True
        else:
            tenth = 10 * done // total
            if tenth == self._last_tenth:
                return
            self._last_tenth = tenth
            self.out.write(line + "\n")
        self.out.flush()

    def end(self) -> None:
        if self._drawn:
            self.out.write("\n")
            self.out.flush()


def eval_document(result: EvalResult) -> dict[str, Any]:
    """`eval --json` (`app.json_output`)."""
    from dataclasses import asdict

    from tinker_tui.app.json_output import document

    target = asdict(result.target)
    return document(
        "eval",
        eval_id=result.eval_id,
        model=target,
        protocol=result.protocol.as_dict(),
        protocol_key=result.protocol.key(),
        result=result.summary.as_dict(),
        rollouts={"ran": result.ran, "reused": result.reused, "failed": result.summary.failed},
        first_error=result.first_error or None,
    )


def format_result(result: EvalResult) -> str:
    """The result as a table, with the protocol and the intervals said in words."""
    s = result.summary
    # with k = 1, pass@k is pass@1, over scenarios solved or not (as --json has it): once
    rows = [("pass@1", s.pass_at_1)] if s.k > 1 else []
    rows += [(f"pass@{s.k}", s.pass_at_k), (f"mean@{s.k}", s.mean)]
    lines = [
        f"eval {result.eval_id}: {result.target.task} on {result.target.model} "
        f"({result.target.backend})",
        f"protocol {result.protocol.key()}: {result.protocol.text()}",
        f"{s.scenarios} scenarios x {s.k} samples: {result.ran} rollouts ran now, "
        f"{result.reused} kept from before" + (f", {s.failed} failed" if s.failed else ""),
        "",
        f"{'METRIC':<10}{'VALUE':>8}  {'95% INTERVAL':<18}  METHOD",
    ]
    for name, interval in rows:
        low_high = f"[{interval.low:.3f}, {interval.high:.3f}]"
        lines.append(f"{name:<10}{interval.value:>8.3f}  {low_high:<18}  {interval.method}")
    lines.append(
        "wilson95: Wilson score interval over scenarios (solved or not); bootstrap95: "
        "percentile bootstrap over scenarios (2000 resamples)"
    )
    if result.first_error:
        lines.append(f"first failure: {result.first_error}")
    return "\n".join(lines)
